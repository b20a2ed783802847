#include "parallel/gradient_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

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

GradientSync::GradientSync(std::vector<ShardedParameters> parameters, const ShardingOptions& options)
    : strategy_(sharding_strategy(options.zero)),
      sharded_(strategy_.shards_optimizer_state()),
      shard_gradients_(strategy_.shards_gradients()),
      master_(options.param_dtype != torch::kFloat),
      param_dtype_(options.param_dtype),
      group_count_(parameters.empty() ? 0 : parameters.front().groups.size()) {
  TORCH_CHECK(param_dtype_ == torch::kFloat || param_dtype_ == torch::kBFloat16,
              "GradientSync: parameters are fp32 or bf16");
  const bool by_unit = strategy_.shards_parameters();
  TORCH_CHECK(by_unit == !options.units.empty(), "GradientSync: parameter units are for ZeRO-3, and it needs them");
  for (auto& entry : parameters) {
    TORCH_CHECK(entry.shard_group != nullptr, "GradientSync: every parameter entry needs its shard group");
    TORCH_CHECK(entry.groups.size() == group_count_, "GradientSync: every entry has the same optimizer groups");
    if (entry.replica_group != nullptr && entry.replica_group->size() == 1) entry.replica_group = nullptr;
    TORCH_CHECK(entry.replica_group == nullptr || sharded_, "GradientSync: replicas of the shards need ZeRO-1, 2 or 3");
  }
  if (by_unit) {
    gathers_ = std::make_unique<UnitGathers>(options.units.size(), options.reshard_after_forward);
    unit_buckets_.assign(options.units.size(), 0);
    unit_reduced_.assign(options.units.size(), 0);
  }
  std::vector<bool> sparse_buckets;
  for (auto& contents : strategy_.buckets(parameters, options)) {
    if (contents.parameters.empty()) continue;
    sparse_buckets.push_back(parameters[contents.entry].sparse);
    const ShardedParameters& entry = parameters[contents.entry];
    const int64_t ranks = entry.shard_group->size();
    int64_t numel = 0;
    for (const auto& p : contents.parameters) numel += p.numel();
    if (sharded_) numel = (numel + ranks - 1) / ranks * ranks;  // equal shards; the padding stays zero
    Bucket bucket;
    bucket.group = contents.group;
    bucket.unit = contents.unit;
    bucket.shard_group = entry.shard_group;
    bucket.replica_group = entry.replica_group;
    bucket.averaged_over = entry.averaged_over;
    bucket.deferred = shard_gradients_ && contents.deferred;
    bucket.numel = numel;
    const auto tensor_options = contents.parameters.front().options().requires_grad(false);
    bucket.grad_options = tensor_options;
    TORCH_CHECK(!master_ || tensor_options.dtype() == torch::kFloat, "GradientSync: bf16 parameters start from fp32 ones");
    // fp32 with bf16 parameters too; zero 2 allocates it when backward reaches the bucket.
    if (!shard_gradients_) bucket.flat_grad = torch::zeros({numel}, tensor_options);
    if (sharded_ || master_)
      bucket.flat_param = torch::zeros({numel}, master_ ? tensor_options.dtype(param_dtype_) : tensor_options);
    const size_t index = buckets_.size();
    bucket.parameters = std::move(contents.parameters);
    bucket.hooked = ranks > 1 || shard_gradients_;
    for (auto& p : bucket.parameters) {
      if (shard_gradients_)
        bucket.pre_hooks.push_back(p.register_hook([this, index](const at::TensorBase&) { on_gradient_arriving(index); }));
      if (bucket.hooked) torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<ReadyHook>(this, index));
    }
    if (bucket.flat_grad.defined()) point_gradients_at(bucket, bucket.flat_grad);
    if (sharded_) {
      const int64_t size = numel / ranks;
      // zero 3: a tensor of its own, which stays while the full buffer's storage comes and goes.
      bucket.shard = master_ || by_unit ? torch::zeros({size}, tensor_options)
                                        : bucket.flat_param.narrow(0, entry.shard_group->rank() * size, size);
      bucket.shard.mutable_grad() = torch::zeros({size}, tensor_options);
    }
    if (by_unit) ++unit_buckets_[bucket.unit];
    buckets_.push_back(std::move(bucket));
  }
  order_sparse_buckets(sparse_buckets, by_unit);
  flatten_parameters();
  if (gathers_)
    for (auto& bucket : buckets_) gathers_->add_piece(bucket.unit, bucket.flat_param, bucket.shard, *bucket.shard_group);
}

