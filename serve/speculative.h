// Speculative decoding (Leviathan et al. 2023, Chen et al. 2023) for the engine (serve/engine.h): a drafter
// (serve/drafter.h) proposes up to k tokens for each running sequence, the target scores them all in ONE forward
// over the paged cache (k + 1 positions a sequence: its last token and the proposals), and each sequence keeps
// the proposals the rejection rule accepts plus one token of the target's:
//   sampled: proposal x_j (drawn from q_j) is accepted with probability min(1, p_j(x) / q_j(x)); at the first
//            rejection the token is drawn from norm(max(0, p_j - q_j)); when all are accepted a bonus token is
//            drawn from p_{k+1}. p and q are the target's and the draft's distributions after the SAME request
//            filters (temperature, top-k, top-p: sampling_probabilities), so the tokens follow the target's
//            distribution exactly; a deterministic drafter (n-gram) has a one-hot q.
//   greedy:  a proposal is accepted while it equals the target's argmax; the next token is the argmax.
// Every draw uses the sequence's own generator, so a request's tokens depend on its seed (and tokens) alone.
// The rejected proposals' keys and values are rolled back: the table's length shrinks and blocks past it return
// to the pool (truncate_table); the drafter trims its own cache the same way at its next proposal.
#pragma once
#include <vector>

#include "models/gpt.h"
#include "models/paged_kv_cache.h"
#include "serve/drafter.h"

namespace loom {

// What a sequence may draft this step: at most k, leaving the positions fed within the context (the last token
// and the proposals, from position tokens - 1) and the new tokens (proposals accepted + 1) within `remaining`.
int64_t speculative_room(int64_t k, int64_t context, int64_t tokens, int64_t remaining);

// The rejection rule on one sequence. logits (n + 1, V) float: the target's at its last token and at each of the
// draft's n tokens. The accepted proposals followed by the target's token (n + 1 at most).
std::vector<int64_t> verify_draft(const torch::Tensor& logits, const Draft& draft, const SamplingOptions& sampling,
                                  at::Generator& generator);

// One running sequence of a speculative step: the cache holds all but its last token and has room reserved for
// room + 1 more positions.
struct SpeculativeRow {
  int64_t id = 0;
  const std::vector<int64_t>* tokens = nullptr;
  BlockTable* table = nullptr;
  const SamplingOptions* sampling = nullptr;
  at::Generator* generator = nullptr;
  int64_t room = 0;       // speculative_room
  bool logprobs = false;  // give each new token's log-probability
};

struct SpeculativeOutcome {
  std::vector<int64_t> tokens;   // accepted proposals, then the target's token
  std::vector<double> logprobs;  // with SpeculativeRow::logprobs: under the target (unfiltered), one per token
  int64_t drafted = 0, accepted = 0;
};

// Drafts, verifies (one target forward per group of rows with as many proposals) and rolls each table back to
// hold all but the last of its new tokens; the outcomes in the order of rows. forwards counts target forwards.
std::vector<SpeculativeOutcome> speculative_step(Gpt& target, KVBlockPool& pool, Drafter& drafter,
                                                 const std::vector<SpeculativeRow>& rows, int64_t& forwards);

}  // namespace loom
