#include "models/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "models/few_rows_linear.h"

namespace loom {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double length_normalized(double log_prob, int64_t length, double penalty) {
  return log_prob / std::pow(static_cast<double>(length), penalty);
}

// log_probs: (N, V); rows whose sentence has reached its maximum length may only end: -inf but for eos.
torch::Tensor force_eos(torch::Tensor log_probs, const std::vector<bool>& at_limit, int64_t eos) {
  std::vector<int64_t> rows;
  for (size_t i = 0; i < at_limit.size(); ++i)
    if (at_limit[i]) rows.push_back(static_cast<int64_t>(i));
  if (rows.empty()) return log_probs;
  const auto index = torch::tensor(rows, torch::kLong).to(log_probs.device());
  auto forced = torch::full({static_cast<int64_t>(rows.size()), log_probs.size(1)},
                            -std::numeric_limits<float>::infinity(), log_probs.options());
  forced.index_put_({torch::indexing::Slice(), eos}, log_probs.index_select(0, index).select(1, eos));
  return log_probs.index_copy(0, index, forced);
}

}  // namespace

ModelStepDecoder::ModelStepDecoder(EncoderDecoder model, const torch::Tensor& source,
                                   const torch::Tensor& source_lengths, bool use_cache)
    : model_(std::move(model)), use_cache_(use_cache) {
  state_ = model_->start_decoding(source, source_lengths);
}

void ModelStepDecoder::select(const torch::Tensor& rows) { state_.select(rows.to(state_.memory.device())); }

torch::Tensor ModelStepDecoder::next_log_probs(const torch::Tensor& cpu_tokens) {
  const auto tokens = cpu_tokens.to(state_.memory.device());
  torch::Tensor logits;
  if (use_cache_) {
    const int64_t fed = state_.seen();
    logits = model_->decode_step(tokens.narrow(1, fed, tokens.size(1) - fed), state_);
  } else {
    logits = model_->decode(tokens, state_.memory, state_.source_padding);
  }
  return torch::log_softmax(logits.select(1, logits.size(1) - 1).to(torch::kFloat), -1);  // (N, V)
}

std::vector<Hypothesis> greedy_search(StepDecoder& decoder, const std::vector<int64_t>& max_lengths,
                                      const BeamOptions& o) {
  const int64_t B = static_cast<int64_t>(max_lengths.size());
  std::vector<Hypothesis> out(B);
  std::vector<bool> done(B, false);
  int64_t open = B;
  torch::Tensor tokens;
  for (int64_t t = 0; open > 0; ++t) {
    if (t == 0) tokens = torch::full({B, 1}, o.bos, torch::kLong);
    std::vector<bool> at_limit(B);
    for (int64_t b = 0; b < B; ++b) at_limit[b] = t >= max_lengths[b];
    const auto log_probs = force_eos(decoder.next_log_probs(tokens), at_limit, o.eos).cpu();
    const auto [best_tensor, next] = log_probs.max(-1);  // (B)
    const auto best = best_tensor.accessor<float, 1>();
    const auto chosen = next.accessor<int64_t, 1>();
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t token = chosen[b];
      out[b].log_prob += best[b];
      if (token == o.eos) {
        done[b] = true;
        --open;
        out[b].score = length_normalized(out[b].log_prob, t + 1, o.decode.length_penalty);
      } else {
        out[b].tokens.push_back(token);
      }
    }
    // Finished rows keep being fed (eos); their outputs are ignored.
    tokens = torch::cat({tokens, next.unsqueeze(1)}, 1);
  }
  return out;
}

