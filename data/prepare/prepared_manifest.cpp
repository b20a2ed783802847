#include "data/prepare/prepared_manifest.h"

#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare/document_encoder.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "loom-prepared";
constexpr int kManifestVersion = 1;

nlohmann::json shard_json(const ShardInfo& s) {
  nlohmann::json j = {{"tokens_file", s.tokens_file}, {"index_file", s.index_file}, {"tokens", s.tokens},
                      {"documents", s.documents},     {"data_crc32", s.data_crc}};
  if (!s.mask_file.empty()) {  // SFT data only: a manifest without a mask reads as before
    j["mask_file"] = s.mask_file;
    j["loss_tokens"] = s.loss_tokens;
  }
  return j;
}

}  // namespace

nlohmann::json manifest_json(const PreparedManifest& m) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& i : m.inputs)
    inputs.push_back({{"path", i.path}, {"format", i.format}, {"compression", i.compression}, {"bytes", i.bytes},
                      {"crc32", i.crc32}});
  nlohmann::json splits = nlohmann::json::object();
  for (int s : {kTrainSplit, kValidSplit}) {
    const auto& split = m.splits[static_cast<size_t>(s)];
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& shard : split.shards) shards.push_back(shard_json(shard));
    splits[split_name(s)] = {{"documents", split.documents}, {"tokens", split.tokens},
                             {"text_bytes", split.text_bytes}, {"shards", shards}};
  }
  const auto& t = m.tokenizer;
  return {{"format", kFormat},
          {"version", kManifestVersion},
          {"inputs", inputs},
          {"tokenizer",
           {{"path", t.path}, {"checksum", t.checksum}, {"vocab_size", t.vocab_size}, {"eos_id", t.eos_id},
            {"trained", t.trained}}},
          {"options", m.options},
          {"splits", splits},
          {"skipped", m.skipped}};
}

void write_prepared_manifest(const fs::path& dir, const PreparedManifest& manifest) {
  write_file_atomic(dir / kManifestName, manifest_json(manifest).dump(2) + "\n");
}

bool is_prepared_dir(const fs::path& dir) { return fs::is_regular_file(dir / kManifestName); }

PreparedManifest read_prepared_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  if (!fs::exists(path))
    throw Error(dir.string() + " is a directory but not a prepared dataset: it has no " + kManifestName +
                " (loom prepare writes it last; an interrupted prepare leaves none: run it again)");
  const std::string name = path.string();
  const auto j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(name + ": not valid JSON: run loom prepare again");
  PreparedManifest m;
  try {
    if (j.value("format", "") != kFormat) throw Error(name + ": not a loom prepare manifest (no format " + kFormat + ")");
    if (j.value("version", 0) != kManifestVersion)
      throw Error(name + ": manifest version " + j.at("version").dump() + ", this loom reads " +
                  std::to_string(kManifestVersion) + ": run loom prepare again");
    for (const auto& i : j.at("inputs"))
      m.inputs.push_back({i.at("path").get<std::string>(), i.at("format").get<std::string>(),
                          i.at("compression").get<std::string>(), i.at("bytes").get<uint64_t>(),
                          i.at("crc32").get<uint32_t>()});
    const auto& t = j.at("tokenizer");
    m.tokenizer = {t.at("path").get<std::string>(), t.at("checksum").get<uint32_t>(), t.at("vocab_size").get<int64_t>(),
                   t.at("eos_id").get<int32_t>(), t.at("trained").get<bool>()};
    m.options = j.at("options");
    for (int s : {kTrainSplit, kValidSplit}) {
      const auto& split = j.at("splits").at(split_name(s));
      auto& out = m.splits[static_cast<size_t>(s)];
      out.documents = split.at("documents").get<int64_t>();
      out.tokens = split.at("tokens").get<int64_t>();
      out.text_bytes = split.at("text_bytes").get<int64_t>();
      for (const auto& shard : split.at("shards")) {
        ShardInfo info;
        info.tokens_file = shard.at("tokens_file").get<std::string>();
        info.index_file = shard.at("index_file").get<std::string>();
        info.tokens = shard.at("tokens").get<int64_t>();
        info.documents = shard.at("documents").get<int64_t>();
        info.data_crc = shard.at("data_crc32").get<uint32_t>();
        if (shard.contains("mask_file")) {
          info.mask_file = shard.at("mask_file").get<std::string>();
          info.loss_tokens = shard.at("loss_tokens").get<int64_t>();
        }
        // Shard names stay inside the directory: a damaged manifest must not point training elsewhere.
        std::vector<std::string> files = {info.tokens_file, info.index_file};
        if (shard.contains("mask_file")) files.push_back(info.mask_file);
        for (const auto& file : files)
          if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
            throw Error(name + ": shard file name '" + file + "' is not a file inside " + dir.string());
        out.shards.push_back(info);
      }
    }
    for (const auto& [reason, count] : j.at("skipped").items()) m.skipped[reason] = count.get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(name + ": damaged manifest (" + e.what() + "): run loom prepare again");
  }
  return m;
}

}  // namespace loom
