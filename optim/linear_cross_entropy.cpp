#include "optim/linear_cross_entropy.h"

#include <ATen/Parallel.h>

#include <vector>

#include "core/autocast_off.h"
#include "core/cpu_kernels.h"
#include "core/error.h"
#include "optim/cross_entropy_rows.h"
#include "parallel/tensor_parallel.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Setup {
  Communicator* tp = nullptr;  // a group of more than one rank, or null
  int64_t chunk = 0;
  double smoothing = 0;
  int64_t ignore_index = kIgnoreIndex;
  bool need_grad = false;
  SoftmaxSteps steps = SoftmaxSteps::kAuto;
};

// One chunk's softmax over its logits z (n, V_r): the per-row statistics, summed over the vocabulary shards
// when `tp` is set, and the gradient of sum_i weight_i * loss_i with respect to z.
struct ChunkTargets {
  torch::Tensor column;  // (n) int64: the target's column on this rank, -1 when it is elsewhere
  torch::Tensor weight;  // (n) fp32: 1 for the tokens that count, 0 for ignored ones
  double smooth = 0;     // label smoothing e / V, taken from every column's gradient
  double target_weight = 1;  // 1 - e, taken from the target column's gradient
  bool logit_sum = false;    // smoothing needs sum(z - max) per row
  bool gradient = false;
};
struct ChunkSoftmax {
  torch::Tensor target, exp_sum, logit_sum;  // (n) fp32: z[y] - max, sum exp(z - max), sum (z - max)
  torch::Tensor grad;                         // (n, V_r) in z's dtype, when asked for
};

// ATen's operators, for every device and dtype: an fp32 copy of the chunk and a pass per step.
ChunkSoftmax softmax_aten(const torch::Tensor& logits, const ChunkTargets& t, Communicator* tp) {
  auto z = logits.to(torch::kFloat);
  // The max only keeps exp() in range; the loss does not depend on it.
  auto max = std::get<0>(z.max(1));  // (n)
  if (tp != nullptr) tp->all_reduce(max, ReduceOp::kMax);
  z.sub_(max.unsqueeze(1));
  const auto on_rank = t.column >= 0;
  const auto col = t.column.clamp_min(0).unsqueeze(1);
  ChunkSoftmax out;
  out.target = z.gather(1, col).squeeze(1).masked_fill(~on_rank, 0.0);
  out.logit_sum = t.logit_sum ? z.sum(1) : torch::zeros_like(out.target);
  auto p = z.exp_();  // (n, V_r), unnormalized
  out.exp_sum = p.sum(1);
  if (tp != nullptr) {
    auto sums = torch::stack({out.exp_sum, out.target, out.logit_sum});  // one all-reduce for the three
    tp->all_reduce(sums);
    out.exp_sum = sums[0];
    out.target = sums[1];
    out.logit_sum = sums[2];
  }
  if (!t.gradient) return out;
  p.div_(out.exp_sum.unsqueeze(1));
  p.scatter_add_(1, col, on_rank.to(torch::kFloat).mul(-t.target_weight).unsqueeze(1));
  if (t.smooth > 0) p.sub_(t.smooth);
  p.mul_(t.weight.unsqueeze(1));
  out.grad = p.to(logits.scalar_type());
  return out;
}

