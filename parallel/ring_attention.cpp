#include "parallel/ring_attention.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/autocast_off.h"
#include "core/error.h"
#include "parallel/attention_dropout.h"
#include "parallel/context_parallel_layout.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring's two kinds of message. Every rank makes the same exchanges in the same order, so the i-th send
// of one rank meets the i-th receive of the next.
constexpr int kKeyValueTag = 0x5241;  // a key/value block (k and v stacked along dim 0)
constexpr int kGradientTag = 0x5242;  // its gradient (dk and dv stacked), accumulating on the way home

// One step of the ring: `out` to rank + 1 and `in` from rank - 1, both in flight when it returns. A backend
// may run a group's operations one after another on one stream (NCCL) where a send waits for its receiver:
// even ranks send first and odd ranks receive first, so that every send meets a posted receive.
struct Exchange {
  std::shared_ptr<Work> send, receive;
  // Adds the time blocked to *waited_s (when given).
  void wait(double* waited_s) const {
    const auto start = std::chrono::steady_clock::now();
    receive->wait();
    send->wait();
    if (waited_s != nullptr) *waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};
Exchange exchange(Communicator& group, const torch::Tensor& out, const torch::Tensor& in, int tag) {
  const int n = group.size(), r = group.rank(), next = (r + 1) % n, previous = (r + n - 1) % n;
  Exchange e;
  if (r % 2 == 0) {
    e.send = group.send_async(out, next, tag);
    e.receive = group.recv_async(in, previous, tag);
  } else {
    e.receive = group.recv_async(in, previous, tag);
    e.send = group.send_async(out, next, tag);
  }
  return e;
}

// One ring attention call's shapes and mask: what forward and backward both need.
struct Ring {
  int64_t cp, rank, B, H, K, G, L, D, c;  // c: chunk length (L = 2 c)
  double scale;
  bool causal;
  int64_t window;
  torch::Tensor key_starts;  // (B, L) int64 global first keys, or undefined
  torch::Tensor alibi_slopes;  // (1, K, G, 1, 1) fp32 per query head, or undefined
  std::array<int64_t, 2> first_start{}, last_start{};  // per local query chunk: the least and greatest key start
  int64_t key_tile;  // keys per score tile: a chunk pair's scores are computed a tile of keys at a time
  double dropout = 0.0;
  int64_t dropout_seed = 0;

  // The rank whose key/value block this rank holds at step t of the ring.
  int64_t block_owner(int64_t t) const { return (rank - t + cp) % cp; }

  // The mask (1 or B, 1, 1, c, n) of local query chunk a against the n keys from global position k_first:
  // nullopt when every pair is visible; *skip when none is.
  std::optional<torch::Tensor> tile_mask(int64_t a, int64_t k_first, int64_t n, const torch::Device& device,
                                         bool* skip) const {
    const int64_t q_first = cp_chunks_of(cp, rank)[a] * c, k_last = k_first + n - 1;
    const auto visibility = block_visibility(q_first, c, k_first, n, causal, window);
    const bool documents = key_starts.defined();
    *skip = visibility == BlockVisibility::kNone || (documents && first_start[a] > k_last);
    if (*skip) return std::nullopt;
    const bool documents_cut = documents && last_start[a] > k_first;  // some query's document starts inside
    if (visibility == BlockVisibility::kAll && !documents_cut) return std::nullopt;
    const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
    const auto queries = torch::arange(q_first, q_first + c, longs).view({c, 1});
    const auto keys = torch::arange(k_first, k_first + n, longs).view({1, n});
    const auto distance = queries - keys;
    auto visible = causal ? distance >= 0 : torch::ones({c, n}, longs.dtype(torch::kBool));
    if (window > 0) visible = visible & (distance.abs() < window);
    auto mask = visible.view({1, 1, 1, c, n});
    if (documents_cut) {
      const auto starts = key_starts.narrow(1, a * c, c).reshape({B, 1, 1, c, 1});
      mask = mask & (keys.view({1, 1, 1, 1, n}) >= starts);
    }
    return mask;
  }