void GradientSync::flatten_parameters() {
  if (!sharded_ && !master_) return;
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    // The parameters' fp32 values end to end: with bf16 parameters the master's start.
    auto values = master_ ? torch::zeros({bucket.numel}, bucket.grad_options) : bucket.flat_param;
    int64_t offset = 0;
    for (auto& p : bucket.parameters) {
      values.narrow(0, offset, p.numel()).view_as(p).copy_(p);
      offset += p.numel();
    }
    if (gathers_ && !master_)
      bucket.shard.copy_(values.narrow(0, bucket.shard_group->rank() * bucket.shard.numel(), bucket.shard.numel()));
    if (master_) {
      bucket.flat_param.copy_(values);  // rounded to bf16
      if (sharded_) {
        bucket.shard.copy_(values.narrow(0, bucket.shard_group->rank() * bucket.shard.numel(), bucket.shard.numel()));
      } else {
        bucket.flat_master = values;
        offset = 0;
        for (auto& p : bucket.parameters) {
          // The master's gradient is the parameter's: the same fp32 view of the bucket.
          auto master = values.narrow(0, offset, p.numel()).view_as(p);
          master.mutable_grad() = p.grad();
          bucket.masters.push_back(master);
          offset += p.numel();
        }
      }
    }
    point_parameters_at(bucket, bucket.flat_param);
  }
}

