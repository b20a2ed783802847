// Refuses, before anything is allocated, a run whose tensors (the run plan's estimate that `loom info`
// prints, train/run_plan.h) cannot fit in the memory this rank can have: MemAvailable of /proc/meminfo shared by
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

#include "train/run_plan.h"

namespace loom {

// Bytes this rank may allocate on `device` (nothing if unknown); local_ranks: the ranks of this node.
std::optional<int64_t> available_memory(torch::Device device, int64_t local_ranks);

// Throws loom::Error with the plan's memory_shortfall message when a rank of pipeline stage `stage` cannot
// fit in what this rank may have (every rank checks its own stage); local_ranks: the ranks of this node.
void check_memory_fits(const RunPlan& plan, int64_t stage, torch::Device device, int64_t local_ranks);

// The MemAvailable line of a /proc/meminfo text, in bytes.
std::optional<int64_t> parse_mem_available(const std::string& meminfo);

}  // namespace loom
