// Refuses, before anything is allocated, a run whose tensors (the estimate `loom info` prints,
// models/estimates.h) cannot fit in the memory this rank can have: MemAvailable of /proc/meminfo shared by
// the ranks of this node on the CPU, the free memory of the rank's GPU on CUDA. A clear error instead of
// the kernel's OOM killer an hour into building a model: first the model (weights, gradients, AdamW state:
// a smaller model or more ranks), then the activations of a micro-batch on top (a smaller micro-batch or
// recomputation), each message naming the keys to change. The estimate counts tensors at a step's peak,
// less than a process holds, so a refusal is never wrong; a run that passes may still be tight.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/config.h"

namespace loom {

// Bytes this rank may allocate on `device` (nothing if unknown); local_ranks: the ranks of this node.
std::optional<int64_t> available_memory(torch::Device device, int64_t local_ranks);

// The error message when the model of `config` (parallel.dp resolved), or the model and a micro-batch's
// activations, do not fit in `available` bytes; nothing when they fit.
std::optional<std::string> memory_shortfall(const Config& config, int64_t available);

// Throws loom::Error with memory_shortfall's message when the run cannot fit on this rank; dp: the
// resolved data-parallel size. model.vocab_size 0 (taken from the data later) leaves the embedding out.
void check_memory_fits(const Config& config, int64_t dp, torch::Device device, int64_t local_ranks);

// The MemAvailable line of a /proc/meminfo text, in bytes.
std::optional<int64_t> parse_mem_available(const std::string& meminfo);

}  // namespace loom
