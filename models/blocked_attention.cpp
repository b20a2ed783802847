#include "models/blocked_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <cmath>

#include "core/error.h"
#include "models/blocked_attention_rows.h"
#include "core/cpu_kernels.h"

namespace loom {
namespace {

namespace rows = blocked_attention_rows;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<BlockedAttentionMode> mode{BlockedAttentionMode::kAuto};

// Runs `fn(rows)` over the rows of one (BH * n, e) block of scores, split across ATen's threads.
template <typename Fn>
void for_rows(const rows::Rows& shape, int64_t total_rows, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, 16384 / shape.cols);  // rows per task: a few tens of KB of scores
  at::parallel_for(0, total_rows, grain, [&](int64_t begin, int64_t end) {
    rows::Rows part = shape;
    part.row_begin = begin;
    part.row_end = end;
    fn(part);
  });
}

// dq, dk, dv (BH, T, D) -> their gradients as (B, H, T, D) views of one (B, T, 3, H, D) buffer in the inputs'
// dtype: the layout of the fused QKV projection that q, k and v are usually head views of, so qkv_heads
// (models/qkv_heads.h) hands the buffer on as the projection's gradient without a copy. The casts of dK and dV
// from their fp32 sums happen in the same pass as the transposes.
variable_list packed_gradients(const torch::Tensor& dq, const torch::Tensor& dk, const torch::Tensor& dv,
                               const std::vector<int64_t>& shape4) {
  const int64_t B = shape4[0], H = shape4[1], T = shape4[2], D = shape4[3];
  auto packed = torch::empty({B, T, 3, H, D}, dq.options());
  variable_list grads = {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};  // none for the rest
  for (int64_t i = 0; i < 3; ++i) {
    auto view = packed.select(2, i).transpose(1, 2);  // (B, H, T, D)
    view.copy_(grads[i].view(shape4));
    grads[i] = view;
  }
  return grads;
}

// Positions [first, first + n) of t (B, H, T, D) as a contiguous (B * H, n, D): the operand layout ATen's CPU
// bmm takes as it is (it copies one whose batch stride is not n * D on every call, as a narrowed (B * H, T, D)
// would be). One copy from whatever layout t has, usually head views of the fused QKV projection.
torch::Tensor positions(const torch::Tensor& t, int64_t first, int64_t n) {
  return t.narrow(2, first, n).reshape({t.size(0) * t.size(1), n, t.size(3)}).contiguous();
}

// Packed documents: each row's first visible key from starts (B, T) int64 contiguous (empty: none; an
// autograd Function's tensor arguments must be defined).
void with_starts(rows::Rows& shape, const torch::Tensor& starts, int64_t heads) {
  if (starts.numel() == 0) return;
  shape.key_begin = starts.data_ptr<int64_t>();
  shape.heads = heads;
}

struct BlockedCausalAttention : public torch::autograd::Function<BlockedCausalAttention> {
  // q, k, v: (B, H, T, D) -> (B, H, T, D)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t block, bool portable, const torch::Tensor& starts) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // stay in q's dtype
    RECORD_FUNCTION("loom::blocked_attention_forward", std::vector<c10::IValue>{});  // for loom bench's op shares
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), BH = B * H;
    auto o = torch::empty({BH, T, D}, q.options());
    auto lse = torch::empty({BH, T}, q.options().dtype(torch::kFloat));  // logsumexp of each row's scores
    for (int64_t s = 0; s < T; s += block) {
      const int64_t n = std::min(block, T - s), e = s + n;  // queries [s, e) see at most keys [0, e)
      auto scores = at::bmm(positions(q, s, n), positions(k, 0, e).transpose(1, 2));  // (BH, n, e)
      rows::Rows shape{0, 0, n, s, e, T, D, static_cast<float>(1.0 / std::sqrt(double(D))),
                       q.scalar_type() == torch::kBFloat16};
      with_starts(shape, starts, H);
      for_rows(shape, BH * n, [&](const rows::Rows& part) {
        (portable ? rows::DEFAULT::forward_rows : rows::AVX512::forward_rows)(part, scores.data_ptr(),
                                                                              lse.data_ptr<float>());
      });
      auto oi = o.narrow(1, s, n);  // (BH, n, D)
      at::bmm_out(oi, scores, positions(v, 0, e));
    }
    ctx->save_for_backward({q, k, v, o, lse, starts});
    ctx->saved_data["block"] = block;
    ctx->saved_data["portable"] = portable;
    return o.view({B, H, T, D});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    RECORD_FUNCTION("loom::blocked_attention_backward", std::vector<c10::IValue>{});
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4], &starts = saved[5];
    const int64_t block = ctx->saved_data["block"].toInt();
    const bool portable = ctx->saved_data["portable"].toBool();
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
    const auto shape4 = q.sizes().vec();
    const auto dout = grads[0].reshape({BH, T, D}).to(q.scalar_type()).contiguous();  // (BH, T, D)
    const bool bf16 = q.scalar_type() == torch::kBFloat16;
    auto dq = torch::empty({BH, T, D}, q.options());
    // dK and dV sum over query blocks: in fp32, whatever the dtype of the products.
    auto dk = torch::zeros({BH, T, D}, q.options().dtype(torch::kFloat));
    auto dv = torch::zeros({BH, T, D}, q.options().dtype(torch::kFloat));
    for (int64_t s = 0; s < T; s += block) {
      const int64_t n = std::min(block, T - s), e = s + n;
      // Each block, its output gradient and the key and value prefixes are made contiguous once here and used
      // by each of their products (see positions()).
      // The value prefix serves one product and is freed right after it (bench-gpt at batch 32 with `full`
      // checkpointing peaks during this loop: 8 MB lower so).
      const auto qi = positions(q, s, n), doi = dout.narrow(1, s, n).contiguous();  // (BH, n, D)
      const auto ki = positions(k, 0, e);                                            // (BH, e, D)
      auto p = at::bmm(qi, ki.transpose(1, 2));                          // (BH, n, e): scores, then P
      auto ds = at::bmm(doi, positions(v, 0, e).transpose(1, 2));        // (BH, n, e): dP, then dS
      rows::Rows shape{0, 0, n, s, e, T, D, static_cast<float>(1.0 / std::sqrt(double(D))), bf16};
      with_starts(shape, starts, q.size(1));
      for_rows(shape, BH * n, [&](const rows::Rows& part) {
        (portable ? rows::DEFAULT::backward_rows : rows::AVX512::backward_rows)(
            part, p.data_ptr(), ds.data_ptr(), lse.data_ptr<float>(), dout.data_ptr(), o.data_ptr());
      });
      auto dqi = dq.narrow(1, s, n);  // (BH, n, D)
      at::bmm_out(dqi, ds, ki);
      // A product then a sum, not baddbmm_ into the narrowed prefix: ATen's CPU baddbmm_ multiplies an output
      // whose batch stride is not e x D one matrix at a time (fp32 B=8 H=8 T=256 D=64, fwd+bwd per layer under
      // the profiler: 41.7 ms with it, 36.6 ms without).
      dv.narrow(1, 0, e).add_(at::bmm(p.transpose(1, 2), doi));  // (BH, e, D)
      dk.narrow(1, 0, e).add_(at::bmm(ds.transpose(1, 2), qi));
    }
    return packed_gradients(dq, dk, dv, shape4);
  }
};

}  // namespace

