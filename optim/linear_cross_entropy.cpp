#include "optim/linear_cross_entropy.h"

#include <ATen/autocast_mode.h>

#include "core/error.h"
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
};

// The function casts for itself (products in the autocast dtype, softmax in fp32): autocast must not
// re-cast inside it. Restored on exit.
class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType type) : type_(type), was_(at::autocast::is_autocast_enabled(type)) {
    at::autocast::set_autocast_enabled(type_, false);
  }
  ~AutocastOff() { at::autocast::set_autocast_enabled(type_, was_); }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  c10::DeviceType type_;
  bool was_;
};

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
      auto vocab = torch::tensor({V_r}, torch::kLong);
      tp->all_reduce(vocab);
      V = vocab.item<int64_t>();
      range = shard_range(V, tp->size(), tp->rank());
    }
    const double e = setup->smoothing;
    const auto keep = targets != setup->ignore_index;  // (N)
    const auto local = targets - range.start;
    const auto mine = keep & (local >= 0) & (local < range.length);  // the target's column is on this rank
    const auto column = local.masked_fill(~mine, 0);                  // (N)
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
      auto z = torch::mm(hc, w.t()).to(torch::kFloat);  // (n, V_r) logits
      // The max only keeps exp() in range; the loss does not depend on it.
      auto max = std::get<0>(z.max(1));  // (n)
      if (tp != nullptr) tp->all_reduce(max, ReduceOp::kMax);
      z.sub_(max.unsqueeze(1));
      const auto col = column.narrow(0, s, n).unsqueeze(1);
      const auto on_rank = mine.narrow(0, s, n);
      auto target = z.gather(1, col).squeeze(1).masked_fill(~on_rank, 0.0);  // (n)
      torch::Tensor logit_sum = e > 0 ? z.sum(1) : torch::zeros_like(target);  // (n)
      auto p = z.exp_();                                                        // (n, V_r), unnormalized
      auto exp_sum = p.sum(1);                                                  // (n)
      if (tp != nullptr) {
        auto sums = torch::stack({exp_sum, target, logit_sum});  // one all-reduce for the three
        tp->all_reduce(sums);
        exp_sum = sums[0];
        target = sums[1];
        logit_sum = sums[2];
      }
      const auto log_sum_exp = exp_sum.log();
      auto loss = log_sum_exp - target;  // -log p[y]
      if (e > 0) loss = (1.0 - e) * loss + e * (log_sum_exp - logit_sum / static_cast<double>(V));
      per_token.narrow(0, s, n).copy_(loss);
      if (!setup->need_grad) continue;
      // d loss_i / d z_iv = softmax_iv - (1 - e) [v == y_i] - e / V; ignored tokens contribute nothing.
      p.div_(exp_sum.unsqueeze(1));
      p.scatter_add_(1, col, on_rank.to(torch::kFloat).mul(-(1.0 - e)).unsqueeze(1));
      if (e > 0) p.sub_(e / static_cast<double>(V));
      p.mul_(keep.narrow(0, s, n).to(torch::kFloat).unsqueeze(1));
      const auto dz = p.to(compute);  // the head's backward products run in the forward's dtype
      if (compute == torch::kFloat) {
        auto rows = grad_h.narrow(0, s, n);
        torch::mm_out(rows, dz, w);  // (n, C)
        grad_w.addmm_(dz.t(), hc);   // (V_r, C)
      } else {
        grad_h.narrow(0, s, n).copy_(torch::mm(dz, w));
        grad_w.add_(torch::mm(dz.t(), hc));
      }
    }
    const auto weights = keep.to(torch::kFloat);
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
                                   Communicator* tp) {
  LOOM_CHECK(chunk_tokens > 0, "linear_cross_entropy: chunk_tokens must be positive, got ", chunk_tokens);
  LOOM_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
             "linear_cross_entropy: hidden (N, C) and weight (V, C) expected");
  Setup setup;
  setup.tp = tp != nullptr && tp->size() > 1 ? tp : nullptr;
  setup.chunk = chunk_tokens;
  setup.smoothing = label_smoothing;
  setup.ignore_index = ignore_index;
  // Replicated hidden feeds every rank's vocabulary columns: its gradient is summed over the group.
  const auto h = setup.tp != nullptr ? copy_to_tp_region(hidden, *setup.tp) : hidden;
  setup.need_grad = torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
  return LinearCrossEntropy::apply(h, weight, targets, &setup);
}

}  // namespace loom
