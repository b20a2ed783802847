// Tensor-parallel serving (`mpirun -np N loom serve RUN --set parallel.tp=N`): every rank holds its TP shard of the
// model and an Engine of its own over its share of the KV heads; rank 0 takes the HTTP traffic and runs the
// scheduler, and every step it broadcasts what changed the engine's state since the last one (the requests added,
// with their prompts and sampling, and the cancellations, in order), so the other ranks apply the same changes and
// run the same step: the same batch, positions, block tables and TP-split forwards (the engine broadcasts rank 0's
// logits before sampling, so every rank samples the same tokens). Rank 0's StepLeader wraps its Engine for the
// worker thread; the other ranks run run_step_follower until rank 0's finish(). The messages go over a StepChannel
// (serve/step_channel.h: MPI point-to-point, received without spinning): an idle server sends nothing, and its
// followers sleep between probes for the next step.
#pragma once
#include <vector>

#include "serve/engine.h"
#include "serve/step_channel.h"

namespace loom {

// What changed an engine's state before a step: requests added and cancelled, in the order they were.
struct EngineOp {
  bool cancel = false;
  GenerationRequest request;  // an add's
  int64_t id = -1;            // a cancel's
};

class StepLeader {
 public:
  // group: rank 0 of the TP ranks (this process) and the followers; null: a single process (no broadcasts).
  StepLeader(Engine& engine, StepChannel* group);
  // As Engine's; recorded for the followers.
  int64_t add(GenerationRequest request);
  bool cancel(int64_t id);
  // Sends the ops since the last step, then steps.
  std::vector<Completion> step();
  // Ends the followers' loops (once, after the last step).
  void finish();
  Engine& engine() { return engine_; }

 private:
  Engine& engine_;
  StepChannel* group_;
  std::vector<EngineOp> ops_;
  bool finished_ = false;
};

// A follower rank: receives each step's ops from rank 0 of `group`, applies them and steps its engine alike, until
// rank 0 finishes. An add that rank 0's engine refused is refused here too (the same checks).
void run_step_follower(Engine& engine, StepChannel& group);

// The wire form of a step's ops (JSON bytes) and back: exposed for the tests.
std::vector<uint8_t> encode_engine_ops(const std::vector<EngineOp>& ops, bool finish);
std::vector<EngineOp> decode_engine_ops(const std::vector<uint8_t>& bytes, bool& finish);

}  // namespace loom
