// loom's inference engine: a queue of generation requests and an iteration-level scheduler over a paged KV
// cache (models/paged_kv_cache.h), continuous batching as Orca and vLLM do it. Each step():
//   1. decodes every running sequence whose cache holds all but its last token, by one token in one forward (a
//      ragged batch: each row at its own position), first finding each a slot: when the pool runs dry the
//      sequence admitted last is preempted (its blocks freed, re-queued at the front, later prefilled again
//      with its prompt and generated tokens: preemption by recompute);
//   2. admits waiting sequences in order while the batch and the free blocks allow (each takes the blocks of
//      all its tokens; with prefix caching, first the cached blocks its tokens start with, which it skips);
//   3. prefills the admitted ones in chunks: at most max_prefill_tokens a step over all of them (the chunks of one
//      length in one forward, a ragged batch), every token but the last, which the next step decodes with the others.
// With prefix caching, each step ends by filing the running sequences' full blocks for later ones to share.
// A sequence that finishes (max_tokens, its stop token or a stop string, the context) or is cancelled leaves
// at once and its blocks go back to the pool. Each sequence samples with its own generator seeded by its
// request (models/generate.h sample_token), so its tokens depend on its seed alone, never on the batch; greedy
// gives the tokens of decoding it alone (up to the floating-point order of a batched product).
// A streamed request (GenerationRequest::stream) also hands out its output as it is made: take_deltas() after a
// step gives each one's new tokens and the text they add that no stop string can take back any more.
// The model is a ServedModel (serve/served_model.h): a Gpt continues each prompt; an encoder-decoder takes each
// prompt as a source sentence, encodes it when the sequence is admitted (the encoded source is kept until the
// sequence finishes or is cancelled, through preemptions: its recompute re-runs the decoder only) and decodes the
// target from the decoder's start token, the rows' self-attention through the paged cache as a Gpt's. Prefix
// caching, speculative decoding and tensor parallelism are the Gpt's only (refused for an encoder-decoder).
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/generate.h"
#include "models/gpt.h"
#include "models/paged_kv_cache.h"
#include "serve/served_model.h"

namespace loom {

struct GenerationRequest {
  std::vector<int64_t> prompt;       // at least one token, at most model.max_seq_len (encoder-decoder: the source)
  int64_t max_tokens = 16;           // new tokens at most
  SamplingOptions sampling;          // temperature (0: greedy), top_k, top_p, seed; use_cache is ignored
  std::vector<std::string> stop;     // stop strings (EngineOptions::detokenize turns tokens into text)
  int64_t stop_token = -1;           // >= 0: ends the sequence (end of sequence), not part of its tokens
  bool stream = false;               // hand its output out as it is made (Engine::take_deltas)
  bool logprobs = false;             // record each generated token's log-probability (Completion::logprobs)
};

enum class FinishReason { kLength, kStop, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled"

struct Completion {
  int64_t id = 0;
  std::vector<int64_t> tokens;  // generated; without the stop token
  std::string text;             // the tokens as text, cut before a stop string (only with detokenize)
  FinishReason finish = FinishReason::kLength;
  int64_t preemptions = 0;      // times its blocks were taken and it was recomputed
  std::vector<double> logprobs;  // with GenerationRequest::logprobs: each token's log-probability under the model
  // Speculative decoding: tokens proposed for it, those the target kept, the steps that verified proposals of it
  // (steps where the drafter proposed nothing are not counted), and the engine's speculate_k (0: no drafter).
  int64_t drafted = 0, accepted = 0, spec_steps = 0, speculate_k = 0;
};

// A piece of a streamed request's output: the tokens generated since its last piece and the text they add.
// Text that a stop string could still cut (a suffix that begins one) or that ends in an incomplete UTF-8
// character (decoded as U+FFFD) is held back, so a request's pieces, in order, add up to its Completion's tokens
// and text exactly; its last piece comes with the step() that finishes it (final set), even when empty.
struct TextDelta {
  int64_t id = 0;
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;  // with GenerationRequest::logprobs: one per token
  std::string text;
  bool final = false;
};

// How much of text may be streamed: all of it but a suffix that begins one of the stop strings (it may yet
// become one) or an incomplete UTF-8 character at its end (U+FFFD).
size_t streamable_length(const std::string& text, const std::vector<std::string>& stops);

// Where the earliest of the (non-empty) stop strings starts in text, or npos.
size_t first_stop_string(const std::string& text, const std::vector<std::string>& stops);

class Drafter;  // serve/drafter.h

struct EngineOptions {
  int64_t block_size = 16;          // positions per KV block
  int64_t kv_blocks = 0;            // the pool's blocks; 0: as many as kv_bytes holds
  int64_t kv_bytes = int64_t{256} << 20;
  int64_t max_batch = 64;           // running sequences at most
  int64_t max_prefill_tokens = 512;  // prompt tokens prefilled in one step (chunked: a long prompt over several)
  bool prefix_caching = false;      // share the KV blocks of identical prefixes (models/paged_kv_cache.h)
  std::function<std::string(const std::vector<int64_t>&)> detokenize;  // for stop strings and Completion::text
  // Speculative decoding (serve/speculative.h): the drafter proposes up to speculate_k tokens a sequence a step,
  // the target checks them in one forward. Null: one token a step.
  std::shared_ptr<Drafter> drafter;
  int64_t speculate_k = 4;
  // Each sequence's k follows its acceptance: 2 more after a step that kept every proposal, 1 fewer after one that
  // did not (from speculate_k, within [1, speculate_k]); it depends on the sequence alone, never on the batch.
  bool adaptive_k = false;
};

struct EngineStats {
  int64_t steps = 0, forwards = 0, prefill_tokens = 0, decode_tokens = 0, preemptions = 0, peak_used_blocks = 0;
  int64_t prefix_hit_tokens = 0;  // prompt positions found in the prefix cache (not prefilled)
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding: proposed, and kept by the target
  int64_t encoded_sources = 0;  // encoder-decoder: sources encoded (once a sequence, at its first admission)
};

class Engine {
 public:
  // The model generates in eval mode without gradients; its pool is on the model's device, in its dtype.
  // A Gpt's pool holds every block's keys and values; an encoder-decoder's its decoder blocks' self-attention's.
  Engine(Gpt model, EngineOptions options);
  // Any ServedModel: a Gpt's, or an encoder-decoder's (served_encoder_decoder).
  Engine(std::shared_ptr<ServedModel> model, EngineOptions options);
  ~Engine();

