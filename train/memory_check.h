// Refuses, before anything is allocated, a model whose weights, gradients and AdamW state (the estimate
// `loom info` prints, models/estimates.h) cannot fit in the memory this rank can have: MemAvailable of
// /proc/meminfo shared by the ranks of this node on the CPU, the free memory of the rank's GPU on CUDA.
// A clear error instead of the kernel's OOM killer an hour into building a model. Activations are left
// out of the refusal (a smaller micro-batch or recomputation shrinks them) but named in the message.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"

namespace loom {

// Bytes this rank may allocate on `device` (nothing if unknown); local_ranks: the ranks of this node.
std::optional<int64_t> available_memory(torch::Device device, int64_t local_ranks);

// The error message when the model of `config` (parallel.dp resolved) does not fit in `available`
// bytes; nothing when it fits.
std::optional<std::string> memory_shortfall(const Config& config, int64_t available);

// Throws loom::Error with memory_shortfall's message when the model cannot fit on this rank; dp: the
// resolved data-parallel size. model.vocab_size 0 (taken from the data later) leaves the embedding out.
void check_memory_fits(const Config& config, int64_t dp, torch::Device device, int64_t local_ranks);

// The MemAvailable line of a /proc/meminfo text, in bytes.
std::optional<int64_t> parse_mem_available(const std::string& meminfo);

}  // namespace loom
