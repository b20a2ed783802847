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
                              const std::vector<int64_t>& offsets, double scale, const torch::Tensor& slopes,
                              int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), K = keys.size(1), G = H / K;
  const double *qp = q.data_ptr<double>(), *kp = keys.data_ptr<double>(), *vp = values.data_ptr<double>();
  const double* sp = slopes.defined() ? slopes.data_ptr<double>() : nullptr;
  double* op = out.data_ptr<double>();
  at::parallel_for(0, B * H * T, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> p;
    for (int64_t task = begin; task < end; ++task) {  // task: (b, h, t), q's and out's row
      const int64_t b = task / (H * T), h = task / T % H, t = task % T, g = h / G;
      const int64_t row = offsets[b], last = offsets[b + 1] - row - T + t;  // the query's key
      const int64_t first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
      p.assign(static_cast<size_t>(last - first + 1), 0.0);
      double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t j = first; j <= last; ++j) {
        const double* key = kp + (slots[row + j] * K + g) * D;
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += qp[task * D + d] * key[d];
        s = s * scale - (sp != nullptr ? sp[h] * static_cast<double>(last - j) : 0.0);
        p[j - first] = s;
        m = std::max(m, s);
      }
      for (auto& x : p) sum += (x = std::exp(x - m));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int64_t j = first; j <= last; ++j) acc += p[j - first] * vp[(slots[row + j] * K + g) * D + d];
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
                                     double scale, const torch::Tensor& alibi_slopes, int64_t window,
                                     bool force_portable) {
  namespace rows = paged_attention_rows;
  LOOM_CHECK(paged_decode_attention_applies(q, keys) && keys.scalar_type() == values.scalar_type(),
             "paged attention takes CPU float, bf16 or double tensors without autograd");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), K = keys.size(1);
  LOOM_CHECK(T >= 1 && keys.dim() == 3 && keys.size(2) == D && values.sizes() == keys.sizes() && H % K == 0,
             "paged attention: q ", q.sizes(), " against a pool of ", keys.sizes());
  LOOM_CHECK(static_cast<int64_t>(offsets.size()) == B + 1 && offsets.back() == static_cast<int64_t>(slots.size()),
             "paged attention: ", offsets.size(), " offsets for ", B, " rows");
  for (int64_t b = 0; b < B; ++b)
    LOOM_CHECK(offsets[b + 1] - offsets[b] >= T, "paged attention: row ", b, " has ", offsets[b + 1] - offsets[b],
               " keys for ", T, " queries");
  if (q.scalar_type() == torch::kDouble) {
    auto out = torch::empty_like(q, torch::MemoryFormat::Contiguous);
    paged_decode_rows_double(q.contiguous(), out, keys.contiguous(), values.contiguous(), slots, offsets, scale,
                             alibi_slopes.defined() ? alibi_slopes.to(torch::kDouble).contiguous() : torch::Tensor(),
                             window);
    return out;
  }
  const auto qf = q.to(torch::kFloat).contiguous();  // (B, H, T, D)
  auto out = torch::empty({B, H, T, D}, q.options().dtype(torch::kFloat));
  const auto slopes = alibi_slopes.defined() ? alibi_slopes.to(torch::kFloat).contiguous() : torch::Tensor();
  LOOM_CHECK(!slopes.defined() || slopes.numel() == H, "paged attention: ", slopes.numel(), " ALiBi slopes for ", H,
             " heads");
  const auto k = keys.contiguous(), v = values.contiguous();
  rows::DecodeRows shape;
  shape.heads = H;
  shape.kv_heads = K;
  shape.head_dim = D;
  shape.queries = T;
  shape.q = qf.data_ptr<float>();
  shape.out = out.data_ptr<float>();
  shape.keys = k.data_ptr();
  shape.values = v.data_ptr();
  shape.bf16 = k.scalar_type() == torch::kBFloat16;
  shape.slots = slots.data();
  shape.offsets = offsets.data();
  shape.window = window;
  shape.scale = static_cast<float>(scale);
  shape.alibi_slopes = slopes.defined() ? slopes.data_ptr<float>() : nullptr;
  const bool portable = force_portable || !cpu_has_avx512();
  // A task is a (row, kv head, tile of queries): about (H / K) * tile * keys * D * 4 flops; a few thousand keys'
  // work a thread at least.
  const int64_t tasks = B * K * shape.tiles();
  const int64_t work = static_cast<int64_t>(slots.size()) * std::min(T, rows::kQueryTile) * H * D;
  const int64_t grain = work < (int64_t{1} << 16) ? tasks : 1;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    (portable ? rows::DEFAULT::decode_rows : rows::AVX512::decode_rows)(shape, begin, end);
  });
  return out.to(q.scalar_type());
}

}  // namespace loom