  // Queues a request; its id (ids count from 0). Throws loom::Error for one it can never run.
  int64_t add(GenerationRequest request);
  // A waiting or running request leaves now, its blocks freed; its Completion (kCancelled) comes with the next
  // step(). False for an id that is not waiting or running.
  bool cancel(int64_t id);
  // One iteration; the requests that finished in it (and those cancelled since the last).
  std::vector<Completion> step();
  // Steps until no request waits or runs; every Completion step() returned, by id.
  std::vector<Completion> run();
  // The pieces of the streamed requests' output since the last call (the steps' and the cancellations'), in order.
  std::vector<TextDelta> take_deltas();

  // Where a request is (for tests and metrics): waiting, prefilling (its cache lacks more than its last
  // token), decoding, or gone (finished, cancelled or unknown).
  enum class Phase { kWaiting, kPrefilling, kDecoding, kGone };
  Phase phase(int64_t id) const;
  // The pool's block accounting checked against every live sequence's table (KVBlockPool::audit): empty when
  // consistent, else what is wrong.
  std::string audit() const;

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  const KVBlockPool& pool() const { return *pool_; }
  const EngineStats& stats() const { return stats_; }

 private:
  struct Sequence;
  // Frees the sequence's blocks and moves it to the front of the queue.
  void preempt(int64_t id);
  // Takes the sampled token; true when the sequence is finished (then in done).
  bool take_token(int64_t id, int64_t token, double logprob, std::vector<Completion>& done);
  Completion finish(int64_t id, FinishReason reason);
  // A streamed sequence's new tokens and the text that can no longer be cut (all of it when final).
  void stream(Sequence& sequence, int64_t id, const std::string* text, const Completion* done);
  void decode_running(std::vector<Completion>& done);
  void decode_speculative(std::vector<Completion>& done);  // decode_running with options_.drafter
  void admit_waiting();
  void prefill_running();
  // The rows' encoded sources (encoder-decoder; nulls for a Gpt), for ServedModel::forward.
  std::vector<const EncodedSource*> sources_of(const std::vector<int64_t>& ids) const;

  std::shared_ptr<ServedModel> model_;
  EngineOptions options_;
  std::unique_ptr<KVBlockPool> pool_;
  std::map<int64_t, std::unique_ptr<Sequence>> sequences_;  // waiting and running
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;  // in admission order
  std::vector<Completion> cancelled_;
  std::vector<TextDelta> deltas_;
  int64_t next_id_ = 0;
  EngineStats stats_;
};

}  // namespace loom