  // The n keys (B, K, L, D) from local position `from` as (B, K, 1, n, D), broadcasting over a kv head's G
  // query heads.
  torch::Tensor key_tile_of(const torch::Tensor& t, int64_t from, int64_t n) const {
    return t.narrow(2, from, n).unsqueeze(2);
  }
  // (B, K, G, L, D) chunk a.
  torch::Tensor query_chunk(const torch::Tensor& t, int64_t a) const { return t.narrow(3, a * c, c); }

  // Scores (B, K, G, c, n) of local query chunk a (q_a: (B, K, G, c, D)) against n keys from global position
  // k_first (k: (B, K, 1, n, D)): with ALiBi plus -slope * |query - key|, -inf where masked.
  torch::Tensor scores(const torch::Tensor& q_a, const torch::Tensor& k, int64_t a, int64_t k_first,
                       const std::optional<torch::Tensor>& mask) const {
    auto s = torch::matmul(q_a, k.transpose(-1, -2)).mul_(scale);
    if (alibi_slopes.defined()) {
      const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(s.device());
      const int64_t q_first = cp_chunks_of(cp, rank)[a] * c, n = k.size(3);
      const auto distance = torch::arange(q_first, q_first + c, floats).view({c, 1}) -
                            torch::arange(k_first, k_first + n, floats).view({1, n});
      s.sub_(alibi_slopes * distance.abs());
    }
    if (mask) s.masked_fill_(~*mask, -std::numeric_limits<float>::infinity());
    return s;
  }
};

// A tile of keys met by a local query chunk: chunk a's queries against the n keys at local positions
// [from, from + n) of a key/value block, global positions [k_first, k_first + n).
struct Tile {
  int64_t a, from, k_first, n;
};

// fn(tile, scores) for local query chunk a against each tile of rank `source`'s block (ring.key_tile keys at
// most, within one chunk) that the mask does not hide entirely; scores(q_a, k) is Ring::scores of the pair,
// its mask and ALiBi bias applied. Tiles bound the scores held at once to (B, H, c, key_tile), whatever the
// chunk length c.
template <typename Fn>
void for_visible_tiles(const Ring& ring, int64_t source, const torch::Device& device, const Fn& fn) {
  const auto key_chunks = cp_chunks_of(ring.cp, source);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t offset = 0; offset < ring.c; offset += ring.key_tile) {
        const Tile tile{a, b * ring.c + offset, key_chunks[b] * ring.c + offset, std::min(ring.key_tile, ring.c - offset)};
        bool skip = false;
        const auto mask = ring.tile_mask(a, tile.k_first, tile.n, device, &skip);
        if (skip) continue;
        fn(tile, [&](const torch::Tensor& q_a, const torch::Tensor& k) {
          return ring.scores(q_a, k, a, tile.k_first, mask);
        });
      }
}

// Dropout of a tile's probabilities (and of their gradient): what attention_dropout_scale multiplies them by,
// (B, K, G, c, n) for the tile's pairs, or nullopt without dropout.
std::optional<torch::Tensor> dropout_scale(const Ring& ring, const Tile& tile, const torch::Device& device) {
  if (ring.dropout == 0.0) return std::nullopt;
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  const int64_t q_first = cp_chunks_of(ring.cp, ring.rank)[tile.a] * ring.c;
  return attention_dropout_scale(ring.dropout_seed, ring.dropout, ring.B, ring.H,
                                 torch::arange(q_first, q_first + ring.c, longs),
                                 torch::arange(tile.k_first, tile.k_first + tile.n, longs))
      .view({ring.B, ring.K, ring.G, ring.c, tile.n});
}
torch::Tensor dropped(const torch::Tensor& x, const std::optional<torch::Tensor>& scale) {
  return scale ? x * *scale : x;
}

// The online softmax's state per local query row, fp32: running max m, running sum l, unnormalized output.
struct SoftmaxState {
  torch::Tensor m, l, acc;  // (B, K, G, L, 1), (B, K, G, L, 1), (B, K, G, L, D)
};

