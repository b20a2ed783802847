// Ring attention (parallel/ring_attention.h) against SDPA on the whole sequence: output, dq, dk and dv of this
// rank's chunks, for causal and full masks, grouped-query heads, sliding windows, packed documents and ALiBi, in fp32
// (1e-5 of the magnitude; also with key tiles of 2, uneven where a chunk is 3 long) and bf16 (SDPA's own bf16 error
// against fp32, with a margin); with probability dropout against the whole sequence's attention with
// attention_dropout_scale's masks, whose statistics are checked too. Written for any world
// size, the world being the CP group: ctest runs them as unit tests (cp 1: the ring of one, its chunk pairs
// still masked and skipped) and under `mpirun -np 2` and `-np 4` ([cp]). Every rank draws the same whole
// tensors, computes the reference itself and checks its own chunks. Also the load-balanced layout
// (parallel/context_parallel_layout.h) and its block visibility, in closed form.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "models/document_mask.h"
#include "models/positions.h"
#include "parallel/attention_dropout.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/ring_attention.h"
#include "test_util.h"

namespace {

using loom::BlockVisibility;

std::unique_ptr<loom::Communicator> cp_group() { return loom::test::processes().world(/*timeout_s=*/60); }

struct MaskCase {
  const char* name;
  bool causal;
  int64_t window;
  bool documents;
  int64_t kv_heads;  // of 4 query heads
  bool alibi = false;  // ALiBi's bias by global distance (models/positions.h's slopes of 4 heads)
};

const MaskCase kCases[] = {
    {"causal", true, 0, false, 4},          {"full", false, 0, false, 4},
    {"causal GQA", true, 0, false, 2},      {"causal multi-query", true, 0, false, 1},
    {"causal window 4", true, 4, false, 2}, {"full window 5", false, 5, false, 4},
    {"causal documents", true, 0, true, 2}, {"causal documents window 4", true, 4, true, 4},
    {"causal ALiBi GQA", true, 0, false, 2, true}, {"full ALiBi window 5", false, 5, false, 4, true},
    {"causal documents ALiBi", true, 0, true, 1, true},
};

// (B = 2, T) int64 positions in documents: row 0 holds three documents (one of a single token), row 1 one.
torch::Tensor document_positions(int64_t T) {
  const int64_t first = 1, second = T / 3;
  auto row0 = torch::cat({torch::arange(first, torch::kLong), torch::arange(second, torch::kLong),
                          torch::arange(T - first - second, torch::kLong)});
  return torch::stack({row0, torch::arange(T, torch::kLong)});
}

// SDPA's mask (B or 1, 1, T, T) of a case over the whole sequence: models/attention.cpp's rule; with ALiBi
// the float bias (B or 1, 4, T, T), -slope * |i - j|, -inf where masked.
torch::Tensor whole_mask(const MaskCase& c, int64_t T, const torch::Tensor& positions) {
  const auto index = torch::arange(T, torch::kLong);
  const auto distance = index.view({T, 1}) - index.view({1, T});
  auto visible = c.causal ? distance >= 0 : torch::ones({T, T}, torch::kBool);
  if (c.window > 0) visible = visible & (distance.abs() < c.window);
  visible = visible.view({1, 1, T, T});
  if (c.documents) visible = visible & loom::document_causal_mask(positions);
  if (!c.alibi) return visible;
  const auto bias = -loom::alibi_slopes(4).view({1, 4, 1, 1}) * distance.abs().to(torch::kFloat).view({1, 1, T, T});
  return bias.masked_fill(~visible, -std::numeric_limits<float>::infinity());
}

struct Inputs {
  torch::Tensor q, k, v, upstream, positions;
};

// Whole-sequence inputs with unequal blocks: chunk j of q and k is scaled by 1 + j / 2 and shifted, so every
// chunk pair's score maximum differs and the log-sum-exp merge cannot get away with one shared maximum.
Inputs whole_inputs(int64_t cp, int64_t kv_heads, int64_t chunk) {
  const int64_t B = 2, H = 4, T = 2 * cp * chunk, D = 8;
  torch::manual_seed(11);
  const auto per_chunk = (1.0 + torch::arange(T, torch::kFloat).div(chunk).floor() / 2).view({1, 1, T, 1});
  Inputs in;
  in.q = torch::randn({B, H, T, D}) * per_chunk + 0.3;
  in.k = torch::randn({B, kv_heads, T, D}) * per_chunk.flip(2);
  in.v = torch::randn({B, kv_heads, T, D}) + torch::arange(T, torch::kFloat).view({1, 1, T, 1}) / T;
  in.upstream = torch::randn({B, H, T, D});
  in.positions = document_positions(T);
  return in;
}

// SDPA over the whole sequence in `dtype`, this rank's chunks of its output and gradients (in fp32).
std::vector<torch::Tensor> whole_sdpa(const MaskCase& c, const Inputs& in, torch::Dtype dtype, int64_t cp,
                                      int64_t rank) {
  const auto mask = whole_mask(c, in.q.size(2), in.positions);
  const bool gqa = in.k.size(1) != in.q.size(1);
  auto results = loom::test::output_and_gradients(
      [&](const std::vector<torch::Tensor>& x) {
        return at::scaled_dot_product_attention(x[0], x[1], x[2], mask.is_floating_point() ? mask.to(dtype) : mask, 0.0,
                                                 false, std::nullopt, gqa);
      },
      {in.q.to(dtype), in.k.to(dtype), in.v.to(dtype)}, in.upstream);
  for (auto& t : results) t = loom::cp_split(t.to(torch::kFloat), 2, cp, rank);
  return results;
}

// Ring attention on this rank's chunks in `dtype`, its scores `key_tile` keys at a time (0: the default), with
// probability dropout `dropout` from `dropout_seed`: its output and gradients (in fp32).
std::vector<torch::Tensor> ring(const MaskCase& c, const Inputs& in, torch::Dtype dtype, loom::Communicator& group,
                                int64_t key_tile = 0, double dropout = 0.0, int64_t dropout_seed = 0) {
  const int64_t cp = group.size(), rank = group.rank();
  loom::RingAttentionOptions options;
  options.group = &group;
  options.dropout = dropout;
  options.dropout_seed = dropout_seed;
  if (key_tile > 0) options.key_tile = key_tile;
  options.causal = c.causal;
  options.window = c.window;
  if (c.alibi) options.alibi_slopes = loom::alibi_slopes(4);
  const auto starts = c.documents ? loom::cp_split(loom::document_starts(in.positions), 1, cp, rank) : torch::Tensor();
  auto local = [&](const torch::Tensor& t) { return loom::cp_split(t, 2, cp, rank).to(dtype); };
  auto results = loom::test::output_and_gradients(
      [&](const std::vector<torch::Tensor>& x) { return loom::ring_attention(x[0], x[1], x[2], options, starts); },
      {local(in.q), local(in.k), local(in.v)}, local(in.upstream));
  for (auto& t : results) t = t.to(torch::kFloat);
  return results;
}

const char* const kNames[] = {"output", "dq", "dk", "dv"};

// Attention over the whole sequence with probability dropout, written out (SDPA draws its own masks): scores,
// the case's mask or ALiBi bias, softmax, the kept probabilities scaled by 1 / (1 - p), times v; this rank's
// chunks of its output and gradients.
std::vector<torch::Tensor> whole_with_dropout(const MaskCase& c, const Inputs& in, double p, int64_t seed, int64_t cp,
                                              int64_t rank) {
  const int64_t B = in.q.size(0), H = in.q.size(1), T = in.q.size(2), D = in.q.size(3), G = H / in.k.size(1);
  const auto mask = whole_mask(c, T, in.positions);
  const auto scale = loom::attention_dropout_scale(seed, p, B, H, torch::arange(T, torch::kLong), torch::arange(T, torch::kLong));
  auto results = loom::test::output_and_gradients(
      [&](const std::vector<torch::Tensor>& x) {
        auto scores = torch::matmul(x[0], x[1].repeat_interleave(G, 1).transpose(-1, -2)) / std::sqrt(double(D));
        scores = mask.is_floating_point() ? scores + mask : scores.masked_fill(~mask, -std::numeric_limits<float>::infinity());
        const auto probabilities = torch::softmax(scores, -1) * scale;
        return torch::matmul(probabilities, x[2].repeat_interleave(G, 1));
      },
      {in.q, in.k, in.v}, in.upstream);
  for (auto& t : results) t = loom::cp_split(t, 2, cp, rank);
  return results;
}

}  // namespace