std::vector<Hypothesis> beam_search(StepDecoder& decoder, const std::vector<int64_t>& max_lengths,
                                    const BeamOptions& o) {
  const int64_t B = static_cast<int64_t>(max_lengths.size()), k = o.decode.beam;
  LOOM_CHECK(k >= 1, "beam size must be >= 1");
  // Every sentence gets k rows; at the start only its first beam is live.
  decoder.select(torch::arange(B, torch::kLong).repeat_interleave(k));
  std::vector<double> scores(B * k, kNegInf);  // cumulative log-probability of each row
  for (int64_t b = 0; b < B; ++b) scores[b * k] = 0;
  std::vector<std::vector<Hypothesis>> finished(B);
  std::vector<bool> done(B, false);
  int64_t open = B;
  auto tokens = torch::full({B * k, 1}, o.bos, torch::kLong);  // (B k, t), on the CPU
  for (int64_t t = 0; open > 0; ++t) {
    std::vector<bool> at_limit(B * k);
    for (int64_t r = 0; r < B * k; ++r) at_limit[r] = t >= max_lengths[r / k];
    auto log_probs = force_eos(decoder.next_log_probs(tokens), at_limit, o.eos).cpu().to(torch::kDouble);
    const int64_t V = log_probs.size(1);
    // (B, k V): each row's score plus each next token's log-probability; the best 2k per sentence
    const auto candidates = (torch::tensor(scores, torch::kDouble).unsqueeze(1) + log_probs).view({B, k * V});
    const auto [top_scores_tensor, top_index_tensor] = candidates.topk(std::min(2 * k, k * V), -1);
    const auto top_scores = top_scores_tensor.accessor<double, 2>();
    const auto top_index = top_index_tensor.accessor<int64_t, 2>();
    const auto prefixes = tokens.accessor<int64_t, 2>();
    std::vector<int64_t> rows(B * k), next(B * k);
    std::vector<double> next_scores(B * k, kNegInf);
    for (int64_t b = 0; b < B; ++b) {
      int64_t kept = 0;
      if (!done[b]) {
        for (int64_t j = 0; j < top_scores.size(1) && kept < k; ++j) {
          const double score = top_scores[b][j];
          if (score == kNegInf) break;
          const int64_t index = top_index[b][j];
          const int64_t row = b * k + index / V, token = index % V;
          if (token == o.eos) {
            // An ending among the best k candidates is a finished hypothesis; a lower one is dropped.
            if (j >= k) continue;
            Hypothesis h;
            for (int64_t i = 1; i < tokens.size(1); ++i) h.tokens.push_back(prefixes[row][i]);
            h.log_prob = score;
            h.score = length_normalized(score, t + 1, o.decode.length_penalty);
            finished[b].push_back(std::move(h));
            continue;
          }
          rows[b * k + kept] = row;
          next[b * k + kept] = token;
          next_scores[b * k + kept] = score;
          ++kept;
        }
        if (static_cast<int64_t>(finished[b].size()) >= k || t >= max_lengths[b]) {
          done[b] = true;
          --open;
        }
      }
      for (; kept < k; ++kept) {  // dead rows: fed eos, never extended
        rows[b * k + kept] = b * k;
        next[b * k + kept] = o.eos;
      }
    }
    scores = next_scores;
    if (open == 0) break;
    const auto index = torch::tensor(rows, torch::kLong);
    decoder.select(index);
    tokens = torch::cat({tokens.index_select(0, index), torch::tensor(next, torch::kLong).unsqueeze(1)}, 1);
  }
  std::vector<Hypothesis> out(B);
  for (int64_t b = 0; b < B; ++b) {
    if (finished[b].empty()) continue;
    out[b] = *std::max_element(finished[b].begin(), finished[b].end(),
                               [](const Hypothesis& x, const Hypothesis& y) { return x.score < y.score; });
  }
  return out;
}

std::vector<Hypothesis> translate(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources,
                                  const BeamOptions& options) {
  InferenceScope inference;  // no gradients; the few-row kernel (models/few_rows_linear.h)
  model->eval();
  const auto device = model->parameters().front().device();
  std::vector<int64_t> rows;  // the non-empty sources
  int64_t longest = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].empty()) continue;
    rows.push_back(static_cast<int64_t>(i));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(sources[i].size()));
  }
  std::vector<Hypothesis> out(sources.size());
  if (rows.empty()) return out;
  const int64_t context = model->config().max_seq_len;
  LOOM_CHECK(longest <= context, "a source of ", longest, " tokens exceeds model.max_seq_len=", context);
  auto source = torch::zeros({static_cast<int64_t>(rows.size()), longest}, torch::kLong);
  std::vector<int64_t> lengths, max_lengths;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& s = sources[rows[r]];
    const int64_t n = static_cast<int64_t>(s.size());
    source[static_cast<int64_t>(r)].narrow(0, 0, n).copy_(torch::tensor(s, torch::kLong));
    lengths.push_back(n);
    max_lengths.push_back(translation_max_length(options.decode, n, context));
  }
  ModelStepDecoder decoder(model, source.to(device), torch::tensor(lengths, torch::kLong).to(device), options.use_cache);
  const auto found = options.decode.beam == 1 ? greedy_search(decoder, max_lengths, options)
                                       : beam_search(decoder, max_lengths, options);
  for (size_t r = 0; r < rows.size(); ++r) out[rows[r]] = found[r];
  return out;
}

int64_t translation_max_length(const DecodeConfig& decode, int64_t source_tokens, int64_t context) {
  const auto limit = static_cast<int64_t>(decode.max_len_a * static_cast<double>(source_tokens)) + decode.max_len_b;
  return std::max<int64_t>(0, std::min(limit, context - 1));
}

}  // namespace loom
