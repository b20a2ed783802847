// Where the encoder-decoder's batches come from: a deterministic source of Seq2SeqBatch, like LmSampler
// a pure function of (step, sequence index in the global batch), so resume and a changed DP size are
// exact. Implementations: the synthetic tasks (data/pairs/synthetic_pairs.h) and pair token files such as
// the Bible's (data/pairs/pair_source.h). make_seq2seq_source() picks one from the config.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "data/pairs/seq2seq_batch.h"

namespace loom {

using TokenPair = std::pair<std::vector<int64_t>, std::vector<int64_t>>;  // source, target (no bos/eos)

class Seq2SeqSource {
 public:
  virtual ~Seq2SeqSource() = default;
  // Pairs [first, first + count) of the global training batch of `step`.
  virtual Seq2SeqBatch train_batch(int64_t step, int64_t first, int64_t count) const = 0;
  // Pairs in the global training batch of `step` (token-based batches vary from step to step).
  virtual int64_t train_batch_size(int64_t step) const = 0;
  // Pairs [first, first + count) of the fixed evaluation set (wrapping around); empty set: no evaluation.
  virtual Seq2SeqBatch eval_batch(int64_t first, int64_t count) const = 0;
  virtual int64_t eval_size() const = 0;
  virtual int64_t vocab_size() const = 0;  // token ids are below this
  // A mixture of training sources: their names, and per source the tokens of the global batch of `step`
  // (train/task.h's source_tokens). Empty: one source.
  virtual std::vector<std::string> source_names() const { return {}; }
  virtual std::vector<int64_t> source_tokens(int64_t) const { return {}; }
};

// Pads pairs into a batch as data/pairs/seq2seq_batch.h describes.
Seq2SeqBatch collate_pairs(const std::vector<TokenPair>& pairs);

// The batch with S and T padded up to multiples of `multiple` (data.pad_to_multiple, sequence parallelism):
// more padding of the same kind (token 0, label kIgnoreLabel), the lengths unchanged, so masks and the loss
// see the same pairs. multiple 1, or lengths already multiples: the batch itself.
Seq2SeqBatch pad_to_multiple(const Seq2SeqBatch& batch, int64_t multiple);

// The source the config asks for: data.synthetic, else the pair files data.train (when `training`; several
// are a mixture) and data.valid (data/pairs/pair_source.h). Throws ConfigError naming the key.
std::unique_ptr<Seq2SeqSource> make_seq2seq_source(const Config& config, bool training);

}  // namespace loom