// loom's row kernels (optim/cross_entropy_rows.h), on CPU for float and bf16 logits: the gradient is written over
// the logits. Without vocabulary shards the three steps run a few rows at a time in a buffer that stays in cache.
ChunkSoftmax softmax_kernels(torch::Tensor logits, const ChunkTargets& t, Communicator* tp, bool portable) {
  namespace k = cross_entropy_rows;
  const int64_t n = logits.size(0), cols = logits.size(1);
  const bool bf16 = logits.scalar_type() == torch::kBFloat16;
  const auto fp32 = torch::TensorOptions(torch::kFloat);
  auto max = torch::empty({n}, fp32);
  ChunkSoftmax out{torch::empty({n}, fp32), torch::empty({n}, fp32), torch::zeros({n}, fp32), torch::Tensor()};
  const auto* column = t.column.data_ptr<int64_t>();
  float* logit_sum = t.logit_sum ? out.logit_sum.data_ptr<float>() : nullptr;
  auto load = portable ? k::DEFAULT::load_rows : k::AVX512::load_rows;
  auto exponentiate = portable ? k::DEFAULT::exp_rows : k::AVX512::exp_rows;
  auto gradient = portable ? k::DEFAULT::gradient_rows : k::AVX512::gradient_rows;
  auto step_load = [&](const k::Rows& rows, float* buffer) {
    load(rows, logits.data_ptr(), buffer, max.data_ptr<float>());
  };
  auto step_exp = [&](const k::Rows& rows, float* buffer) {
    exponentiate(rows, buffer, max.data_ptr<float>(), column, out.target.data_ptr<float>(),
                 out.exp_sum.data_ptr<float>(), logit_sum);
  };
  auto step_gradient = [&](const k::Rows& rows, const float* buffer) {
    gradient(rows, buffer, out.exp_sum.data_ptr<float>(), column, t.weight.data_ptr<float>(),
             static_cast<float>(t.smooth), static_cast<float>(t.target_weight), logits.data_ptr());
  };
  if (tp == nullptr) {
    const int64_t group = std::max<int64_t>(1, (256 << 10) / (cols * 4));  // rows per 256 KiB buffer
    at::parallel_for(0, n, group, [&](int64_t begin, int64_t end) {
      std::vector<float> buffer(group * cols);
      for (int64_t r = begin; r < end; r += group) {
        const k::Rows rows{r, std::min(r + group, end), cols, bf16};
        step_load(rows, buffer.data());
        step_exp(rows, buffer.data());
        if (t.gradient) step_gradient(rows, buffer.data());
      }
    });
  } else {
    auto buffer = torch::empty({n, cols}, fp32);
    auto over_rows = [&](const auto& step) {
      at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
        step(k::Rows{begin, end, cols, bf16}, buffer.data_ptr<float>() + begin * cols);
      });
    };
    over_rows(step_load);
    tp->all_reduce(max, ReduceOp::kMax);
    over_rows(step_exp);
    auto sums = torch::stack({out.exp_sum, out.target, out.logit_sum});  // one all-reduce for the three
    tp->all_reduce(sums);
    out.exp_sum.copy_(sums[0]);
    out.target.copy_(sums[1]);
    out.logit_sum.copy_(sums[2]);
    if (t.gradient) over_rows(step_gradient);
  }
  if (t.gradient) out.grad = logits;
  return out;
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, const Setup* setup) {
    const auto device = hidden.device().type();
    const auto compute = at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                                   : weight.scalar_type();
    AutocastOff autocast_off(device);
    const auto fp32 = hidden.options().dtype(torch::kFloat);
    const auto h = hidden.to(compute);  // (N, C); the weight is cast once per call, as autocast's cache does
    const auto w = weight.to(compute);  // (V_r, C)
    const int64_t N = h.size(0), C = h.size(1), V_r = w.size(0);
    Communicator* tp = setup->tp;
    int64_t V = V_r;
    ShardRange range{0, V_r};
    if (tp != nullptr) {
      auto vocab = torch::tensor({V_r}, w.options().dtype(torch::kLong));  // NCCL takes device tensors
      tp->all_reduce(vocab);
      V = vocab.item<int64_t>();
      range = shard_range(V, tp->size(), tp->rank());
    }
    const double e = setup->smoothing;
    const auto keep = targets != setup->ignore_index;  // (N)
    const auto local = targets - range.start;
    const auto mine = keep & (local >= 0) & (local < range.length);  // the target's column is on this rank
    const auto column = local.masked_fill(~mine, -1);                 // (N)
    const auto weights = keep.to(torch::kFloat);
    const bool kernel_dtype = device == c10::kCPU && (compute == torch::kFloat || compute == torch::kBFloat16);
    const bool portable = setup->steps == SoftmaxSteps::kPortableKernels;
    const bool kernels = kernel_dtype && setup->steps != SoftmaxSteps::kAten && (portable || cpu_has_avx512());
    // The gradient of sum_i keep_i * loss_i (the mean's 1 / count is applied in backward), accumulated in fp32.
    torch::Tensor grad_h, grad_w;
    if (setup->need_grad) {
      grad_h = torch::empty({N, C}, fp32);
      grad_w = torch::zeros({V_r, C}, fp32);
    }
    auto per_token = torch::empty({N}, fp32);
    for (int64_t s = 0; s < N; s += setup->chunk) {
      const int64_t n = std::min(setup->chunk, N - s);
      const auto hc = h.narrow(0, s, n);
      const auto z = torch::mm(hc, w.t());  // (n, V_r) logits in the products' dtype
      const ChunkTargets targets_here{column.narrow(0, s, n).contiguous(), weights.narrow(0, s, n).contiguous(),
                                      e / static_cast<double>(V), 1.0 - e, e > 0, setup->need_grad};
      const auto soft = kernels ? softmax_kernels(z, targets_here, tp, portable)
                                : softmax_aten(z, targets_here, tp);
      const auto log_sum_exp = soft.exp_sum.log();
      auto loss = log_sum_exp - soft.target;  // -log p[y]
      if (e > 0) loss = (1.0 - e) * loss + e * (log_sum_exp - soft.logit_sum / static_cast<double>(V));
      per_token.narrow(0, s, n).copy_(loss);
      if (!setup->need_grad) continue;
      const auto& dz = soft.grad;  // the head's backward products run in the forward's dtype
      if (compute == torch::kFloat) {
        auto rows = grad_h.narrow(0, s, n);
        torch::mm_out(rows, dz, w);  // (n, C)
        grad_w.addmm_(dz.t(), hc);   // (V_r, C)
      } else {
        grad_h.narrow(0, s, n).copy_(torch::mm(dz, w));
        grad_w.add_(torch::mm(dz.t(), hc));
      }
    }
    const auto count = weights.sum().clamp_min(1.0);
    ctx->saved_data["grad_h"] = grad_h;
    ctx->saved_data["grad_w"] = grad_w;
    ctx->saved_data["count"] = count;
    return (per_token * weights).sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto scale = grad_outputs[0] / ctx->saved_data["count"].toTensor();  // () fp32
    // Autograd frees a node's saved variables after its backward but not its saved_data: the two (N, C) and
    // (V_r, C) gradients are taken out here and scaled in place, so the rest of backward runs without them.
    auto take = [&](const char* key) {
      torch::Tensor saved;
      const auto it = ctx->saved_data.find(key);
      if (it != ctx->saved_data.end()) {
        saved = it->second.toTensor();
        ctx->saved_data.erase(it);
      }
      return saved;
    };
    auto grad_h = take("grad_h");
    auto grad_w = take("grad_w");
    LOOM_CHECK(grad_h.defined(),
               "linear_cross_entropy: backward needs a loss computed with gradients, and runs once per forward");
    torch::Tensor dh, dw;
    if (ctx->needs_input_grad(0)) dh = grad_h.mul_(scale);
    if (ctx->needs_input_grad(1)) dw = grad_w.mul_(scale);
    return {dh, dw, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                   int64_t chunk_tokens, double label_smoothing, int64_t ignore_index,
                                   Communicator* tp, SoftmaxSteps steps) {
  LOOM_CHECK(chunk_tokens > 0, "linear_cross_entropy: chunk_tokens must be positive, got ", chunk_tokens);
  LOOM_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
             "linear_cross_entropy: hidden (N, C) and weight (V, C) expected");
  Setup setup;
  setup.tp = tp != nullptr && tp->size() > 1 ? tp : nullptr;
  setup.chunk = chunk_tokens;
  setup.smoothing = label_smoothing;
  setup.ignore_index = ignore_index;
  setup.steps = steps;
  // Replicated hidden feeds every rank's vocabulary columns: its gradient is summed over the group.
  const auto h = setup.tp != nullptr ? copy_to_tp_region(hidden, *setup.tp) : hidden;
  setup.need_grad = torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
  return LinearCrossEntropy::apply(h, weight, targets, &setup);
}

}  // namespace loom
