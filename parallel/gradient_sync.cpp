#include "parallel/gradient_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

namespace loom {
namespace {

class ReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(GradientSync* sync, size_t bucket) : sync_(sync), bucket_(bucket) {}
  void operator()(const torch::autograd::Variable&) override { sync_->on_gradient_ready(bucket_); }

 private:
  GradientSync* sync_;
  size_t bucket_;
};

}  // namespace

GradientSync::GradientSync(const std::vector<torch::Tensor>& parameters, Communicator& dp_group, double bucket_mb)
    : dp_group_(dp_group) {
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  // Backward produces gradients roughly from the last layer to the first: bucket in that order.
  std::vector<std::vector<torch::Tensor>> groups(1);
  int64_t bytes = 0;
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    const auto& p = *it;
    if (!p.requires_grad()) continue;
    const bool dtype_change = !groups.back().empty() && groups.back().front().dtype() != p.dtype();
    if (!groups.back().empty() && (bytes >= bucket_bytes || dtype_change)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  for (auto& group : groups) {
    if (group.empty()) continue;
    int64_t numel = 0;
    for (const auto& p : group) numel += p.numel();
    Bucket bucket;
    bucket.flat = torch::zeros({numel}, group.front().options().requires_grad(false));
    int64_t offset = 0;
    for (auto& p : group) {
      p.mutable_grad() = bucket.flat.narrow(0, offset, p.numel()).view_as(p);
      offset += p.numel();
      if (dp_group_.size() > 1)
        torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<ReadyHook>(this, buckets_.size()));
    }
    bucket.parameters = std::move(group);
    buckets_.push_back(std::move(bucket));
  }
}

GradientSync::~GradientSync() {
  for (auto& bucket : buckets_)
    for (auto& p : bucket.parameters)
      if (dp_group_.size() > 1) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSync::zero_grad() {
  for (auto& bucket : buckets_) bucket.flat.zero_();
}

void GradientSync::prepare_last_backward() {
  armed_ = dp_group_.size() > 1;
  for (auto& bucket : buckets_) {
    bucket.ready = 0;
    bucket.work.reset();
  }
}

void GradientSync::on_gradient_ready(size_t index) {
  if (!armed_) return;
  auto& bucket = buckets_[index];
  if (++bucket.ready == bucket.parameters.size()) launch(bucket);
}

void GradientSync::launch(Bucket& bucket) { bucket.work = dp_group_.all_reduce_async(bucket.flat); }

void GradientSync::finish() {
  last_wait_s_ = 0;
  if (!armed_) return;
  armed_ = false;
  // A bucket with a parameter that got no gradient this step never completed: reduce it now.
  for (auto& bucket : buckets_)
    if (!bucket.work) launch(bucket);
  const auto start = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) bucket.work->wait();
  last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double scale = 1.0 / static_cast<double>(dp_group_.size());
  for (auto& bucket : buckets_) bucket.flat.mul_(scale);
}

}  // namespace loom
