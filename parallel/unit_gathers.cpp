#include "parallel/unit_gathers.h"

#include <ATen/native/Resize.h>
#include <torch/csrc/autograd/custom_function.h>

#ifdef LOOM_CUDA
#include <ATen/native/cuda/Resize.h>
#endif

#include <chrono>

#include "core/error.h"

namespace loom {
namespace {

// The identity whose backward first gathers its unit (gather_before_backward).
class GatherBeforeBackward : public torch::autograd::Function<GatherBeforeBackward> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, ParameterUnits* units,
                               int64_t unit) {
    ctx->saved_data["units"] = reinterpret_cast<int64_t>(units);
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* units = reinterpret_cast<ParameterUnits*>(ctx->saved_data["units"].toInt());
    units->before_backward(static_cast<size_t>(ctx->saved_data["unit"].toInt()));
    return {grad_outputs[0], torch::Tensor(), torch::Tensor()};
  }
};

// The identity whose backward, once the head's own backward is done, lets its ends go (release_after_head_backward).
class ReleaseAfterHeadBackward : public torch::autograd::Function<ReleaseAfterHeadBackward> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, ParameterUnits* units) {
    ctx->saved_data["units"] = reinterpret_cast<int64_t>(units);
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    reinterpret_cast<ParameterUnits*>(ctx->saved_data["units"].toInt())->after_head_backward();
    return {grad_outputs[0], torch::Tensor()};
  }
};

// Resizes the storage under `tensor` to `bytes` (0: frees it), keeping the storage object and its views.
void resize_storage(const torch::Tensor& tensor, size_t bytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
#ifdef LOOM_CUDA
  if (tensor.is_cuda()) {
    at::native::resize_bytes_cuda(storage, bytes);
    return;
  }
#endif
  at::native::resize_bytes_cpu(storage, bytes);
}

// The bytes of `tensor`'s storage when it holds all of its elements.
size_t full_storage_bytes(const torch::Tensor& tensor) {
  return static_cast<size_t>(tensor.numel()) * tensor.element_size();
}

}  // namespace

torch::Tensor gather_before_backward(const torch::Tensor& x, ParameterUnits* units, size_t unit) {
  if (units == nullptr || !torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return GatherBeforeBackward::apply(x, units, static_cast<int64_t>(unit));
}

torch::Tensor release_after_head_backward(const torch::Tensor& x, ParameterUnits* units) {
  if (units == nullptr || !torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return ReleaseAfterHeadBackward::apply(x, units);
}

UnitGathers::UnitGathers(size_t units, bool reshard_after_forward)
    : reshard_after_forward_(reshard_after_forward), units_(units) {}

UnitGathers::~UnitGathers() {
  // A gather still under way writes into storage about to go: let it land (errors are the job's end anyway).
  for (auto& unit : units_) {
    for (auto& work : unit.works) {
      try {
        work->wait();
      } catch (const std::exception&) {
      }
    }
  }
}

void UnitGathers::add_piece(size_t unit, const torch::Tensor& full, const torch::Tensor& shard, Communicator& group) {
  LOOM_CHECK(unit < units_.size(), "UnitGathers: unit ", unit, " of ", units_.size());
  LOOM_CHECK(full.is_contiguous() && full.storage_offset() == 0 && full.storage().nbytes() == full_storage_bytes(full),
             "UnitGathers: a unit's buffer is a whole flat tensor");
  LOOM_CHECK(shard.numel() * group.size() == full.numel(), "UnitGathers: a shard is 1/n of its buffer over n ranks");
  units_[unit].pieces.push_back({full, shard, &group});
  resize_storage(full, 0);
}

void UnitGathers::start_gather(size_t index) {
  Unit& unit = units_[index];
  if (unit.state != State::kFree) return;
  torch::NoGradGuard no_grad;
  for (auto& piece : unit.pieces) {
    resize_storage(piece.full, full_storage_bytes(piece.full));
    // bf16 parameters send the master shard's rounding; fp32 ones the shard itself.
    auto sent = piece.shard.dtype() == piece.full.dtype() ? piece.shard.detach() : piece.shard.detach().to(piece.full.dtype());
    unit.works.push_back(piece.group->all_gather_async(sent, piece.full));
    unit.sent.push_back(std::move(sent));
  }
  unit.state = State::kGathering;
  ++gathers_;
}

void UnitGathers::wait(size_t index) {
  start_gather(index);
  Unit& unit = units_[index];
  if (unit.state != State::kGathering) return;
  const auto start = std::chrono::steady_clock::now();
  for (auto& work : unit.works) work->wait();
  waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unit.works.clear();
  unit.sent.clear();
  unit.state = State::kGathered;
}

void UnitGathers::free(size_t index) {
  Unit& unit = units_[index];
  if (unit.state == State::kFree) return;
  wait(index);  // never free what a gather is writing
  for (auto& piece : unit.pieces) resize_storage(piece.full, 0);
  unit.state = State::kFree;
}

void UnitGathers::before_forward(size_t unit) {
  wait(unit);
  if (unit == 0) ends_lead_ = true;
  if (unit + 1 < units_.size()) {
    start_gather(unit + 1);
    return;
  }
  if (head_follows_) start_gather(0);  // the head's, after this last block
  if (next_ == NextPass::kForward && unit > 1) {
    if (ends_lead_) start_gather(0);  // the next forward's embeddings
    start_gather(1);                  // and its first block (this last one stays: it is never freed after forward)
  }
}

void UnitGathers::after_forward(size_t unit) {
  // The ends' forward here is the embeddings' (run_embeddings): the head gathers them again. The last block
  // is the first backward needs: freeing it would only gather it again at once.
  if (reshard_after_forward_ && (unit == 0 || unit + 1 < units_.size())) free(unit);
}

void UnitGathers::before_head() {
  head_follows_ = true;
  wait(0);
}

void UnitGathers::after_head_backward() {
  if (reshard_after_forward_) free(0);
}

void UnitGathers::before_backward(size_t unit) {
  if (backward_starting_) backward_starting_(unit);
  wait(unit);
  if (unit == 0) {
    if (units_.size() > 1) start_gather(units_.size() - 1);  // the head's backward: the last block is next
  } else if (unit > 1) {
    start_gather(unit - 1);  // blocks run backward last to first
  } else if (next_ == NextPass::kBackward) {
    start_gather(units_.size() - 1);  // the next backward's last block
    if (head_follows_) start_gather(0);  // and its head
  } else if (next_ == NextPass::kForward && ends_lead_) {
    start_gather(0);  // the next forward's embeddings (its first block, this one, stays)
  }
}

void UnitGathers::backward_done(size_t unit) {
  // Without resharding a block stays gathered over the step: another micro-batch's forward or backward (a
  // pipeline schedule interleaves them) uses it again. The first block stays for a forward that follows.
  if (unit > 0 && reshard_after_forward_ && !(unit == 1 && next_ == NextPass::kForward)) free(unit);
}

void UnitGathers::free_all() {
  for (size_t u = 0; u < units_.size(); ++u) free(u);
  next_ = NextPass::kNone;
}

}  // namespace loom
