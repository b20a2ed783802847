#include "models/paged_decode_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "core/cpu_kernels.h"
#include "core/error.h"
#include "models/paged_attention_rows.h"

namespace loom {
namespace {

// Double precision (the tests' models): the same rows, plainly, in double (no vector build).
void paged_decode_rows_double(const torch::Tensor& q, torch::Tensor& out, const torch::Tensor& keys,
                              const torch::Tensor& values, const std::vector<int64_t>& slots,
                              const std::vector<int64_t>& offsets, double scale, const torch::Tensor& slopes) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), K = keys.size(1), G = H / K;
  const double *qp = q.data_ptr<double>(), *kp = keys.data_ptr<double>(), *vp = values.data_ptr<double>();
  const double* sp = slopes.defined() ? slopes.data_ptr<double>() : nullptr;
  double* op = out.data_ptr<double>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> p;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H, g = h / G, first = offsets[b], n = offsets[b + 1] - first;
      p.assign(static_cast<size_t>(n), 0.0);
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double* key = kp + (slots[first + j] * K + g) * D;
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += qp[task * D + d] * key[d];
        p[j] = s * scale - (sp != nullptr ? sp[h] * static_cast<double>(n - 1 - j) : 0.0);
        m = std::max(m, p[j]);
      }
      for (auto& x : p) sum += (x = std::exp(x - m));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; ++j) acc += p[j] * vp[(slots[first + j] * K + g) * D + d];
        op[task * D + d] = acc / sum;
      }
    }
  });
}

}  // namespace

bool paged_decode_attention_applies(const torch::Tensor& q, const torch::Tensor& pool) {
  const auto floating = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16;
  };
  const bool doubles = q.scalar_type() == torch::kDouble && pool.scalar_type() == torch::kDouble;
  return q.device().is_cpu() && pool.device().is_cpu() && (doubles || (floating(q) && floating(pool))) &&
         !(q.requires_grad() && torch::GradMode::is_enabled());
}

torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const std::vector<int64_t>& slots, const std::vector<int64_t>& offsets,
                                     double scale, const torch::Tensor& alibi_slopes, bool force_portable) {
  namespace rows = paged_attention_rows;
  LOOM_CHECK(paged_decode_attention_applies(q, keys) && keys.scalar_type() == values.scalar_type(),
             "paged decode attention takes CPU float, bf16 or double tensors without autograd");
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), K = keys.size(1);
  LOOM_CHECK(q.size(2) == 1 && keys.dim() == 3 && keys.size(2) == D && values.sizes() == keys.sizes() && H % K == 0,
             "paged decode attention: q ", q.sizes(), " against a pool of ", keys.sizes());
  LOOM_CHECK(static_cast<int64_t>(offsets.size()) == B + 1 && offsets.back() == static_cast<int64_t>(slots.size()),
             "paged decode attention: ", offsets.size(), " offsets for ", B, " rows");
  if (q.scalar_type() == torch::kDouble) {
    auto out = torch::empty_like(q, torch::MemoryFormat::Contiguous);
    paged_decode_rows_double(q.contiguous(), out, keys.contiguous(), values.contiguous(), slots, offsets, scale,
                             alibi_slopes.defined() ? alibi_slopes.to(torch::kDouble).contiguous() : torch::Tensor());
    return out;
  }
  const auto qf = q.to(torch::kFloat).contiguous();  // (B, H, 1, D)
  auto out = torch::empty({B, H, 1, D}, q.options().dtype(torch::kFloat));
  const auto slopes = alibi_slopes.defined() ? alibi_slopes.to(torch::kFloat).contiguous() : torch::Tensor();
  LOOM_CHECK(!slopes.defined() || slopes.numel() == H, "paged decode attention: ", slopes.numel(), " ALiBi slopes for ",
             H, " heads");
  const auto k = keys.contiguous(), v = values.contiguous();
  rows::DecodeRows shape;
  shape.heads = H;
  shape.kv_heads = K;
  shape.head_dim = D;
  shape.q = qf.data_ptr<float>();
  shape.out = out.data_ptr<float>();
  shape.keys = k.data_ptr();
  shape.values = v.data_ptr();
  shape.bf16 = k.scalar_type() == torch::kBFloat16;
  shape.slots = slots.data();
  shape.offsets = offsets.data();
  shape.scale = static_cast<float>(scale);
  shape.alibi_slopes = slopes.defined() ? slopes.data_ptr<float>() : nullptr;
  const bool portable = force_portable || !cpu_has_avx512();
  // A task is a (row, kv head): about (H / K) * keys * D * 4 flops; a few thousand keys' work a thread at least.
  const int64_t tasks = B * K;
  const int64_t work = static_cast<int64_t>(slots.size()) * H * D;
  const int64_t grain = work < (int64_t{1} << 16) ? tasks : 1;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    (portable ? rows::DEFAULT::decode_rows : rows::AVX512::decode_rows)(shape, begin, end);
  });
  return out.to(q.scalar_type());
}

}  // namespace loom
