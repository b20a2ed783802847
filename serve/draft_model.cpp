#include "serve/draft_model.h"

#include <algorithm>

#include "core/error.h"
#include "models/few_rows_linear.h"

namespace loom {

void truncate_table(KVBlockPool& pool, BlockTable& table, int64_t length) {
  LOOM_CHECK(length >= 0 && length <= table.length, "cannot truncate a table of ", table.length, " positions to ",
             length);
  const auto keep = static_cast<size_t>(pool.blocks_for(length));
  if (keep < table.blocks.size()) {
    BlockTable tail;  // release() gives back a table's blocks, counting their references
    tail.blocks.assign(table.blocks.begin() + static_cast<std::ptrdiff_t>(keep), table.blocks.end());
    table.blocks.resize(keep);
    pool.release(tail);
  }
  table.length = length;
}

DraftModelDrafter::DraftModelDrafter(Gpt draft, int64_t blocks, int64_t block_size) : model_(std::move(draft)) {
  model_->eval();
  const auto& config = model_->config();
  pool_ = std::make_unique<KVBlockPool>(model_->n_blocks(), blocks, block_size, config.kv_heads(), config.head_dim(),
                                        model_->parameters().front().options());
}

void DraftModelDrafter::check_compatible(const ModelConfig& draft, const ModelConfig& target,
                                         const std::string& draft_name, const std::string& target_name) {
  if (draft.vocab_size != target.vocab_size)
    throw Error("the draft model " + draft_name + " has model.vocab_size=" + std::to_string(draft.vocab_size) +
                " but the target " + target_name + " has " + std::to_string(target.vocab_size) +
                ": a draft must share the target's tokenizer and vocabulary");
  if (draft.max_seq_len < target.max_seq_len)
    throw Error("the draft model " + draft_name + " has model.max_seq_len=" + std::to_string(draft.max_seq_len) +
                ", shorter than the target " + target_name + "'s " + std::to_string(target.max_seq_len) +
                ": it could not propose over the target's whole context");
}

void DraftModelDrafter::release(int64_t id) {
  const auto it = states_.find(id);
  if (it == states_.end()) return;
  pool_->release(it->second.table);
  states_.erase(it);
}

std::vector<Draft> DraftModelDrafter::propose(const std::vector<DraftRow>& rows, int64_t k) {
  InferenceScope inference;  // no gradients; the few-row kernel (models/few_rows_linear.h)
  std::vector<Draft> out(rows.size());
  if (k <= 0) return out;
  const auto device = pool_->keys(0).device();
  const int64_t window = model_->config().attention_window;
  // Trim each cache to what still agrees with the tokens (but the last token, fed now), reserve its new positions.
  std::vector<size_t> live;
  std::map<int64_t, std::vector<size_t>> by_new;  // rows by how many tokens they feed first
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& tokens = *rows[i].tokens;
    auto& state = states_[rows[i].id];
    const auto mismatch = std::mismatch(state.fed.begin(), state.fed.end(), tokens.begin(), tokens.end());
    const int64_t common = std::min<int64_t>(mismatch.first - state.fed.begin(),
                                             static_cast<int64_t>(tokens.size()) - 1);
    truncate_table(*pool_, state.table, common);
    state.fed.resize(static_cast<size_t>(common));
    const int64_t size = static_cast<int64_t>(tokens.size());
    if (!pool_->reserve(state.table, size + k - 1)) {
      release(rows[i].id);
      continue;
    }
    live.push_back(i);
    by_new[size - common].push_back(i);
  }
  std::vector<std::vector<torch::Tensor>> qs(rows.size());
  const auto draw = [&](size_t i, const torch::Tensor& logits) {  // logits (V) float on the CPU
    const auto& sampling = *rows[i].sampling;
    int64_t token;
    if (sampling.temperature <= 0) {
      token = logits.argmax().item<int64_t>();
    } else {
      auto q = sampling_probabilities(logits, sampling);
      token = torch::multinomial(q, 1, false, *rows[i].generator).item<int64_t>();
      qs[i].push_back(q);
    }
    out[i].tokens.push_back(token);
  };
  // The unseen tokens, up to the sequence's last: the first proposal.
  for (const auto& [count, members] : by_new) {
    std::vector<BlockTable*> tables;
    std::vector<int64_t> feed;
    for (const size_t i : members) {
      auto& state = states_.at(rows[i].id);
      const auto& tokens = *rows[i].tokens;
      tables.push_back(&state.table);
      feed.insert(feed.end(), tokens.end() - count, tokens.end());
      state.fed.insert(state.fed.end(), tokens.end() - count, tokens.end());
    }
    auto caches = paged_kv_caches(*pool_, tables, window);
    const auto input = torch::tensor(feed, torch::kLong).view({static_cast<int64_t>(members.size()), count});
    const auto logits = model_->forward(input.to(device), &caches).select(1, -1).to(torch::kFloat).cpu();
    for (size_t m = 0; m < members.size(); ++m) draw(members[m], logits[static_cast<int64_t>(m)]);
  }
  // The further proposals, one position a forward over all rows.
  for (int64_t j = 1; j < k && !live.empty(); ++j) {
    std::vector<BlockTable*> tables;
    std::vector<int64_t> feed;
    for (const size_t i : live) {
      auto& state = states_.at(rows[i].id);
      tables.push_back(&state.table);
      feed.push_back(out[i].tokens.back());
      state.fed.push_back(out[i].tokens.back());
    }
    auto caches = paged_kv_caches(*pool_, tables, window);
    const auto input = torch::tensor(feed, torch::kLong).unsqueeze(1);
    const auto logits = model_->forward(input.to(device), &caches).select(1, -1).to(torch::kFloat).cpu();
    for (size_t m = 0; m < live.size(); ++m) draw(live[m], logits[static_cast<int64_t>(m)]);
  }
  for (const size_t i : live)
    if (!qs[i].empty()) out[i].q = torch::stack(qs[i]);
  return out;
}

}  // namespace loom
