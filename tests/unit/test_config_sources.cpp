// data.train as a path or a list of {path, weight} sources: parsing, --set, the resolved config's YAML
// round trip, and errors that name the file, line and key.
#include "core/config.h"
#include "core/error.h"
#include "test_util.h"

using loom::test::config_error;

TEST_CASE("config sources: data.train is a path or a list of weighted sources", "[config]") {
  using loom::DataSource;
  auto sources = [](const loom::Config& c) {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& s : c.data.train) out.emplace_back(s.path, s.weight);
    return out;
  };
  using Sources = std::vector<std::pair<std::string, double>>;
  CHECK(sources(loom::parse_config("data:\n  train: datasets/kjv/train.bin\n", "x.yaml")) ==
        Sources{{"datasets/kjv/train.bin", 1.0}});
  CHECK(loom::parse_config("data:\n  train:\n", "x.yaml").data.train.empty());
  const std::string mixture =
      "data:\n"
      "  train:\n"
      "    - {path: datasets/web, weight: 0.7}\n"
      "    - path: datasets/books\n"
      "      weight: 0.3\n"
      "    - datasets/code\n";
  const auto c = loom::parse_config(mixture, "x.yaml");
  CHECK(sources(c) == Sources{{"datasets/web", 0.7}, {"datasets/books", 0.3}, {"datasets/code", 1.0}});
  CHECK(c.where("data.train") == "x.yaml:2");
  // The resolved config reads back to the same sources; one unweighted source stays a plain path.
  CHECK(sources(loom::parse_config(loom::to_yaml(c), "resolved.yaml")) == sources(c));
  CHECK(loom::config_value_text(c, "data.train") ==
        "[{path: datasets/web, weight: 0.7}, {path: datasets/books, weight: 0.3}, {path: datasets/code, weight: 1}]");
  CHECK(loom::config_value_text(loom::parse_config("data:\n  train: a.bin\n", "x.yaml"), "data.train") == "a.bin");
  // --set takes either form.
  CHECK(sources(loom::parse_config("", "x.yaml", {"data.train=[{path: a, weight: 2}, {path: b, weight: 1}]"})) ==
        Sources{{"a", 2.0}, {"b", 1.0}});
  CHECK(sources(loom::parse_config(mixture, "x.yaml", {"data.train=plain.bin"})) == Sources{{"plain.bin", 1.0}});
}

TEST_CASE("config sources: bad sources are refused naming file:line and the key", "[config]") {
  CHECK_THAT(config_error("data:\n  train:\n    - {path: a, weight: 1}\n    - {path: b, wieght: 2}\n"),
             Catch::StartsWith("x.yaml:4: data.train[1].wieght: unknown key (a data source has path and weight)"));
  CHECK_THAT(config_error("data:\n  train:\n    - {path: a}\n    - {weight: 2}\n"),
             Catch::StartsWith("x.yaml:4: data.train[1]: a data source needs a path"));
  CHECK_THAT(config_error("data:\n  train:\n    - path: a\n      weight: lots\n"),
             Catch::StartsWith("x.yaml:4: data.train[0].weight: expected a finite number, got 'lots'"));
  CHECK_THAT(config_error("data:\n  train:\n    - [a, b]\n"),
             Catch::StartsWith("x.yaml:3: data.train[0]: expected a path or a {path, weight} mapping, got a list"));
  CHECK_THAT(config_error("data:\n  train: {path: a}\n"),
             Catch::StartsWith("x.yaml:2: data.train: expected a path or a list of {path, weight} sources, got a mapping"));
  CHECK_THAT(config_error("data:\n  train: [{path: a, weight: 0}]\n"),
             Catch::Contains("x.yaml:2: data.train: source 0 (a) has weight 0: weights must be > 0"));
  CHECK_THAT(config_error("data:\n  train: [{path: a, weight: 1}, {path: a, weight: 2}]\n"),
             Catch::Contains("data.train: sources 0 and 1 are both a: list it once"));
  CHECK_THAT(config_error("model:\n  arch: transformer\n  d_model: 32\n  n_heads: 2\n"
                          "data:\n  train: [{path: a}, {path: b}]\n  synthetic: reverse\n"),
             Catch::Contains("x.yaml:6: data.train: data.synthetic makes its own pairs: a mixture of data.train files would not be read"));
  CHECK_THAT(config_error("", {"data.train=[{path: a, weight: -1}]"}),
             Catch::Contains("--set data.train=[{path: a, weight: -1}]: data.train: source 0 (a) has weight -1"));
}