// Merges key/value block kv32 ((2B, K, L, D) fp32: k then v) of rank `source` into the state.
void forward_block(const Ring& ring, const torch::Tensor& q32, const torch::Tensor& kv32, int64_t source,
                   SoftmaxState& state) {
  const auto k = kv32.narrow(0, 0, ring.B), v = kv32.narrow(0, ring.B, ring.B);
  for_visible_tiles(ring, source, q32.device(), [&](const Tile& tile, const auto& scores) {
    const int64_t a = tile.a;
    const auto s = scores(ring.query_chunk(q32, a), ring.key_tile_of(k, tile.from, tile.n));
    auto m = ring.query_chunk(state.m, a), l = ring.query_chunk(state.l, a), acc = ring.query_chunk(state.acc, a);
    const auto m_new = torch::maximum(m, std::get<0>(s.max(-1, /*keepdim=*/true)));
    // A row that has seen no visible key yet keeps max -inf: shift it by 0 instead (its exp terms are all 0).
    const auto shift = m_new.masked_fill(m_new == -std::numeric_limits<float>::infinity(), 0.0);
    const auto rescale = torch::exp(m - shift);
    const auto p = torch::exp(s - shift);
    l.mul_(rescale).add_(p.sum(-1, /*keepdim=*/true));  // the softmax's sum is of every probability, dropped or not
    const auto scale = dropout_scale(ring, tile, q32.device());
    acc.mul_(rescale).add_(torch::matmul(dropped(p, scale), ring.key_tile_of(v, tile.from, tile.n)));
    m.copy_(m_new);
  });
}

// Adds block kv32's contribution to dq32 and to its gradient dkv ((2B, K, L, D) fp32: dk then dv).
void backward_block(const Ring& ring, const torch::Tensor& q32, const torch::Tensor& kv32, int64_t source,
                    const torch::Tensor& dout32, const torch::Tensor& lse, const torch::Tensor& delta,
                    torch::Tensor& dq32, torch::Tensor& dkv) {
  const auto k = kv32.narrow(0, 0, ring.B), v = kv32.narrow(0, ring.B, ring.B);
  auto dk = dkv.narrow(0, 0, ring.B), dv = dkv.narrow(0, ring.B, ring.B);
  for_visible_tiles(ring, source, q32.device(), [&](const Tile& tile, const auto& scores) {
    const int64_t a = tile.a, from = tile.from, n = tile.n;
    const auto q_a = ring.query_chunk(q32, a), dout_a = ring.query_chunk(dout32, a);
    const auto k_t = ring.key_tile_of(k, from, n), v_t = ring.key_tile_of(v, from, n);
    const auto p = torch::exp(scores(q_a, k_t) - ring.query_chunk(lse, a));  // (B, K, G, c, n)
    // With dropout the output is (p * scale) v: forward's masks again, on p and on dp.
    const auto scale = dropout_scale(ring, tile, q32.device());
    dv.narrow(2, from, n).add_(torch::matmul(dropped(p, scale).transpose(-1, -2), dout_a).sum(2));
    const auto dp = dropped(torch::matmul(dout_a, v_t.transpose(-1, -2)), scale);
    const auto ds = p * (dp - ring.query_chunk(delta, a));  // delta = rowsum(dout * out) holds with dropout too
    ring.query_chunk(dq32, a).add_(torch::matmul(ds, k_t), ring.scale);
    dk.narrow(2, from, n).add_(torch::matmul(ds.transpose(-1, -2), q_a).sum(2), ring.scale);
  });
}

Ring make_ring(const torch::Tensor& q, const torch::Tensor& k, const RingAttentionOptions& options,
               const torch::Tensor& key_starts, const torch::Tensor& alibi_slopes) {
  Ring ring;
  ring.cp = options.group->size();
  ring.rank = options.group->rank();
  ring.B = q.size(0);
  ring.H = q.size(1);
  ring.K = k.size(1);
  ring.G = ring.H / ring.K;
  ring.L = q.size(2);
  ring.D = q.size(3);
  ring.c = ring.L / 2;
  ring.scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(ring.D));
  ring.causal = options.causal;
  ring.window = options.window;
  ring.key_tile = ring_key_tile(options.key_tile, ring.c);
  ring.dropout = options.dropout;
  ring.dropout_seed = options.dropout_seed;
  if (alibi_slopes.numel() > 0) ring.alibi_slopes = alibi_slopes.to(torch::kFloat).view({1, ring.K, ring.G, 1, 1});
  if (key_starts.numel() > 0) {
    ring.key_starts = key_starts;
    for (int64_t a = 0; a < 2; ++a) {
      const auto starts = key_starts.narrow(1, a * ring.c, ring.c);
      ring.first_start[a] = starts.min().item<int64_t>();
      ring.last_start[a] = starts.max().item<int64_t>();
    }
  }
  return ring;
}

