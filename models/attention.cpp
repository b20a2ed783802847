#include "models/attention.h"

#include "core/error.h"
#include "models/blocked_attention.h"
#include "models/document_mask.h"
#include "models/few_rows_linear.h"
#include "models/layers.h"
#include "models/qkv_heads.h"
#include "parallel/attention_dropout.h"
#include "parallel/ring_attention.h"

namespace loom {
namespace {

// Adds a key padding mask (B, S) (true: padded) to what scores_mask returned: (B, 1, T, S) bool, or
// (B, H, T, S) with ALiBi's float bias. A causal flag becomes an explicit mask, since SDPA takes one or
// the other.
torch::Tensor with_key_padding(const std::optional<torch::Tensor>& mask, bool* is_causal,
                               const torch::Tensor& key_padding, int64_t T, int64_t S) {
  const auto keep = ~key_padding.to(torch::kBool).view({key_padding.size(0), 1, 1, S});  // (B, 1, 1, S)
  if (*is_causal) {
    *is_causal = false;
    return keep & torch::ones({T, S}, keep.options()).tril();
  }
  if (!mask) return keep;
  if (mask->scalar_type() == torch::kBool) return keep & *mask;
  return mask->masked_fill(~keep, -std::numeric_limits<float>::infinity());
}

// Adds packed documents' block-diagonal mask (models/document_mask.h) to what scores_mask returned:
// (B, 1, T, T) bool, or (B, H, T, T) with ALiBi's float bias.
torch::Tensor with_documents(const std::optional<torch::Tensor>& mask, bool* is_causal, const torch::Tensor& positions) {
  const auto same_document = document_causal_mask(positions);  // (B, 1, T, T), causal already
  *is_causal = false;
  if (!mask) return same_document;
  if (mask->scalar_type() == torch::kBool) return same_document & *mask;
  return mask->masked_fill(~same_document, -std::numeric_limits<float>::infinity());
}

// Adds a position bias (1 or B, H, T, S) (models/relative_position_bias.h) to what scores_mask returned
// (nothing, the causal flag or a bool mask): the bias with -inf where masked.
torch::Tensor with_position_bias(const std::optional<torch::Tensor>& mask, bool* is_causal, const torch::Tensor& bias,
                                 int64_t T, int64_t S) {
  LOOM_CHECK(!mask || mask->scalar_type() == torch::kBool, "a position bias does not combine with ALiBi's");
  torch::Tensor visible;
  if (*is_causal) visible = torch::ones({T, S}, bias.options().dtype(torch::kBool)).tril();
  if (mask) visible = *mask;
  *is_causal = false;
  if (!visible.defined()) return bias;
  return bias.masked_fill(~visible, -std::numeric_limits<float>::infinity());
}

}  // namespace

AttentionImpl::AttentionImpl(const AttentionOptions& options)
    : options_(options),
      heads_(options.n_heads),
      kv_heads_(options.n_kv_heads > 0 ? options.n_kv_heads : options.n_heads),
      head_dim_(options.head_dim > 0 ? options.head_dim : options.d_model / options.n_heads) {
  LOOM_CHECK(heads_ % kv_heads_ == 0, "n_kv_heads=", kv_heads_, " does not divide n_heads=", heads_);
  const int64_t c = options.d_model, H = heads_, K = kv_heads_, D = head_dim_, tp = options.tp.size();
  LOOM_CHECK(H % tp == 0 && K % tp == 0, "the tensor-parallel size ", tp, " must divide n_heads=", H,
             " and n_kv_heads=", K);
  ParallelLinearOptions qkv;
  qkv.in = c;
  qkv.out = (H + 2 * K) * D;
  qkv.bias = options.bias;
  qkv.init_std = options.init_std;
  qkv.tp = options.tp;
  qkv.sections = {H * D, K * D, K * D};
  qkv_ = register_module("qkv", ColumnParallelLinear(qkv));
  ParallelLinearOptions out;
  out.in = H * D;
  out.out = c;
  out.bias = options.bias;
  out.init_std = options.out_init_std;
  out.tp = options.tp;
  out_ = register_module("out", RowParallelLinear(out));
  if (options.qk_norm) {
    q_norm_ = register_parameter("q_norm", torch::ones({D}));
    k_norm_ = register_parameter("k_norm", torch::ones({D}));
  }
  heads_ = H / tp;  // from here on, this rank's heads
  kv_heads_ = K / tp;
  if (options.position == PositionKind::kAlibi)
    alibi_slopes_ = alibi_slopes(H).narrow(0, options.tp.rank() * heads_, heads_).clone();
}

std::optional<torch::Tensor> AttentionImpl::scores_mask(int64_t first, int64_t T, int64_t key_first, int64_t S,
                                                        const torch::Tensor& q, bool* is_causal) const {
  const bool alibi = alibi_slopes_.defined();
  const int64_t window = options_.window;
  const bool window_cuts = window > 0 && window < first + T - key_first;  // some key is beyond the window
  *is_causal = false;
  if (!alibi && !window_cuts) {
    if (!options_.causal || T == 1) return std::nullopt;  // every kept key is visible
    if (key_first == first) {  // no cache: the kernel's own (top-left aligned) causal mask is right
      *is_causal = true;
      return std::nullopt;
    }
  }
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(q.device());
  const auto rows = torch::arange(first, first + T, longs).unsqueeze(1);  // (T, 1) query positions
  const auto cols = torch::arange(key_first, key_first + S, longs).unsqueeze(0);  // (1, S) key positions
  const auto distance = rows - cols;                                             // (T, S)
  auto visible = options_.causal ? distance >= 0 : torch::ones_like(distance, torch::kBool);
  if (window > 0) visible = visible & (distance.abs() < window);
  if (!alibi) return visible;
  // ALiBi: -slope_h * |i - j|, so nearer keys weigh more; masked keys get -inf.
  const auto slopes = alibi_slopes_.to(q.device()).view({-1, 1, 1});
  const auto bias = -slopes * distance.abs().to(torch::kFloat).unsqueeze(0);  // (H, T, S)
  return bias.masked_fill(~visible, -std::numeric_limits<float>::infinity()).to(q.scalar_type());
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::cross_qkv(const torch::Tensor& x,
                                                                                 const torch::Tensor& memory,
                                                                                 MemoryKeys* keys) const {
  // Under TP, x and the memory enter the TP region as the fused projection's input would.
  const auto xs = qkv_->region_input(x);
  const int64_t B = xs.size(0), T = xs.size(1);
  const int64_t H = heads_, K = kv_heads_, D = head_dim_;
  const auto& w = qkv_->weight;
  const auto& b = qkv_->bias;  // undefined without biases
  auto rows = [&](const torch::Tensor& t, int64_t from, int64_t n) { return t.defined() ? t.narrow(0, from, n) : t; };
  auto q = linear_forward(xs, rows(w, 0, H * D), rows(b, 0, H * D)).view({B, T, H, D}).transpose(1, 2);
  if (keys != nullptr && keys->filled()) return {q, keys->k, keys->v};  // the encoder's, computed once
  const auto ms = qkv_->region_input(memory);
  const int64_t S = ms.size(1);
  // (B, S, 2 K D) -> k and v (B, K, S, D)
  const auto kv = linear_forward(ms, rows(w, H * D, 2 * K * D), rows(b, H * D, 2 * K * D)).chunk(2, -1);
  auto k = kv[0].view({ms.size(0), S, K, D}).transpose(1, 2);
  auto v = kv[1].view({ms.size(0), S, K, D}).transpose(1, 2);
  if (keys != nullptr) {
    keys->k = k;
    keys->v = v;
  }
  return {q, k, v};
}

torch::Tensor AttentionImpl::ring_attention_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& document_positions) const {
  const auto global = options_.cp.positions(q.size(2), q.device());  // (L)
  RingAttentionOptions ring;
  ring.group = options_.cp.split_group();
  ring.causal = options_.causal;
  ring.window = options_.window;
  ring.alibi_slopes = alibi_slopes_;
  ring.waited_s = options_.cp.ring_waited_s();
  ring.dropout = is_training() ? options_.dropout : 0.0;
  if (ring.dropout > 0) {  // one seed per call, from this rank's heads' stream under TP (as SDPA's draws)
    std::optional<TensorParallelRng::Fork> own_stream;
    if (options_.tp.rng() != nullptr) own_stream.emplace(*options_.tp.rng(), q.device());
    ring.dropout_seed = draw_attention_dropout_seed(q.device());
  }
  // A packed document's queries see keys from its first token on: global position - position in the document.
  const auto key_starts =
      document_positions.defined() ? global.unsqueeze(0) - document_positions.to(q.device()) : torch::Tensor();
  return ring_attention(q, k, v, ring, key_starts);  // (B, H, L, D)
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t first, const AttentionInputs& inputs) const {
  if (options_.cp.split_group() != nullptr) return ring_attention_of(q, k, v, inputs.positions);
  const int64_t T = q.size(2), S = k.size(2);
  const bool cross = inputs.memory.defined();
  std::optional<torch::Tensor> mask;
  bool is_causal = false;  // every memory position is visible to cross-attention
  if (!cross) mask = scores_mask(first, T, first + T - S, S, q, &is_causal);
  if (inputs.position_bias.defined()) {
    LOOM_CHECK(inputs.position_bias.size(-2) == T && inputs.position_bias.size(-1) == S, "a position bias of ",
               inputs.position_bias.sizes(), " for ", T, " queries and ", S, " keys");
    mask = with_position_bias(mask, &is_causal, inputs.position_bias.to(q.device(), q.scalar_type()), T, S);
  }
  if (inputs.key_padding.defined()) mask = with_key_padding(mask, &is_causal, inputs.key_padding, T, S);

  const double dropout = is_training() ? options_.dropout : 0.0;
  // Plain causal self-attention (no cache offset, padding, window or bias: is_causal without a mask) on
  // CPU goes through the query-blocked kernel where that is faster (see blocked_attention.cpp); packed
  // documents too, as each query's first key. SDPA takes them as a (B, 1, T, T) mask.
  const bool blocked = options_.scaled && is_causal && !mask && dropout == 0.0 && kv_heads_ == heads_ && blocked_attention_is_faster(q, k, v);
  if (inputs.positions.defined() && !blocked && !cross)
    mask = with_documents(mask, &is_causal, inputs.positions.to(q.device()));
  std::optional<TensorParallelRng::Fork> own_stream;  // this rank's heads: its own dropout masks
  if (dropout > 0 && options_.tp.rng() != nullptr) own_stream.emplace(*options_.tp.rng(), q.device());
  const torch::Tensor key_starts =
      blocked && inputs.positions.defined() ? document_starts(inputs.positions) : torch::Tensor();
  return blocked ? blocked_causal_attention(q, k, v, 64, false, key_starts)
                 : at::scaled_dot_product_attention(q, k, v, mask, dropout, is_causal,
                                                    options_.scaled ? std::nullopt : std::optional<double>(1.0),
                                                    /*enable_gqa=*/kv_heads_ != heads_);  // (B, H, T, D)
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, KVCache* cache, const AttentionInputs& inputs) {
  // Under sequence parallelism x holds T / tp positions; the projections gather them, so T here is
  // every position.
  const int64_t B = x.size(0);
  const int64_t T = options_.tp.sequence_parallel() ? x.size(1) * options_.tp.size() : x.size(1);
  const int64_t H = heads_, K = kv_heads_, D = head_dim_;
  torch::Tensor q, k, v;
  int64_t first = 0;  // absolute position of x's first token
  if (inputs.memory.defined()) {
    std::tie(q, k, v) = cross_qkv(x, inputs.memory, inputs.memory_keys);
  } else {
    // (B, T, (H + 2K) D) -> q (B, H, T, D), k and v (B, K, T, D)
    std::tie(q, k, v) = qkv_heads(qkv_->forward(x), H, K, D);
    if (q_norm_.defined()) {  // in fp32, as Hugging Face's Qwen3RMSNorm
      const auto rms = [&](const torch::Tensor& h, const torch::Tensor& gain) {
        const auto f = h.to(torch::kFloat);
        return gain.to(h.dtype()) * (f * torch::rsqrt(f.square().mean(-1, true) + options_.qk_norm_eps)).to(h.dtype());
      };
      q = rms(q, q_norm_);
      k = rms(k, k_norm_);
    }
    first = cache != nullptr ? cache->seen() : 0;
    // A batch of sequences at different positions (models/kv_cache.h, seen_rows): each row's own.
    const torch::Tensor row_seen = cache != nullptr ? cache->seen_rows() : torch::Tensor();
    const bool packed = inputs.positions.defined();
    if (packed) {
      TORCH_CHECK(cache == nullptr && options_.causal, "packed documents are for causal training, without a cache");
      check_document_positions(inputs.positions, B, T);
    }
    const bool ring = options_.cp.split_group() != nullptr;
    TORCH_CHECK(!ring || cache == nullptr, "a context-parallel model does not generate: load it whole");
    if (options_.position == PositionKind::kRope) {
      // Each query and key turns by its position: in its document (packed), its global one (context
      // parallelism), or the ones after what the cache (or, in a ragged batch, the row) has seen.
      const auto rows_at = [&] {
        return (row_seen.unsqueeze(1) + torch::arange(T, row_seen.options())).to(q.device());  // (B, T)
      };
      const auto [cos, sin] =
          packed             ? rope_cos_sin_at(inputs.positions.to(q.device()), D, options_.rope, q.options())
          : ring             ? rope_cos_sin_at(options_.cp.positions(T, q.device()).unsqueeze(0), D, options_.rope, q.options())
          : row_seen.defined() ? rope_cos_sin_at(rows_at(), D, options_.rope, q.options())
                             : rope_cos_sin(first, T, D, options_.rope, q.options());
      q = apply_rope(q, cos, sin);
      k = apply_rope(k, cos, sin);
    }
    if (cache != nullptr) {
      // With nothing but causality, the window and ALiBi to apply, the cache may attend where it keeps the keys
      // (the paged cache's kernel, models/paged_decode_attention.h: decode steps, speculative verification and
      // short prefill chunks); else it appends. A longer chunk goes to SDPA, whose GEMMs beat the kernel's
      // products there (docs/performance.md: 0.6-0.8x for 64 positions after 448).
      constexpr int64_t kMaxInPlaceQueries = 16;
      if (T <= kMaxInPlaceQueries && options_.causal && !inputs.key_padding.defined() && !inputs.position_bias.defined() &&
          !(is_training() && options_.dropout > 0)) {
        KVCache::DecodeAttention how;
        how.scale = options_.scaled ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
        how.window = options_.window;
        how.alibi_slopes = alibi_slopes_;
        const auto o = cache->append_and_attend(q, k, v, how);
        if (o.defined()) return out_->forward(o.transpose(1, 2).reshape({B, T, H * D}));
      }
      std::tie(k, v) = cache->append(k, v);
      // Keys a shorter row of a ragged batch does not have (right-aligned: the mask's distances hold for every row).
      const auto padding = cache->key_padding();
      if (padding.defined()) {
        AttentionInputs padded = inputs;
        padded.key_padding = inputs.key_padding.defined() ? inputs.key_padding.to(torch::kBool) | padding : padding;
        padded.key_padding = padded.key_padding.to(q.device());
        return out_->forward(attend(q, k, v, first, padded).transpose(1, 2).reshape({B, T, H * D}));
      }
    }
  }
  return out_->forward(attend(q, k, v, first, inputs).transpose(1, 2).reshape({B, T, H * D}));
}

}  // namespace loom
