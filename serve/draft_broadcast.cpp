#include "serve/draft_broadcast.h"

#include "core/error.h"

namespace loom {

BroadcastDrafter::BroadcastDrafter(std::shared_ptr<Drafter> inner, Communicator& group, torch::Device device)
    : inner_(std::move(inner)), group_(group), device_(device) {
  LOOM_CHECK((group_.rank() == 0) == (inner_ != nullptr), "the draft model runs on rank 0 of the TP group only");
}

void BroadcastDrafter::release(int64_t id) {
  if (inner_) inner_->release(id);
}

std::vector<Draft> BroadcastDrafter::propose(const std::vector<DraftRow>& rows, int64_t k) {
  const bool root = inner_ != nullptr;
  std::vector<Draft> drafts = root ? inner_->propose(rows, k) : std::vector<Draft>(rows.size());
  LOOM_CHECK(drafts.size() == rows.size(), "the draft model drafted for ", drafts.size(), " of ", rows.size(),
             " rows");
  const auto longs = torch::TensorOptions().dtype(torch::kLong);
  const auto send = [&](torch::Tensor& t) {  // rank 0's t on every rank
    auto on = t.to(device_).contiguous();
    group_.broadcast(on, 0);
    t = on.cpu();
  };
  // The header: each row's proposal count, and the vocabulary of its q (0: none, a deterministic draft).
  const int64_t B = static_cast<int64_t>(rows.size());
  auto header = torch::zeros({2 * B}, longs);
  if (root)
    for (int64_t i = 0; i < B; ++i) {
      const auto& d = drafts[static_cast<size_t>(i)];
      header[2 * i] = static_cast<int64_t>(d.tokens.size());
      header[2 * i + 1] = d.q.defined() ? d.q.size(1) : 0;
    }
  send(header);
  const auto* h = header.data_ptr<int64_t>();
  int64_t tokens = 0, q_size = 0, sampled = 0;
  for (int64_t i = 0; i < B; ++i) {
    tokens += h[2 * i];
    q_size += h[2 * i] * h[2 * i + 1];
    sampled += rows[static_cast<size_t>(i)].sampling->temperature > 0;
  }
  // The proposals, the q of every row that has one, and the generator states of the sampled rows.
  auto flat_tokens = torch::zeros({tokens}, longs);
  auto flat_q = torch::zeros({q_size}, torch::kFloat);
  const int64_t state_bytes = sampled > 0 ? rows.front().generator->get_state().numel() : 0;
  auto states = torch::zeros({sampled * state_bytes}, torch::kByte);
  if (root) {
    std::vector<torch::Tensor> ts, qs, ss;
    for (size_t i = 0; i < rows.size(); ++i) {
      ts.push_back(torch::tensor(drafts[i].tokens, longs));
      if (drafts[i].q.defined()) qs.push_back(drafts[i].q.to(torch::kFloat).cpu().reshape({-1}));
      if (rows[i].sampling->temperature > 0) ss.push_back(rows[i].generator->get_state().reshape({-1}));
    }
    if (tokens > 0) flat_tokens = torch::cat(ts);
    if (q_size > 0) flat_q = torch::cat(qs);
    if (sampled > 0) states = torch::cat(ss);
    LOOM_CHECK(states.numel() == sampled * state_bytes, "generator states of different sizes");
  }
  if (tokens > 0) send(flat_tokens);
  if (q_size > 0) send(flat_q);
  if (sampled > 0) send(states);
  if (root) return drafts;
  int64_t token_at = 0, q_at = 0, state_at = 0;
  for (int64_t i = 0; i < B; ++i) {
    auto& d = drafts[static_cast<size_t>(i)];
    const int64_t n = h[2 * i], V = h[2 * i + 1];
    const auto* t = flat_tokens.data_ptr<int64_t>() + token_at;
    d.tokens.assign(t, t + n);
    token_at += n;
    if (V > 0) {
      d.q = flat_q.narrow(0, q_at, n * V).view({n, V}).clone();
      q_at += n * V;
    }
    const auto& row = rows[static_cast<size_t>(i)];
    if (row.sampling->temperature > 0) {
      row.generator->set_state(states.narrow(0, state_at, state_bytes).clone());
      state_at += state_bytes;
    }
  }
  return drafts;
}

}  // namespace loom