// Stacks k and v (B, K, L, D) into the one contiguous block that travels: (2B, K, L, D).
torch::Tensor stack_key_value(const torch::Tensor& k, const torch::Tensor& v) {
  return torch::cat({k, v}, 0).contiguous();
}

// The options besides the tensors, kept for backward in the autograd context's saved data.
void save_options(AutogradContext* ctx, const RingAttentionOptions& options) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(options.group));
  ctx->saved_data["causal"] = options.causal;
  ctx->saved_data["window"] = options.window;
  ctx->saved_data["scale"] = options.scale;
  ctx->saved_data["key_tile"] = options.key_tile;
  ctx->saved_data["waited_s"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(options.waited_s));
  ctx->saved_data["dropout"] = options.dropout;
  ctx->saved_data["dropout_seed"] = options.dropout_seed;
}
RingAttentionOptions saved_options(AutogradContext* ctx) {
  RingAttentionOptions options;
  options.group = reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
  options.causal = ctx->saved_data["causal"].toBool();
  options.window = ctx->saved_data["window"].toInt();
  options.scale = ctx->saved_data["scale"].toDouble();
  options.key_tile = ctx->saved_data["key_tile"].toInt();
  options.waited_s = reinterpret_cast<double*>(static_cast<intptr_t>(ctx->saved_data["waited_s"].toInt()));
  options.dropout = ctx->saved_data["dropout"].toDouble();
  options.dropout_seed = ctx->saved_data["dropout_seed"].toInt();
  return options;
}