TEST_CASE("context parallel layout: rank r holds chunks r and 2 cp - 1 - r, and the split inverts", "[cp]") {
  CHECK(loom::cp_positions_of(8, 2, 0).equal(torch::tensor({0, 1, 6, 7}, torch::kLong)));
  CHECK(loom::cp_positions_of(8, 2, 1).equal(torch::tensor({2, 3, 4, 5}, torch::kLong)));
  CHECK(loom::cp_positions_of(16, 4, 1).equal(torch::tensor({2, 3, 12, 13}, torch::kLong)));
  CHECK(loom::cp_positions_of(4, 1, 0).equal(torch::arange(4, torch::kLong)));
  for (int64_t cp : {1, 2, 3, 4}) {
    const auto x = torch::arange(2 * 3 * 2 * cp * 5, torch::kFloat).view({2, 3, 2 * cp, 5}).transpose(2, 3);
    std::vector<torch::Tensor> parts;
    for (int64_t r = 0; r < cp; ++r) {
      parts.push_back(loom::cp_split(x, 3, cp, r));
      CHECK(parts.back().equal(x.index_select(3, loom::cp_positions_of(2 * cp, cp, r))));
    }
    CHECK(loom::cp_unsplit(parts, 3).equal(x));
  }
  // Every rank's causal work is the same: (query, key) pairs with key <= query, over its positions.
  for (int64_t cp : {2, 4}) {
    const int64_t T = 8 * cp;
    for (int64_t r = 0; r < cp; ++r)
      CHECK(loom::cp_positions_of(T, cp, r).add(1).sum().item<int64_t>() == T * (T + 1) / (2 * cp));
  }
  CHECK_THAT(loom::test::message_of([] { loom::cp_positions_of(6, 2, 0); }),
             Catch::Contains("sequence length 6 is not a multiple of 2 x cp = 4"));
}