void GradientSync::point_parameters_at(const Bucket& bucket, const torch::Tensor& flat) {
  int64_t offset = 0;
  for (const auto& p : bucket.parameters) {
    // set_data keeps the parameter's identity (its .grad view, hooks, the optimizer's and checkpoints'
    // references) and gives it this storage and dtype.
    p.set_data(flat.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
}

void GradientSync::point_gradients_at(Bucket& bucket, const torch::Tensor& flat) {
  int64_t offset = 0;
  for (auto& p : bucket.parameters) {
    p.mutable_grad() = flat.defined() ? flat.narrow(0, offset, p.numel()).view_as(p) : torch::Tensor();
    offset += p.numel();
  }
}

GradientSync::~GradientSync() {
  for (auto& bucket : buckets_) {
    for (size_t i = 0; i < bucket.pre_hooks.size(); ++i) bucket.parameters[i].remove_hook(bucket.pre_hooks[i]);
    if (bucket.hooked)
      for (auto& p : bucket.parameters) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  }
}

double GradientSync::step_wait_s() const {
  return step_wait_s_ + (gathers_ ? gathers_->waited_s() - gathers_waited_at_zero_grad_ : 0.0);
}

void GradientSync::zero_grad() {
  step_wait_s_ = 0;
  if (gathers_) gathers_waited_at_zero_grad_ = gathers_->waited_s();
  for (auto& bucket : buckets_) {
    if (!shard_gradients_) {
      bucket.flat_grad.zero_();
      continue;
    }
    // zero 2: what this step accumulates into; a bucket's buffer comes with its first gradient.
    bucket.shard.mutable_grad().zero_();
    bucket.flat_grad = torch::Tensor();
    point_gradients_at(bucket, bucket.flat_grad);
    bucket.ready = 0;
    bucket.complete = false;
  }
  for (auto& group : ordered_) group.next = 0;
}

void GradientSync::prepare_last_backward() {
  // A group of one has nothing to reduce; with ZeRO-1 the reduce-scatter still fills the shard's gradient.
  armed_ = sharded_ || std::any_of(buckets_.begin(), buckets_.end(),
                                   [](const Bucket& bucket) { return bucket.shard_group->size() > 1; });
  for (auto& bucket : buckets_) {
    if (shard_gradients_ && !bucket.deferred) continue;  // reduced in every backward, counted throughout
    bucket.ready = 0;
    bucket.work.reset();
    bucket.complete = false;
  }
  for (auto& group : ordered_) group.next = 0;
}

void GradientSync::on_gradient_arriving(size_t index) {
  auto& bucket = buckets_[index];
  if (bucket.flat_grad.defined()) return;
  bucket.flat_grad = torch::zeros({bucket.numel}, bucket.grad_options);
  point_gradients_at(bucket, bucket.flat_grad);
}

void GradientSync::on_gradient_ready(size_t index) {
  auto& bucket = buckets_[index];
  if (shard_gradients_ && !bucket.deferred) {
    // Counted over micro-batches: a parameter without a gradient in one of them leaves its bucket to fill
    // in the next (a later arrival then starts a new buffer) or to be reduced by finish().
    if (++bucket.ready == bucket.parameters.size()) bucket_complete(index);
    return;
  }
  if (!armed_) return;
  if (++bucket.ready == bucket.parameters.size()) bucket_complete(index);
}

void GradientSync::launch(Bucket& bucket) {
  bucket.work = sharded_ ? bucket.shard_group->reduce_scatter_async(bucket.flat_grad, bucket.shard.mutable_grad())
                         : bucket.shard_group->all_reduce_async(bucket.flat_grad);
}

void GradientSync::launch_reduction(size_t index) {
  auto& bucket = buckets_[index];
  Reduction reduction;
  reduction.bucket = index;
  reduction.completes_step = armed_;
  reduction.input = bucket.flat_grad;
  reduction.output = torch::empty({bucket.shard.numel()}, bucket.grad_options);
  reduction.work = bucket.shard_group->reduce_scatter_async(reduction.input, reduction.output);
  // The parameters let go of the buffer: a later gradient of theirs starts a new one.
  bucket.flat_grad = torch::Tensor();
  point_gradients_at(bucket, bucket.flat_grad);
  bucket.ready = 0;
  reductions_.push_back(std::move(reduction));
  while (reductions_.size() > kReductionsInFlight) finish_oldest_reduction();
  // zero 3: the unit's gradients are all on their way: its parameters are not needed again this backward.
  if (gathers_ && ++unit_reduced_[bucket.unit] == unit_buckets_[bucket.unit]) {
    unit_reduced_[bucket.unit] = 0;
    gathers_->backward_done(bucket.unit);
  }
}

void GradientSync::finish_oldest_reduction() {
  Reduction& oldest = reductions_.front();
  const auto start = std::chrono::steady_clock::now();
  oldest.work->wait();
  step_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto& bucket = buckets_[oldest.bucket];
  LOOM_CHECK(!bucket.replica_work, "gradient sync: a bucket was reduced again after its replicas' all-reduce began");
  bucket.shard.mutable_grad().add_(oldest.output);
  if (oldest.completes_step) start_replica_reduction(bucket);
  reductions_.pop_front();  // frees the bucket's gradients
}

void GradientSync::finish() {
  last_wait_s_ = 0;
  if (shard_gradients_) {
    // Buckets still holding gradients: a deferred one, or one with a parameter that got none this step.
    for (size_t i = 0; i < buckets_.size(); ++i)
      if (buckets_[i].flat_grad.defined()) launch_reduction(i);
    armed_ = false;
    const double waited_before = step_wait_s_;
    while (!reductions_.empty()) finish_oldest_reduction();  // counts into step_wait_s_
    step_wait_s_ += finish_replica_reductions();
    last_wait_s_ = step_wait_s_ - waited_before;
    for (auto& bucket : buckets_) {
      bucket.ready = 0;
      if (ranks_averaged(bucket) > 1) bucket.shard.mutable_grad().mul_(1.0 / ranks_averaged(bucket));
    }
    free_parameters();
    return;
  }
  if (!armed_) return;
  armed_ = false;
  // A bucket with a parameter that got no gradient this step never completed: reduce it now (its zeros
  // where nothing arrived); an ordered group's in its order.
  for (auto& group : ordered_) flush(group);
  for (auto& bucket : buckets_)
    if (!bucket.work) launch(bucket);
  const auto start = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) {
    bucket.work->wait();
    if (sharded_) start_replica_reduction(bucket);  // while the later buckets' reduce-scatters finish
  }
  last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_wait_s_ += finish_replica_reductions();
  step_wait_s_ += last_wait_s_;
  for (auto& bucket : buckets_)
    if (ranks_averaged(bucket) > 1) (sharded_ ? bucket.shard.mutable_grad() : bucket.flat_grad).mul_(1.0 / ranks_averaged(bucket));
}

void GradientSync::start_replica_reduction(Bucket& bucket) {
  if (bucket.replica_group == nullptr || bucket.replica_work) return;
  bucket.replica_work = bucket.replica_group->all_reduce_async(bucket.shard.mutable_grad());
}

double GradientSync::finish_replica_reductions() {
  // A bucket whose last reduction came before the last backward (its parameters got no gradient there) or
  // outside it (pipeline stages arm the sync after their backwards) starts now.
  for (auto& bucket : buckets_) start_replica_reduction(bucket);
  const auto start = std::chrono::steady_clock::now();
  for (auto& bucket : buckets_) {
    if (!bucket.replica_work) continue;  // no replicas
    bucket.replica_work->wait();
    bucket.replica_work.reset();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double GradientSync::ranks_averaged(const Bucket& bucket) {
  if (bucket.averaged_over > 0) return static_cast<double>(bucket.averaged_over);
  return static_cast<double>(bucket.shard_group->size()) *
         (bucket.replica_group != nullptr ? bucket.replica_group->size() : 1);
}

std::vector<std::vector<torch::Tensor>> GradientSync::optimizer_groups() const {
  std::vector<std::vector<torch::Tensor>> groups(group_count_);
  for (const auto& bucket : buckets_) {
    if (sharded_) {
      groups[bucket.group].push_back(bucket.shard);
    } else if (master_) {
      groups[bucket.group].insert(groups[bucket.group].end(), bucket.masters.begin(), bucket.masters.end());
    } else {
      groups[bucket.group].insert(groups[bucket.group].end(), bucket.parameters.begin(), bucket.parameters.end());
    }
  }
  return groups;
}

std::vector<torch::Tensor> GradientSync::optimizer_parameters() const {
  std::vector<torch::Tensor> all;
  for (const auto& group : optimizer_groups()) all.insert(all.end(), group.begin(), group.end());
  return all;
}

std::vector<std::vector<ParameterSlice>> GradientSync::optimizer_slices() const {
  std::vector<std::vector<std::vector<ParameterSlice>>> per_group(group_count_);
  for (const auto& bucket : buckets_) {
    auto& group = per_group[bucket.group];
    if (!sharded_) {
      for (const auto& p : bucket.parameters) group.push_back({{p, 0, 0, p.numel()}});
      continue;
    }
    // The shard is [begin, end) of the bucket's flat buffer, where the parameters lie end to end.
    const int64_t begin = bucket.shard_group->rank() * bucket.shard.numel(), end = begin + bucket.shard.numel();
    std::vector<ParameterSlice> slices;
    int64_t offset = 0;
    for (const auto& p : bucket.parameters) {
      const int64_t first = std::max(begin, offset), last = std::min(end, offset + p.numel());
      if (first < last) slices.push_back({p, first - offset, first - begin, last - first});
      offset += p.numel();
    }
    group.push_back(std::move(slices));
  }
  std::vector<std::vector<ParameterSlice>> all;  // in optimizer_parameters() order: group by group
  for (auto& group : per_group) all.insert(all.end(), group.begin(), group.end());
  return all;
}

void GradientSync::free_parameters() {
  if (!gathers_) return;
  gathers_->free_all();
  std::fill(unit_reduced_.begin(), unit_reduced_.end(), 0);
}

void GradientSync::gather_parameters() {
  if (gathers_) return;  // zero 3: each unit's next forward gathers its updated shards
  torch::NoGradGuard no_grad;
  if (master_ && !sharded_)
    for (auto& bucket : buckets_) bucket.flat_param.copy_(bucket.flat_master);
  if (!sharded_) return;
  // The gather writes over the shard's own storage, so it sends a copy (bf16 parameters: the master's
  // rounding). At most kReductionsInFlight gathers are under way: the copies alive are a few buckets' shards,
  // not a whole shard of the model (measured at dp 2 x pp 2, ZeRO-1: all at once were the step's peak, +9.5 MiB).
  std::deque<std::pair<torch::Tensor, std::shared_ptr<Work>>> pending;
  double waited_s = 0;
  auto wait_oldest = [&] {
    const auto start = std::chrono::steady_clock::now();
    pending.front().second->wait();
    waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    pending.pop_front();
  };
  for (auto& bucket : buckets_) {
    if (pending.size() == kReductionsInFlight) wait_oldest();
    auto mine = master_ ? bucket.shard.detach().to(param_dtype_) : bucket.shard.detach().clone();
    pending.emplace_back(mine, bucket.shard_group->all_gather_async(mine, bucket.flat_param));
  }
  while (!pending.empty()) wait_oldest();
  step_wait_s_ += waited_s;
}

}  // namespace loom