torch::Tensor blocked_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t block, bool force_portable, const torch::Tensor& key_starts) {
  LOOM_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
             "blocked_causal_attention takes q, k, v of one shape (B, H, T, D)");
  LOOM_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "blocked_causal_attention is CPU only");
  LOOM_CHECK((q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kBFloat16) &&
                 k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
             "blocked_causal_attention takes float or bf16 q, k, v of one dtype");
  LOOM_CHECK(block > 0, "blocked_causal_attention: block must be positive");
  torch::Tensor starts = torch::empty({0}, torch::kLong);
  if (key_starts.defined()) {
    LOOM_CHECK(key_starts.dim() == 2 && key_starts.size(0) == q.size(0) && key_starts.size(1) == q.size(2),
               "blocked_causal_attention: key_starts must be (B, T)");
    // Every start in [0, t]: the row kernels read keys from there to t.
    const auto index = torch::arange(q.size(2), torch::kLong).unsqueeze(0);
    starts = key_starts.to(torch::kCPU, torch::kLong).contiguous();
    LOOM_CHECK(((starts >= 0) & (starts <= index)).all().item<bool>(),
               "blocked_causal_attention: key_starts[b, t] must lie in [0, t]");
  }
  return BlockedCausalAttention::apply(q, k, v, block, force_portable || !cpu_has_avx512(), starts);
}

bool blocked_attention_is_faster(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto how = mode.load();
  const bool fits = how != BlockedAttentionMode::kOff && q.device().is_cpu() && q.dim() == 4 &&
                    k.sizes() == q.sizes() && v.sizes() == q.sizes() &&
                    (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kBFloat16) &&
                    k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type();
  if (!fits || how == BlockedAttentionMode::kAlways) return fits;
  // Measured (AMD EPYC, AVX-512 BF16, no AMX, 2 threads; fwd+bwd per layer, B=8 H=8 D=64, medians):
  // bf16 T=256 23 vs SDPA 31 ms, T=512 79 vs 102, T=1024 276 vs 254; fp32 T=256 30 vs 27 ms (fp32 sgemm
  // gains too little from the skipped blocks to pay for the extra passes). So: bf16, T <= 512, AVX-512.
  return cpu_has_avx512() && q.scalar_type() == torch::kBFloat16 && q.size(2) <= 512;
}

void set_blocked_attention_mode(BlockedAttentionMode how) { mode = how; }

}  // namespace loom