TEST_CASE("context parallel layout: block visibility of chunk pairs under causal and window masks", "[cp]") {
  // Queries [8, 12) against keys [4, 8): query - key runs over [1, 7].
  CHECK(loom::block_visibility(8, 4, 4, true, 0) == BlockVisibility::kAll);
  CHECK(loom::block_visibility(4, 8, 4, true, 0) == BlockVisibility::kNone);  // keys after every query
  CHECK(loom::block_visibility(4, 8, 4, false, 0) == BlockVisibility::kAll);
  CHECK(loom::block_visibility(4, 4, 4, true, 0) == BlockVisibility::kSome);  // the diagonal
  CHECK(loom::block_visibility(4, 4, 4, false, 0) == BlockVisibility::kAll);
  CHECK(loom::block_visibility(8, 4, 4, true, 8) == BlockVisibility::kAll);   // 7 < 8
  CHECK(loom::block_visibility(8, 4, 4, true, 7) == BlockVisibility::kSome);  // only distance 7 is cut
  CHECK(loom::block_visibility(8, 4, 4, true, 2) == BlockVisibility::kSome);  // distance 1 is in
  CHECK(loom::block_visibility(8, 4, 4, true, 1) == BlockVisibility::kNone);  // only the diagonal would be
  CHECK(loom::block_visibility(12, 4, 4, true, 5) == BlockVisibility::kNone);  // distances [5, 11]
  CHECK(loom::block_visibility(4, 12, 4, false, 5) == BlockVisibility::kNone);
  CHECK(loom::block_visibility(4, 8, 4, false, 8) == BlockVisibility::kAll);  // distances [-7, -1]
  // Rectangles: 4 queries [8, 12) against 2 keys [10, 12) or [12, 14).
  CHECK(loom::block_visibility(8, 4, 10, 2, true, 0) == BlockVisibility::kSome);  // query - key in [-3, 1]
  CHECK(loom::block_visibility(8, 4, 12, 2, true, 0) == BlockVisibility::kNone);  // [-5, -1]
  CHECK(loom::block_visibility(8, 4, 4, 2, true, 0) == BlockVisibility::kAll);    // [3, 7]
  CHECK(loom::block_visibility(8, 4, 4, 2, true, 4) == BlockVisibility::kSome);   // 3 in, 4 and more out
  CHECK(loom::block_visibility(8, 4, 0, 2, true, 4) == BlockVisibility::kNone);   // [7, 11]
}

