// Expert parallelism's token exchange (parallel.ep): an MoE layer's experts are split over the ep group (each
// rank keeps num_experts / ep of them, the stacked expert tensors' local rows), every rank routes its own
// tokens with the replicated router, and the (token, expert) slots travel to the rank owning their expert
// and back by two variable all-to-alls (the counts, blocking, then the rows, asynchronously:
// Communicator::all_to_all_async, whose MPI backend runs MPI_Alltoallv on the communicator's own thread, so the
// exchange proceeds while the caller computes the shared expert). Dropless: the counts differ per step and
// per layer.
// Used by MoeExperts (models/moe.h) when it has an ep group; the experts then run grouped on the rows
// received, as without ep.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "parallel/communicator.h"

namespace loom {

// Rows to the ranks of `group` (send_rows: how many to each, in rank order) and back in the autograd sense:
// forward is the all-to-all, backward the reverse one (the gradient of each received row goes back to the
// rank that sent it). Collective: every rank of the group calls it, forward and backward alike.
torch::Tensor all_to_all_rows(const torch::Tensor& rows, Communicator& group, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows);

// What a checkpointed MoE layer keeps from its first run so that the re-run in backward does no
// communication (models/recompute.h's stash; MoeImpl::routed): the counts each rank sent this one, the rows the
// dispatch received and the rows the combine brought back. kRecord: the first run fills it; kReplay: the re-run
// takes the exchanges' results from it (its backward still exchanges the gradients, once, as without
// checkpointing). Memory: the received and returned rows, 2 x routed slots x C per layer and micro-batch kept
// from forward to backward (Megatron's selective "moe_act" recompute makes the same trade).
struct DispatchReplay {
  enum class Mode { kRecord, kReplay } mode = Mode::kRecord;
  torch::Tensor received_counts;  // (ep, local experts) CPU int64
  torch::Tensor received;         // the dispatch's output
  torch::Tensor combined;         // the combine's output
};

// Work to do while the dispatch's rows (phase 0) and the combine's rows (phase 1) are in flight: the layer's
// shared expert (models/moe.h), so that the exchanges overlap its compute. In backward the exchanges' reverse
// runs overlap what forward computed between their start and finish (autograd runs those nodes in between).
using WhileExchanging = std::function<void(int phase)>;

// One MoE layer's dispatch under ep: rows (S, C) are this rank's slots sorted by (global) expert, with
// expert_counts (E) slots per expert (CPU int64). Every rank gets the slots of its local experts
// [rank * E / ep, (rank + 1) * E / ep) from every rank, `run` computes them (rows grouped by local expert,
// counts per local expert; called with no rows too, so the output stays on the graph) and the results come
// back in the order of `rows`: (S, C). The counts go first (blocking, one int64 per local expert and rank),
// then the rows, asynchronously: `overlap` (if any) runs while they are in flight. replay: see above.
using LocalExperts = std::function<torch::Tensor(const torch::Tensor& rows, const std::vector<int64_t>& counts)>;
torch::Tensor dispatch_to_experts(const torch::Tensor& rows, const torch::Tensor& expert_counts, Communicator& group,
                                  const LocalExperts& run, const WhileExchanging& overlap = {},
                                  DispatchReplay* replay = nullptr);

// Seconds this process has spent blocked on the MoE layers' all-to-alls (counts and rows, forward and backward),
// since it started: the counts' exchange and the time waited for the rows beyond what the overlapped compute
// hid, so this is expert parallelism's exposed communication (the trainer takes each step's difference:
// StepPhases::ep_wait_s).
double expert_all_to_all_wait_s();
// How many all-to-alls (counts and rows, forward and backward) this process has started in MoE layers: a
// checkpointed layer's re-run adds none (tests count them).
int64_t expert_all_to_all_count();

// Bytes one rank sends per MoE layer and micro-batch: each routed slot's row goes out and comes back, forward
// and backward (with ep ranks, (ep - 1) / ep of them leave the rank on uniform routing).
int64_t expert_all_to_all_bytes(int64_t tokens, int64_t top_k, int64_t d_model, int64_t element_size, int64_t ep);

}  // namespace loom
