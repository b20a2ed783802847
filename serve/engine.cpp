#include "serve/engine.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "models/few_rows_linear.h"
#include "parallel/tensor_parallel.h"
#include "serve/drafter.h"
#include "serve/speculative.h"

namespace loom {

struct Engine::Sequence {
  GenerationRequest request;
  // prompt (encoder-decoder: the decoder's start token) + generated; running: the cache holds all but the last
  std::vector<int64_t> tokens;
  std::shared_ptr<const EncodedSource> source;  // encoder-decoder: set at its first admission, kept till it ends
  int64_t generated = 0;
  BlockTable table;
  at::Generator generator;
  int64_t preemptions = 0;
  std::optional<std::string> text;  // ended by a stop string: the text before it
  std::vector<double> logprobs;     // of the generated tokens (GenerationRequest::logprobs)
  int64_t streamed_tokens = 0;      // generated tokens handed out in TextDeltas
  std::string streamed_text;        // the text handed out
  int64_t drafted = 0, accepted = 0, spec_steps = 0;  // speculative decoding (Completion's)
  int64_t speculate_k = 0;            // EngineOptions::adaptive_k: its proposals a step now (0: not yet set)
};

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

size_t first_stop_string(const std::string& text, const std::vector<std::string>& stops) {
  size_t cut = std::string::npos;
  for (const auto& s : stops)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  return cut;
}

size_t streamable_length(const std::string& text, const std::vector<std::string>& stops) {
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD: what an incomplete character decodes to
  size_t n = text.size();
  while (n >= kReplacement.size() && text.compare(n - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
    n -= kReplacement.size();
  size_t hold = 0;
  for (const auto& stop : stops)
    for (size_t k = std::min(stop.size() - (stop.empty() ? 0 : 1), n); k > hold; --k)
      if (text.compare(n - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
  return n - hold;
}

Engine::Engine(Gpt model, EngineOptions options) : Engine(served_gpt(std::move(model)), std::move(options)) {}

Engine::Engine(std::shared_ptr<ServedModel> model, EngineOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  const auto& config = model_->config();
  const int64_t kv_heads = model_->kv_heads(), head_dim = config.head_dim();
  const auto dtype = model_->options().dtype().toScalarType();
  LOOM_CHECK(options_.block_size > 0 && options_.max_batch > 0 && options_.max_prefill_tokens > 0,
             "the engine needs a block size, a batch and a prefill budget > 0");
  if (model_->encodes()) {  // its decoder's prefix is the same start token for every source: nothing to share
    LOOM_CHECK(!options_.prefix_caching, "prefix caching (--prefix-caching) is for decoder-only models: an "
               "encoder-decoder's target prefixes depend on their sources; leave it out");
    LOOM_CHECK(!options_.drafter, "speculative decoding (--draft / --speculate) is for decoder-only models: leave "
               "it out for an encoder-decoder");
  }
  LOOM_CHECK(!options_.drafter || model_->gpt() != nullptr, "speculative decoding needs a Gpt target");
  const int64_t per_block =
      KVBlockPool::block_bytes(model_->kv_layers(), options_.block_size, kv_heads, head_dim, dtype);
  const int64_t blocks = options_.kv_blocks > 0 ? options_.kv_blocks : options_.kv_bytes / per_block;
  const int64_t needed = (config.max_seq_len + options_.block_size - 1) / options_.block_size;
  if (blocks < needed)
    throw Error("a KV pool of " + std::to_string(blocks) + " blocks of " + std::to_string(options_.block_size) +
                " positions cannot hold one sequence of model.max_seq_len=" + std::to_string(config.max_seq_len) +
                ": give it at least " + std::to_string(needed * per_block) + " bytes");
  pool_ = std::make_unique<KVBlockPool>(model_->kv_layers(), blocks, options_.block_size, kv_heads, head_dim,
                                        model_->options());
  pool_->set_prefix_caching(options_.prefix_caching);
}

Engine::~Engine() = default;

int64_t Engine::add(GenerationRequest request) {
  const int64_t context = model_->config().max_seq_len;
  const int64_t length = static_cast<int64_t>(request.prompt.size());  // an encoder-decoder's: the source's
  LOOM_CHECK(length > 0, "a request needs at least one prompt token");
  LOOM_CHECK(length <= context, "a prompt of ", length, " tokens exceeds model.max_seq_len=", context);
  LOOM_CHECK(request.max_tokens >= 0, "max_tokens must be >= 0");
  LOOM_CHECK(request.stop.empty() || options_.detokenize, "stop strings need the engine's detokenize");
  auto sequence = std::make_unique<Sequence>();
  sequence->tokens = model_->start_tokens(request.prompt);
  sequence->generator = sampling_generator(request.sampling.seed);
  sequence->request = std::move(request);
  const int64_t id = next_id_++;
  if (sequence->request.max_tokens == 0) {  // nothing to generate: done at the next step
    sequences_[id] = std::move(sequence);
    cancelled_.push_back(finish(id, FinishReason::kLength));
    return id;
  }
  sequences_[id] = std::move(sequence);
  waiting_.push_back(id);
  return id;
}

bool Engine::cancel(int64_t id) {
  const auto queued = std::find(waiting_.begin(), waiting_.end(), id);
  const auto active = std::find(running_.begin(), running_.end(), id);
  if (queued == waiting_.end() && active == running_.end()) return false;
  if (queued != waiting_.end()) waiting_.erase(queued);
  if (active != running_.end()) running_.erase(active);
  cancelled_.push_back(finish(id, FinishReason::kCancelled));
  return true;
}

Completion Engine::finish(int64_t id, FinishReason reason) {
  auto& sequence = *sequences_.at(id);
  pool_->release(sequence.table);
  if (options_.drafter) options_.drafter->release(id);
  Completion done;
  done.drafted = sequence.drafted;
  done.accepted = sequence.accepted;
  done.spec_steps = sequence.spec_steps;
  done.speculate_k = options_.drafter ? options_.speculate_k : 0;
  done.id = id;
  done.tokens.assign(sequence.tokens.end() - sequence.generated, sequence.tokens.end());
  if (reason == FinishReason::kStop && !done.tokens.empty() && done.tokens.back() == sequence.request.stop_token)
    done.tokens.pop_back();
  if (options_.detokenize) done.text = sequence.text ? *sequence.text : options_.detokenize(done.tokens);
  done.finish = reason;
  done.preemptions = sequence.preemptions;
  if (sequence.request.logprobs)
    done.logprobs.assign(sequence.logprobs.begin(),
                         sequence.logprobs.begin() + static_cast<std::ptrdiff_t>(done.tokens.size()));
  if (sequence.request.stream) stream(sequence, id, nullptr, &done);
  sequences_.erase(id);
  return done;
}

void Engine::stream(Sequence& sequence, int64_t id, const std::string* text, const Completion* done) {
  TextDelta delta;
  delta.id = id;
  const int64_t total = done ? static_cast<int64_t>(done->tokens.size()) : sequence.generated;
  const auto generated = sequence.tokens.end() - sequence.generated;
  if (total > sequence.streamed_tokens) {
    delta.tokens.assign(generated + sequence.streamed_tokens, generated + total);
    if (sequence.request.logprobs)
      delta.logprobs.assign(sequence.logprobs.begin() + sequence.streamed_tokens, sequence.logprobs.begin() + total);
    sequence.streamed_tokens = total;
  }
  auto& streamed = sequence.streamed_text;
  if (done) {  // the rest of the final text (which starts with what was streamed: the same tokens decoded)
    delta.text = done->text.substr(std::min(streamed.size(), done->text.size()));
    delta.final = true;
  } else if (options_.detokenize) {
    const std::string decoded = text ? std::string() : options_.detokenize({generated, sequence.tokens.end()});
    const std::string& full = text ? *text : decoded;
    const size_t n = streamable_length(full, sequence.request.stop);
    if (n > streamed.size() && full.compare(0, streamed.size(), streamed) == 0) {
      delta.text = full.substr(streamed.size(), n - streamed.size());
      streamed.assign(full, 0, n);
    }
  }
  deltas_.push_back(std::move(delta));
}

std::vector<TextDelta> Engine::take_deltas() {
  std::vector<TextDelta> out;
  out.swap(deltas_);
  return out;
}

bool Engine::take_token(int64_t id, int64_t token, double logprob, std::vector<Completion>& done) {
  auto& sequence = *sequences_.at(id);
  sequence.tokens.push_back(token);
  ++sequence.generated;
  const auto& request = sequence.request;
  if (request.logprobs) sequence.logprobs.push_back(logprob);
  bool stop = token == request.stop_token;
  std::optional<std::string> text;
  if (!stop && !request.stop.empty()) {
    text = options_.detokenize({sequence.tokens.end() - sequence.generated, sequence.tokens.end()});
    const size_t cut = first_stop_string(*text, request.stop);
    if (cut != std::string::npos) {
      sequence.text = text->substr(0, cut);
      stop = true;
    }
  }
  const bool length = sequence.generated >= request.max_tokens ||
                      static_cast<int64_t>(sequence.tokens.size()) > model_->config().max_seq_len;
  if (!stop && !length) {
    if (request.stream) stream(sequence, id, text ? &*text : nullptr, nullptr);
    return false;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  done.push_back(finish(id, stop ? FinishReason::kStop : FinishReason::kLength));
  return true;
}

void Engine::preempt(int64_t id) {
  auto& sequence = *sequences_.at(id);
  pool_->release(sequence.table);
  if (options_.drafter) options_.drafter->release(id);
  ++sequence.preemptions;
  ++stats_.preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.push_front(id);
}

void Engine::decode_running(std::vector<Completion>& done) {
  // Each sequence whose cache holds all but its last token decodes it; first each needs a slot for it, and when
  // the pool is dry the sequence admitted last gives its blocks up.
  if (options_.drafter) return decode_speculative(done);
  const auto decodes = [&](int64_t id) {
    const auto& sequence = *sequences_.at(id);
    return sequence.table.length + 1 == static_cast<int64_t>(sequence.tokens.size());
  };
  for (size_t i = 0; i < running_.size();) {
    auto& sequence = *sequences_.at(running_[i]);
    if (!decodes(running_[i]) || pool_->reserve(sequence.table, sequence.table.length + 1)) {
      ++i;
      continue;
    }
    preempt(running_.back());  // may be this one: then i is past the end
  }
  std::vector<int64_t> ids;
  std::vector<BlockTable*> rows;
  std::vector<int64_t> last;
  for (const int64_t id : running_) {
    if (!decodes(id)) continue;
    auto& sequence = *sequences_.at(id);
    ids.push_back(id);
    rows.push_back(&sequence.table);
    last.push_back(sequence.tokens.back());
  }
  if (ids.empty()) return;
  const auto device = pool_->keys(0).device();
  auto caches = paged_kv_caches(*pool_, rows, model_->config().attention_window);
  const auto tokens = torch::tensor(last, torch::kLong).unsqueeze(1).to(device);
  // (B, V), or this rank's (B, V_r) under TP
  auto logits = model_->forward(tokens, caches, sources_of(ids)).select(1, -1);
  if (auto* tp = model_->tp_group(); tp != nullptr && tp->size() > 1) {
    // the whole vocabulary, then rank 0's on every rank: the same logits, the same samples, the same schedule
    logits = gather_from_tp_region(logits, *tp, model_->config().vocab_size).contiguous();
    tp->broadcast(logits, 0);
  }
  logits = logits.to(torch::kFloat).cpu();
  ++stats_.forwards;
  stats_.decode_tokens += static_cast<int64_t>(ids.size());
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, pool_->used_blocks());
  for (size_t b = 0; b < ids.size(); ++b) {
    auto& sequence = *sequences_.at(ids[b]);
    const auto row = logits[static_cast<int64_t>(b)];
    const int64_t token = sample_token(row, sequence.request.sampling, sequence.generator);
    const double logprob = sequence.request.logprobs ? torch::log_softmax(row, 0)[token].item<double>() : 0.0;
    take_token(ids[b], token, logprob, done);
  }
}

void Engine::decode_speculative(std::vector<Completion>& done) {
  // As decode_running, with room for the proposals too (serve/speculative.h).
  const auto k_of = [&](const Sequence& s) { return s.speculate_k > 0 ? s.speculate_k : options_.speculate_k; };
  const auto room = [&](const Sequence& s) {
    return speculative_room(k_of(s), model_->config().max_seq_len, static_cast<int64_t>(s.tokens.size()),
                            s.request.max_tokens - s.generated);
  };
  const auto decodes = [&](const Sequence& s) { return s.table.length + 1 == static_cast<int64_t>(s.tokens.size()); };
  for (size_t i = 0; i < running_.size();) {
    auto& s = *sequences_.at(running_[i]);
    if (!decodes(s) || pool_->reserve(s.table, s.table.length + 1 + room(s))) {
      ++i;
      continue;
    }
    preempt(running_.back());
  }
  std::vector<SpeculativeRow> rows;
  for (const int64_t id : running_) {
    auto& s = *sequences_.at(id);
    if (decodes(s))
      rows.push_back({id, &s.tokens, &s.table, &s.request.sampling, &s.generator, room(s), s.request.logprobs});
  }
  if (rows.empty()) return;
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, pool_->used_blocks());
  const auto outcomes = speculative_step(*model_->gpt(), *pool_, *options_.drafter, rows, stats_.forwards);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& outcome = outcomes[i];
    auto& s = *sequences_.at(rows[i].id);
    s.drafted += outcome.drafted;
    s.accepted += outcome.accepted;
    s.spec_steps += outcome.drafted > 0 ? 1 : 0;
    if (options_.adaptive_k && outcome.drafted > 0)  // all kept: 2 more next time, else 1 fewer (at least 1)
      s.speculate_k = outcome.accepted == outcome.drafted ? std::min(k_of(s) + 2, options_.speculate_k)
                                                          : std::max<int64_t>(1, k_of(s) - 1);
    stats_.drafted_tokens += outcome.drafted;
    stats_.accepted_tokens += outcome.accepted;
    stats_.decode_tokens += static_cast<int64_t>(outcome.tokens.size());
    for (size_t j = 0; j < outcome.tokens.size(); ++j)
      if (take_token(rows[i].id, outcome.tokens[j], outcome.logprobs.empty() ? 0.0 : outcome.logprobs[j], done)) break;
  }
}

void Engine::admit_waiting() {
  // An admitted sequence holds the blocks of all its tokens: prefilled over the next steps, then decoded.
  std::vector<int64_t> encode;  // encoder-decoder: the admitted sequences without an encoded source
  while (!waiting_.empty() && running() < options_.max_batch) {
    const int64_t id = waiting_.front();
    auto& sequence = *sequences_.at(id);
    const int64_t length = static_cast<int64_t>(sequence.tokens.size());
    // Cached blocks first (never the last token's: it is decoded), then fresh ones for the rest.
    const int64_t shared = pool_->share_prefix(sequence.table, sequence.tokens, length - 1);
    if (!pool_->reserve(sequence.table, length)) {
      pool_->release(sequence.table);
      break;
    }
    stats_.prefix_hit_tokens += shared;
    if (model_->encodes() && !sequence.source) encode.push_back(id);
    waiting_.pop_front();
    running_.push_back(id);
  }
  // The encoder once a sequence (its source kept through preemptions), the step's new ones in one forward.
  if (encode.empty()) return;
  std::vector<std::vector<int64_t>> sources;
  for (const int64_t id : encode) sources.push_back(sequences_.at(id)->request.prompt);
  auto encoded = model_->encode(sources);
  for (size_t i = 0; i < encode.size(); ++i) sequences_.at(encode[i])->source = std::move(encoded[i]);
  stats_.encoded_sources += static_cast<int64_t>(encode.size());
}

void Engine::prefill_running() {
  // Chunked prefill: every token but the last goes into the cache by prefill, max_prefill_tokens a step over all
  // sequences in admission order, so a long prompt does not stall the decoding ones; the last is decoded. The
  // chunks of one length go in one forward, a ragged batch (each row at its own position): a forward's fixed
  // costs (every weight read, MKL packing them for the product) are paid once for many prompts.
  int64_t budget = options_.max_prefill_tokens;
  const auto device = pool_->keys(0).device();
  std::map<int64_t, std::vector<int64_t>> by_length;  // chunk length -> sequences, in admission order
  for (const int64_t id : running_) {
    auto& sequence = *sequences_.at(id);
    // The tokens not in the cache yet, but the last (decoded with the batch).
    const int64_t unfilled = static_cast<int64_t>(sequence.tokens.size()) - 1 - sequence.table.length;
    if (unfilled <= 0) continue;
    if (budget <= 0) break;
    const int64_t n = std::min(unfilled, budget);
    by_length[n].push_back(id);
    budget -= n;
  }
  for (const auto& [n, ids] : by_length) {
    std::vector<BlockTable*> rows;
    std::vector<int64_t> chunks;
    for (const int64_t id : ids) {
      auto& sequence = *sequences_.at(id);
      const auto from = sequence.tokens.begin() + sequence.table.length;
      rows.push_back(&sequence.table);
      chunks.insert(chunks.end(), from, from + n);
    }
    auto caches = paged_kv_caches(*pool_, rows, model_->config().attention_window);
    const auto batch = static_cast<int64_t>(ids.size());
    model_->forward(torch::tensor(chunks, torch::kLong).view({batch, n}).to(device), caches, sources_of(ids));
    ++stats_.forwards;
    stats_.prefill_tokens += n * batch;
  }
}

std::vector<Completion> Engine::step() {
  InferenceScope inference;  // no gradients; the few-row kernel (models/few_rows_linear.h)
  std::vector<Completion> done;
  done.swap(cancelled_);
  ++stats_.steps;
  decode_running(done);
  admit_waiting();
  prefill_running();
  if (options_.prefix_caching)
    for (const int64_t id : running_) pool_->publish(sequences_.at(id)->table, sequences_.at(id)->tokens);
  return done;
}

Engine::Phase Engine::phase(int64_t id) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) return Phase::kGone;
  if (std::find(running_.begin(), running_.end(), id) == running_.end())
    return std::find(waiting_.begin(), waiting_.end(), id) == waiting_.end() ? Phase::kGone : Phase::kWaiting;
  const auto& sequence = *it->second;
  return sequence.table.length + 1 < static_cast<int64_t>(sequence.tokens.size()) ? Phase::kPrefilling
                                                                                   : Phase::kDecoding;
}

std::vector<const EncodedSource*> Engine::sources_of(const std::vector<int64_t>& ids) const {
  std::vector<const EncodedSource*> sources;
  sources.reserve(ids.size());
  for (const int64_t id : ids) sources.push_back(sequences_.at(id)->source.get());
  return sources;
}

std::string Engine::audit() const {
  std::vector<const BlockTable*> tables;
  for (const auto& [id, sequence] : sequences_) tables.push_back(&sequence->table);
  return pool_->audit(tables);
}

std::vector<Completion> Engine::run() {
  std::vector<Completion> all;
  do {
    auto done = step();
    all.insert(all.end(), std::make_move_iterator(done.begin()), std::make_move_iterator(done.end()));
  } while (!idle() || !cancelled_.empty());
  std::sort(all.begin(), all.end(), [](const Completion& a, const Completion& b) { return a.id < b.id; });
  return all;
}

}  // namespace loom