TEST_CASE("ring attention: fp32 output and gradients equal SDPA on the whole sequence", "[cp]") {
  auto group = cp_group();
  const int64_t cp = group->size(), rank = group->rank();
  for (const auto& c : kCases) {
    for (int64_t chunk : {3, 4}) {
      // Key tiles of the whole chunk, and of 2 keys (chunks of 3: a tile of 2 and one of 1, each masked,
      // skipped or merged on its own).
      for (int64_t key_tile : {0, 2}) {
        INFO(c.name << ", cp " << cp << ", rank " << rank << ", chunk " << chunk << ", key tile " << key_tile);
        const auto in = whole_inputs(cp, c.kv_heads, chunk);
        const auto expected = whole_sdpa(c, in, torch::kFloat, cp, rank);
        const auto actual = ring(c, in, torch::kFloat, *group, key_tile);
        for (size_t i = 0; i < 4; ++i) {
          INFO(kNames[i]);
          CHECK_THAT(actual[i], loom::test::tensor_close_to(expected[i], 1e-5));
        }
      }
    }
  }
}

TEST_CASE("ring attention: with dropout, equal to the whole sequence's attention with the same masks", "[cp]") {
  auto group = cp_group();
  const int64_t cp = group->size(), rank = group->rank();
  const double p = 0.3;
  const int64_t seed = 12345;
  for (const auto& c : kCases) {
    for (int64_t key_tile : {0, 2}) {
      INFO(c.name << ", cp " << cp << ", rank " << rank << ", key tile " << key_tile);
      const auto in = whole_inputs(cp, c.kv_heads, 4);
      const auto expected = whole_with_dropout(c, in, p, seed, cp, rank);
      const auto actual = ring(c, in, torch::kFloat, *group, key_tile, p, seed);
      const auto undropped = ring(c, in, torch::kFloat, *group, key_tile);
      for (size_t i = 0; i < 4; ++i) {
        INFO(kNames[i]);
        CHECK_THAT(actual[i], loom::test::tensor_close_to(expected[i], 1e-5));
        CHECK(loom::test::max_abs_diff(actual[i], undropped[i]) > 1e-2);  // the masks were applied
      }
    }
  }
}

TEST_CASE("attention dropout masks: kept with 1 - p, independent across rows, heads, pairs and seeds, by position",
          "[cp]") {
  const int64_t B = 2, H = 4, T = 64;
  const auto positions = torch::arange(T, torch::kLong);
  for (double p : {0.1, 0.3, 0.5}) {
    INFO("p " << p);
    const auto scale = loom::attention_dropout_scale(7, p, B, H, positions, positions);
    REQUIRE(scale.sizes() == torch::IntArrayRef({B, H, T, T}));
    const auto keep = scale > 0;
    CHECK(scale.masked_select(keep).eq(static_cast<float>(1 / (1 - p))).all().item<bool>());  // kept: 1 / (1 - p)
    // The CPU's fused pass and the tensor-op form (CUDA's) agree bit for bit.
    CHECK(scale.equal(loom::detail::attention_dropout_scale_by_tensor_ops(7, p, B, H, positions, positions)));
    // 32768 draws: the dropped fraction's standard deviation is sqrt(p (1 - p) / 32768) < 0.003.
    CHECK(std::abs(1.0 - keep.to(torch::kFloat).mean().item<double>() - p) < 0.012);
    // Two independent masks agree on a pair with probability p^2 + (1 - p)^2; 8192 pairs per comparison.
    const double agree = p * p + (1 - p) * (1 - p);
    auto agreement = [](const torch::Tensor& a, const torch::Tensor& b) { return a.eq(b).to(torch::kFloat).mean().item<double>(); };
    const auto other_seed = loom::attention_dropout_scale(8, p, B, H, positions, positions) > 0;
    CHECK(std::abs(agreement(keep, other_seed) - agree) < 0.02);
    CHECK(std::abs(agreement(keep.select(1, 0), keep.select(1, 1)) - agree) < 0.02);  // heads
    CHECK(std::abs(agreement(keep.select(0, 0), keep.select(0, 1)) - agree) < 0.02);  // batch rows
    CHECK(std::abs(agreement(keep, keep.transpose(2, 3)) - agree) < 0.02);            // (i, j) and (j, i)
    CHECK(std::abs(agreement(keep.narrow(2, 0, T - 1), keep.narrow(2, 1, T - 1)) - agree) < 0.02);  // next query
    CHECK(std::abs(agreement(keep.narrow(3, 0, T - 1), keep.narrow(3, 1, T - 1)) - agree) < 0.02);  // next key
    // A block of the sequence, by its global positions, gets the whole sequence's masks there.
    const auto block = loom::attention_dropout_scale(7, p, B, H, torch::arange(40, 48, torch::kLong),
                                                     torch::arange(8, 24, torch::kLong));
    CHECK(block.equal(scale.narrow(2, 40, 8).narrow(3, 8, 16)));
  }
  CHECK(loom::attention_dropout_scale(7, 0.0, B, H, positions, positions).eq(1.0f).all().item<bool>());
  CHECK_THAT(loom::test::message_of([&] { loom::attention_dropout_scale(7, 1.0, B, H, positions, positions); }),
             Catch::Contains("attention dropout probability 1 is not in [0, 1)"));
}

