// A draft model under tensor-parallel serving (`mpirun -np N loom serve RUN --draft DRAFT --set parallel.tp=N`):
// the draft runs whole on rank 0 only, and each speculative step rank 0 sends what it proposed to the other ranks
// of the target's TP group, so the TP-split target verifies the same tokens on every rank. A BroadcastDrafter
// wraps rank 0's drafter (serve/draft_model.h) and stands in for it on the others. Every rank calls propose() at
// the same point of the same step (the engines are replicated: serve/step_broadcast.h), where rank 0 proposes and
// broadcasts, per row, the proposals, the draft's distributions q (sampled rows) and the row's generator state
// after the draft's draws; the other ranks take all three, so the rejection rule then draws the same numbers on
// every rank. Rank 0 only rather than the draft on every rank: replicated drafts would have to agree bit for bit
// on every rank for the ranks' schedules to stay together, and a broadcast makes that hold by construction for
// one small message a step (the followers would only wait for rank 0's draft anyway).
#pragma once
#include <memory>

#include "parallel/communicator.h"
#include "serve/drafter.h"

namespace loom {

class BroadcastDrafter final : public Drafter {
 public:
  // group: the target's TP group; inner: the drafter on its rank 0, null on the others. device: where the
  // group's collectives take tensors (the target's).
  BroadcastDrafter(std::shared_ptr<Drafter> inner, Communicator& group, torch::Device device);
  std::vector<Draft> propose(const std::vector<DraftRow>& rows, int64_t k) override;
  void release(int64_t id) override;
  const char* name() const override { return "draft model"; }

 private:
  std::shared_ptr<Drafter> inner_;
  Communicator& group_;
  torch::Device device_;
};

}  // namespace loom
