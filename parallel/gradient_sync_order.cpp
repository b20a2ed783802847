// The gradient sync's ordered groups (GradientSync, parallel/gradient_sync.h): a shard group that holds sparse
// buckets (parameters a rank may skip, e.g. an ep rank's experts that got no rows) starts its buckets in one
// order on every rank, the backward order, and reduces what got no gradient as zeros, so that its collectives
// stay in step across the group.
#include <algorithm>

#include "parallel/gradient_sync.h"

namespace loom {

// Backward order: bucket order, by unit last to first under zero 3.
void GradientSync::order_sparse_buckets(const std::vector<bool>& sparse_buckets, bool by_unit) {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!sparse_buckets[i] || buckets_[i].deferred || buckets_[i].ordered >= 0) continue;
    OrderedGroup group;
    group.group = buckets_[i].shard_group;
    for (size_t j = 0; j < buckets_.size(); ++j)
      if (buckets_[j].shard_group == group.group && !buckets_[j].deferred) group.buckets.push_back(j);
    std::stable_sort(group.buckets.begin(), group.buckets.end(), [this, by_unit](size_t a, size_t b) {
      return by_unit && buckets_[a].unit > buckets_[b].unit;
    });
    for (size_t j : group.buckets) buckets_[j].ordered = static_cast<int>(ordered_.size());
    ordered_.push_back(std::move(group));
  }
  if (gathers_ && !ordered_.empty())
    gathers_->on_backward_start([this](size_t unit) {
      // The blocks after this one (their backward is over): their buckets go before this unit's gathers.
      if (unit == 0) return;  // the head's backward: no block's is over
      for (auto& group : ordered_) flush(group, static_cast<int64_t>(unit));
    });
}

void GradientSync::end_backward() {
  if (!shard_gradients_) return;  // zero 0, 1: finish() reduces what did not complete, in order
  for (auto& group : ordered_) flush(group);
}

void GradientSync::flush(OrderedGroup& group, int64_t before_unit) {
  while (group.next < group.buckets.size()) {
    const size_t index = group.buckets[group.next];
    if (before_unit >= 0 && static_cast<int64_t>(buckets_[index].unit) <= before_unit) return;
    ++group.next;
    // zero 2, 3: nothing arrived: zeros; otherwise what did (the rest of the buffer is zero).
    if (shard_gradients_ && !buckets_[index].flat_grad.defined()) on_gradient_arriving(index);
    start(index);
  }
  if (before_unit >= 0) return;
  group.next = 0;
  for (size_t index : group.buckets) buckets_[index].complete = false;
}

void GradientSync::bucket_complete(size_t index) {
  auto& bucket = buckets_[index];
  if (bucket.ordered < 0) {
    start(index);
    return;
  }
  // Its turn comes when every bucket before it in its group has started.
  bucket.complete = true;
  auto& group = ordered_[static_cast<size_t>(bucket.ordered)];
  while (group.next < group.buckets.size() && buckets_[group.buckets[group.next]].complete) {
    const size_t next = group.buckets[group.next++];
    buckets_[next].complete = false;
    start(next);
  }
}

void GradientSync::start(size_t index) {
  if (shard_gradients_) {
    launch_reduction(index);
  } else {
    launch(buckets_[index]);
  }
}

}  // namespace loom