TEST_CASE("ring attention: bf16 is as close to fp32 as SDPA's bf16 is", "[cp]") {
  auto group = cp_group();
  const int64_t cp = group->size(), rank = group->rank();
  for (const auto& c : kCases) {
    INFO(c.name << ", cp " << cp << ", rank " << rank);
    const auto in = whole_inputs(cp, c.kv_heads, 4);
    const auto exact = whole_sdpa(c, in, torch::kFloat, cp, rank);
    const auto sdpa = whole_sdpa(c, in, torch::kBFloat16, cp, rank);
    const auto actual = ring(c, in, torch::kBFloat16, *group);
    for (size_t i = 0; i < 4; ++i) {
      // SDPA's bf16 error against fp32 on these chunks, and bf16's own rounding of the result (one ulp of the
      // largest magnitude), whichever is larger, with a factor 2: ring attention computes in fp32 from bf16
      // inputs, so it rounds the inputs and the result as SDPA's bf16 does, and no more.
      const double scale = exact[i].abs().max().item<double>();
      const double sdpa_error = loom::test::max_abs_diff(sdpa[i], exact[i]);
      const double bound = 2 * std::max(sdpa_error, loom::test::kBf16Eps * scale);
      INFO(kNames[i] << ": SDPA bf16 error " << sdpa_error << ", ring bf16 error "
                     << loom::test::max_abs_diff(actual[i], exact[i]) << ", magnitude " << scale);
      CHECK_THAT(actual[i], loom::test::tensor_close_to(exact[i], 0.0, bound));
    }
  }
}

TEST_CASE("ring attention: refuses what it cannot compute, naming it", "[cp]") {
  auto group = cp_group();
  loom::RingAttentionOptions options;
  options.group = group.get();
  const auto q = torch::randn({1, 2, 4, 8}), k = torch::randn({1, 2, 4, 8});
  const auto odd = k.narrow(2, 0, 3), three_heads = torch::randn({1, 3, 4, 8});
  CHECK_THAT(loom::test::message_of([&] { loom::ring_attention(q.narrow(2, 0, 3), odd, odd, options); }),
             Catch::Contains("not two chunks of equal length"));
  CHECK_THAT(loom::test::message_of([&] { loom::ring_attention(q, three_heads, three_heads, options); }),
             Catch::Contains("3 kv heads do not divide 2 query heads"));
  options.causal = false;
  const auto starts = torch::zeros({1, 4}, torch::kLong);
  CHECK_THAT(loom::test::message_of([&] { loom::ring_attention(q, k, k, options, starts); }),
             Catch::Contains("packed documents (key_starts) are for causal attention"));
}
