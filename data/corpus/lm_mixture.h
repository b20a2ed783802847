// Training windows from one or more weighted sources (data.train: a path, or a list of {path, weight}).
// Still a pure function of (seed, step, index): sequence `index` of the global batch of `step` is global
// sequence n = step * batch_size + index; its source is the WeylMixture's draw n (weyl_mixture.h: any run
// of N consecutive sequences takes each source's share to within a few / N of its weight), its window the
// LmSampler's. With one source nothing changes: the windows are the LmSampler's alone.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/lm_batches.h"
#include "data/corpus/lm_sampler.h"
#include "data/corpus/token_corpus.h"
#include "data/corpus/weyl_mixture.h"

namespace loom {

struct LmSource {
  std::string name;  // for metrics (the config's path)
  double weight = 1.0;
  std::unique_ptr<TokenCorpus> corpus;
};

class LmMixture : public LmBatches {
 public:
  LmMixture(std::vector<LmSource> sources, LmSampler sampler, int64_t batch_size);

  // Which source sequence `index` of the global batch of `step` comes from.
  size_t source_of(int64_t step, int64_t index) const;

  LmBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  std::vector<std::string> source_names() const override;
  std::vector<int64_t> source_tokens(int64_t step) const override;

  const std::vector<LmSource>& sources() const { return sources_; }

 private:
  std::vector<LmSource> sources_;
  LmSampler sampler_;
  int64_t batch_size_;
  WeylMixture draws_;
};

}  // namespace loom
