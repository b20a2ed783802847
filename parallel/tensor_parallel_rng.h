// The second dropout stream of tensor parallelism (Megatron's RNG tracker). Dropout on activations that
// every TP rank holds whole (after a row-parallel layer, between blocks) must draw the same mask on every
// rank, or the replicas drift apart: it uses the device's default generator, seeded alike everywhere.
// Dropout on activations a rank holds only its part of (attention probabilities of its own heads, sequence
// shards under sequence parallelism) must draw different masks on different ranks, or the ranks' parts
// are dropped in lockstep: it uses this stream, seeded from run.seed, the TP rank, the pipeline stage and
// the CP rank (two stages' or two CP ranks' sharded activations must not be dropped in lockstep either).
// fork() switches the device's default generator to this stream for a scope (so any op's draws, SDPA's
// dropout included, come from it) and back after. The stream's state is saved in checkpoints so that resume stays exact.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>

namespace loom {

class TensorParallelRng {
 public:
  // seed: stream_seed(run.seed, tp_rank, pp_rank, cp_rank), Megatron's tensor-model-parallel seed
  // (megatron/core/tensor_parallel/random.py, with the 100-per-pipeline-rank offset of its initialize.py).
  static constexpr uint64_t kSeedOffset = 2718;
  static constexpr uint64_t kPipelineSeedStride = 100;
  // Context parallelism: every CP rank holds other positions of the same sequences, so its sharded
  // activations get their own masks too (a stride far above the others': with fewer than 10,000 stages and
  // TP ranks no two ranks' seeds meet).
  static constexpr uint64_t kContextSeedStride = 1000003;
  // run_seed + 2718 + tp_rank + 100 * pp_rank + 1000003 * cp_rank: stage 0 and CP rank 0 keep the seed of a
  // run without pipeline or context parallelism, so its checkpoints resume on the same stream.
  static uint64_t stream_seed(uint64_t run_seed, int64_t tp_rank, int64_t pp_rank, int64_t cp_rank = 0) {
    return run_seed + kSeedOffset + static_cast<uint64_t>(tp_rank) + kPipelineSeedStride * static_cast<uint64_t>(pp_rank) +
           kContextSeedStride * static_cast<uint64_t>(cp_rank);
  }
  explicit TensorParallelRng(uint64_t seed) : seed_(seed) {}

  // While alive, `device`'s default generator draws from this stream; the default stream is put back after.
  class Fork {
   public:
    Fork(TensorParallelRng& rng, torch::Device device);
    ~Fork();
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;

   private:
    TensorParallelRng& rng_;
    torch::Device device_;
    torch::Tensor default_state_;
  };

  // The stream's generator state on a device type ("cpu", "cuda"); a fresh stream starts from the seed.
  torch::Tensor state(torch::Device device);
  void set_state(torch::Device device, const torch::Tensor& state);
  // Every device type's state drawn from so far, by name (what a checkpoint keeps).
  const std::map<std::string, torch::Tensor>& states() const { return states_; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  std::map<std::string, torch::Tensor> states_;  // by device type name
};

}  // namespace loom
