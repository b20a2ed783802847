// ZeRO-3's parameter gathers (parallel.zero: 3): what ParameterUnits' calls do. Each unit is a few pieces,
// one per gradient bucket of the unit (parallel/gradient_sync.h builds them): the bucket's full flat
// parameter buffer, whose views the parameters are, and this rank's fp32 shard of it. Between uses the full
// buffer's storage is resized to 0 bytes; a gather resizes it back and all-gathers the shards into it. The
// storage object itself stays, so the parameters' views and what autograd saved of them for backward see the
// refilled values, and nothing keeps a freed unit's bytes alive. The ends unit (unit 0) is freed after the
// embeddings and after the head's backward when the model runs them so (run_embeddings, run_head: the
// GPT), and otherwise stays gathered from its first forward until free_all() at the end of the step; a
// block is freed after its forward (but the last block: backward starts with it) and after its backward,
// so besides the ends the block computing, the one prefetched and the last one kept are gathered, however
// a pipeline schedule interleaves micro-batches' forwards and backwards (a unit not prefetched is gathered
// when it is needed). Told what runs after the
// pass under way (set_next_pass: the next micro-batch's forward, a pipeline schedule's next action), it
// prefetches across the boundary too: the first block during the last block's forward when a forward
// follows, the last block during the first block's backward when a backward follows, and it keeps the first
// block after its backward when a forward follows. The ends go with them once the model has shown where
// it uses them: for the head during the last block's forward, for the next forward's embeddings with its
// first block, for the next backward's head with its last block. Without resharding
// (parallel.reshard_after_forward false) every unit stays gathered from its first forward to free_all().
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parameter_units.h"

namespace loom {

// What the caller runs after the forward or backward under way.
enum class NextPass { kNone, kForward, kBackward };

class UnitGathers : public ParameterUnits {
 public:
  UnitGathers(size_t units, bool reshard_after_forward);
  ~UnitGathers() override;
  UnitGathers(const UnitGathers&) = delete;
  UnitGathers& operator=(const UnitGathers&) = delete;

  // full: the flat parameter buffer (its storage is freed here); shard: this rank's fp32 part of it,
  // what the optimizer steps (converted to full's dtype, bf16 parameters, as it is sent); group: the ranks
  // whose shards make up full (the bucket's shard group).
  void add_piece(size_t unit, const torch::Tensor& full, const torch::Tensor& shard, Communicator& group);

  void before_forward(size_t unit) override;
  void after_forward(size_t unit) override;
  void before_backward(size_t unit) override;
  void before_head() override;
  void after_head_backward() override;
  // The unit's gradients are all reduced (launched) in this backward: a block unit is freed (resharding).
  void backward_done(size_t unit);
  // Called first thing in before_backward (GradientSync: the buckets of the units whose backward is over that
  // still wait are reduced before this unit's gathers start, in the same order on every rank).
  void on_backward_start(std::function<void(size_t unit)> call) { backward_starting_ = std::move(call); }
  // Waits for gathers under way and frees every unit: the end of a step, of an evaluation (next pass: none).
  void free_all();
  // Set before each forward and backward: what follows it (kNone: nothing this step, or unknown).
  void set_next_pass(NextPass next) { next_ = next; }

  size_t unit_count() const { return units_.size(); }
  bool gathered(size_t unit) const { return units_.at(unit).state == State::kGathered; }
  int64_t gathers() const { return gathers_; }  // all-gathers started so far (tests)
  double waited_s() const { return waited_s_; }  // seconds blocked on gathers so far: what prefetch did not hide

 private:
  enum class State { kFree, kGathering, kGathered };
  struct Piece {
    torch::Tensor full, shard;
    Communicator* group;
  };
  struct Unit {
    std::vector<Piece> pieces;
    State state = State::kFree;
    std::vector<torch::Tensor> sent;  // kGathering: the inputs in flight
    std::vector<std::shared_ptr<Work>> works;
  };
  void start_gather(size_t unit);
  void wait(size_t unit);  // starts the gather if nobody did
  void free(size_t unit);

  bool reshard_after_forward_;
  NextPass next_ = NextPass::kNone;
  std::function<void(size_t)> backward_starting_;
  // Learned from the model's calls (the first step's first forward gathers on demand): the stage's forward
  // starts with the ends (its embeddings), and ends with them (its head): where a prefetch of the ends goes.
  bool ends_lead_ = false, head_follows_ = false;
  std::vector<Unit> units_;
  int64_t gathers_ = 0;
  double waited_s_ = 0;
};

}  // namespace loom
