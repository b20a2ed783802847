#include "serve/speculative.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "parallel/tensor_parallel.h"
#include "serve/draft_model.h"

namespace loom {

int64_t speculative_room(int64_t k, int64_t context, int64_t tokens, int64_t remaining) {
  // positions tokens - 1 .. tokens - 1 + n must be < context; n + 1 new tokens <= remaining
  return std::max<int64_t>(0, std::min({k, context - tokens, remaining - 1}));
}

std::vector<int64_t> verify_draft(const torch::Tensor& logits, const Draft& draft, const SamplingOptions& sampling,
                                  at::Generator& generator) {
  const int64_t n = static_cast<int64_t>(draft.tokens.size());
  LOOM_CHECK(logits.dim() == 2 && logits.size(0) == n + 1, "verify_draft needs the target's logits at ", n + 1,
             " positions");
  std::vector<int64_t> out;
  if (sampling.temperature <= 0) {
    const auto best = logits.argmax(1);
    for (int64_t j = 0; j <= n; ++j) {
      const int64_t token = best[j].item<int64_t>();
      out.push_back(token);
      if (j == n || token != draft.tokens[static_cast<size_t>(j)]) break;
    }
    return out;
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t x = draft.tokens[static_cast<size_t>(j)];
    const auto p = sampling_probabilities(logits[j], sampling);
    const double px = p[x].item<double>();
    const double qx = draft.q.defined() ? draft.q[j][x].item<double>() : 1.0;
    const double u = at::rand({1}, generator, torch::kDouble).item<double>();
    if (u * qx < px) {  // u < p / q: accepted
      out.push_back(x);
      continue;
    }
    torch::Tensor residual;
    if (draft.q.defined()) {
      residual = (p - draft.q[j]).clamp_min(0);
    } else {  // q one-hot at x: p without x
      residual = p.clone();
      residual[x] = 0.0;
    }
    if (residual.sum().item<double>() <= 0) residual = p;  // p == q: no mass left to correct (cannot reject then)
    out.push_back(torch::multinomial(residual, 1, false, generator).item<int64_t>());
    return out;
  }
  out.push_back(torch::multinomial(sampling_probabilities(logits[n], sampling), 1, false, generator).item<int64_t>());
  return out;
}

std::vector<SpeculativeOutcome> speculative_step(Gpt& target, KVBlockPool& pool, Drafter& drafter,
                                                 const std::vector<SpeculativeRow>& rows, int64_t& forwards) {
  std::vector<Draft> drafts(rows.size());
  {  // the drafter proposes for the rows with the same room together
    std::map<int64_t, std::vector<size_t>> by_room;
    for (size_t i = 0; i < rows.size(); ++i) by_room[rows[i].room].push_back(i);
    for (const auto& [room, members] : by_room) {
      if (room == 0) continue;
      std::vector<DraftRow> draft_rows;
      for (const size_t i : members)
        draft_rows.push_back({rows[i].id, rows[i].tokens, rows[i].sampling, rows[i].generator});
      auto proposed = drafter.propose(draft_rows, room);
      for (size_t m = 0; m < members.size(); ++m) {
        LOOM_CHECK(static_cast<int64_t>(proposed[m].tokens.size()) <= room, drafter.name(), " proposed too many");
        drafts[members[m]] = std::move(proposed[m]);
      }
    }
  }
  std::vector<SpeculativeOutcome> out(rows.size());
  std::map<size_t, std::vector<size_t>> by_length;  // rows by proposals: one target forward each
  for (size_t i = 0; i < rows.size(); ++i) by_length[drafts[i].tokens.size()].push_back(i);
  const auto device = pool.keys(0).device();
  for (const auto& [n, members] : by_length) {
    const int64_t T = static_cast<int64_t>(n) + 1;
    std::vector<BlockTable*> tables;
    std::vector<int64_t> feed;
    for (const size_t i : members) {
      tables.push_back(rows[i].table);
      feed.push_back(rows[i].tokens->back());
      feed.insert(feed.end(), drafts[i].tokens.begin(), drafts[i].tokens.end());
    }
    auto caches = paged_kv_caches(pool, tables, target->config().attention_window);
    const auto input = torch::tensor(feed, torch::kLong).view({static_cast<int64_t>(members.size()), T});
    auto logits = target->forward(input.to(device), &caches);  // (B, T, V), or this rank's (B, T, V_r) under TP
    if (auto* tp = target->tp_group(); tp != nullptr && tp->size() > 1) {
      // the whole vocabulary, then rank 0's on every rank: the same verdicts, tokens and schedule (as decoding's)
      logits = gather_from_tp_region(logits, *tp, target->config().vocab_size).contiguous();
      tp->broadcast(logits, 0);
    }
    logits = logits.to(torch::kFloat).cpu();
    ++forwards;
    for (size_t m = 0; m < members.size(); ++m) {
      const size_t i = members[m];
      const auto row_logits = logits[static_cast<int64_t>(m)];
      auto& outcome = out[i];
      outcome.tokens = verify_draft(row_logits, drafts[i], *rows[i].sampling, *rows[i].generator);
      outcome.drafted = static_cast<int64_t>(n);
      outcome.accepted = static_cast<int64_t>(outcome.tokens.size()) - 1;
      if (rows[i].logprobs)
        for (size_t j = 0; j < outcome.tokens.size(); ++j)
          outcome.logprobs.push_back(
              torch::log_softmax(row_logits[static_cast<int64_t>(j)], 0)[outcome.tokens[j]].item<double>());
      // The cache keeps the last token and the accepted proposals; the rejected ones' positions go.
      const int64_t before = rows[i].table->length - T;
      truncate_table(pool, *rows[i].table, before + outcome.accepted + 1);
    }
  }
  return out;
}

}  // namespace loom