// alibi_slopes travels as a tensor argument (checked and on q's device), not in options.
struct RingAttentionFunction : torch::autograd::Function<RingAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_starts,
                               const torch::Tensor& alibi_slopes, const RingAttentionOptions& options) {
    const AutocastOff fp32(q.device().type());  // in fp32, inside an autocast region too
    const Ring ring = make_ring(q, k, options, key_starts, alibi_slopes);
    auto& group = *options.group;
    const auto q32 = q.to(torch::kFloat).reshape({ring.B, ring.K, ring.G, ring.L, ring.D});
    const auto stats = q32.options();
    const std::vector<int64_t> rows = {ring.B, ring.K, ring.G, ring.L, 1};
    SoftmaxState state{torch::full(rows, -std::numeric_limits<float>::infinity(), stats), torch::zeros(rows, stats),
                       torch::zeros_like(q32)};
    auto kv = stack_key_value(k, v);
    for (int64_t t = 0; t < ring.cp; ++t) {
      std::optional<Exchange> blocks;
      torch::Tensor incoming;
      if (t + 1 < ring.cp) {  // the next block arrives while this one is multiplied
        incoming = torch::empty_like(kv);
        blocks = exchange(group, kv, incoming, kKeyValueTag);
      }
      forward_block(ring, q32, kv.to(torch::kFloat), ring.block_owner(t), state);
      if (blocks) {
        blocks->wait(options.waited_s);
        kv = incoming;
      }
    }
    const auto out32 = state.acc / state.l;
    const auto lse = state.m + torch::log(state.l);
    const auto out = out32.view({ring.B, ring.H, ring.L, ring.D}).to(q.scalar_type());
    ctx->save_for_backward({q, k, v, out, lse, key_starts, alibi_slopes});
    save_options(ctx, options);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4], &key_starts = saved[5],
               &alibi_slopes = saved[6];
    const auto options = saved_options(ctx);
    auto& group = *options.group;
    double* waited_s = options.waited_s;
    const AutocastOff fp32(q.device().type());
    const Ring ring = make_ring(q, k, options, key_starts, alibi_slopes);
    const std::vector<int64_t> shape5 = {ring.B, ring.K, ring.G, ring.L, ring.D};
    const auto q32 = q.to(torch::kFloat).reshape(shape5);
    const auto dout32 = grads[0].to(torch::kFloat).reshape(shape5);
    const auto delta = (dout32 * out.to(torch::kFloat).reshape(shape5)).sum(-1, /*keepdim=*/true);
    auto dq32 = torch::zeros_like(q32);
    auto kv = stack_key_value(k, v);
    // The held block's gradient: this rank's part plus what the ranks before it added, passed on at the end
    // of each step while the previous rank's arrives (the block this rank holds next); after the last step
    // what arrives is this rank's own block's, complete.
    torch::Tensor dkv, arriving;
    std::optional<Exchange> gradients;
    for (int64_t t = 0; t < ring.cp; ++t) {
      std::optional<Exchange> blocks;
      torch::Tensor incoming;
      if (t + 1 < ring.cp) {
        incoming = torch::empty_like(kv);
        blocks = exchange(group, kv, incoming, kKeyValueTag);
      }
      dkv = torch::zeros(kv.sizes(), q32.options());
      backward_block(ring, q32, kv.to(torch::kFloat), ring.block_owner(t), dout32, lse, delta, dq32, dkv);
      if (gradients) {
        gradients->wait(waited_s);
        dkv.add_(arriving);
      }
      if (ring.cp > 1) {
        arriving = torch::empty_like(dkv);
        gradients = exchange(group, dkv, arriving, kGradientTag);
      }
      if (blocks) {
        blocks->wait(waited_s);
        kv = incoming;
      }
    }
    if (gradients) {
      gradients->wait(waited_s);
      dkv = arriving;
    }
    return {dq32.view({ring.B, ring.H, ring.L, ring.D}).to(q.scalar_type()),
            dkv.narrow(0, 0, ring.B).to(k.scalar_type()),
            dkv.narrow(0, ring.B, ring.B).to(v.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t ring_key_tile(int64_t key_tile, int64_t chunk) {
  const int64_t keys = key_tile > 0 ? key_tile : std::max(kRingMinKeyTile, kRingTilePairs / std::max<int64_t>(chunk, 1));
  return std::max<int64_t>(1, std::min(keys, chunk));
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const RingAttentionOptions& options, const torch::Tensor& key_starts) {
  LOOM_CHECK(options.group != nullptr, "ring_attention: no CP group");
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(),
             "ring_attention: q (B, H, L, D), k and v (B, K, L, D), not ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  LOOM_CHECK(k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3),
             "ring_attention: k ", k.sizes(), " does not match q ", q.sizes());
  LOOM_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "ring_attention: ", k.size(1),
             " kv heads do not divide ", q.size(1), " query heads");
  LOOM_CHECK(q.size(2) % 2 == 0, "ring_attention: a rank's ", q.size(2),
             " positions are not two chunks of equal length (the layout of parallel/context_parallel_layout.h)");
  LOOM_CHECK(options.window >= 0, "ring_attention: window ", options.window, " < 0");
  LOOM_CHECK(options.key_tile >= 0, "ring_attention: key_tile ", options.key_tile, " < 0");
  LOOM_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(),
             "ring_attention: q, k and v have different dtypes");
  torch::Tensor starts = torch::empty({0}, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
  if (key_starts.defined()) {
    LOOM_CHECK(options.causal, "ring_attention: packed documents (key_starts) are for causal attention");
    LOOM_CHECK(key_starts.dim() == 2 && key_starts.size(0) == q.size(0) && key_starts.size(1) == q.size(2) &&
                   key_starts.scalar_type() == torch::kLong,
               "ring_attention: key_starts must be (B, L) = (", q.size(0), ", ", q.size(2), ") int64, not ",
               key_starts.sizes());
    starts = key_starts.to(q.device()).contiguous();
  }
  torch::Tensor slopes = torch::empty({0}, q.options().dtype(torch::kFloat));
  if (options.alibi_slopes.defined()) {
    LOOM_CHECK(options.alibi_slopes.dim() == 1 && options.alibi_slopes.size(0) == q.size(1),
               "ring_attention: alibi_slopes must be (H) = (", q.size(1), "), not ", options.alibi_slopes.sizes());
    slopes = options.alibi_slopes.to(q.device(), torch::kFloat).contiguous();
  }
  LOOM_CHECK(options.dropout >= 0 && options.dropout < 1, "ring_attention: dropout ", options.dropout,
             " is not in [0, 1)");
  return RingAttentionFunction::apply(q, k, v, starts, slopes, options);
}

}  // namespace loom
