// The LM head and the cross-entropy as one autograd function, chunked over tokens: forward computes each
// chunk's logits = hidden_chunk @ weight^T, its loss terms and, when a gradient is wanted, the gradient of
// those logits in the same pass, pushes it through the head's product (into hidden's and weight's
// gradients) and drops the chunk. No (N, V) logits, fp32 copies, log-probabilities or logit gradients
// are ever held at once, only one chunk's; backward just scales the two stored gradients. The products
// run in the autocast dtype when autocast is on (as the plain head's linear would), the softmax in fp32.
// Same loss and gradients as loom::cross_entropy(hidden @ weight^T, ...) (see cross_entropy.h), label
// smoothing, ignore_index and vocab-parallel TP included: with a TP group of more than one rank, weight
// holds this rank's rows shard_range(V, tp, rank) of the vocabulary, the softmax statistics are reduced
// over the group per chunk, and hidden's gradient is summed over the group (hidden is replicated).
// The softmax steps over a chunk run in loom's row kernels on an AVX-512 CPU for float and bf16 products
// (optim/cross_entropy_rows.h: one pass per step, a few rows at a time in cache), elsewhere in ATen's operators.
#pragma once
#include <torch/torch.h>

#include "optim/cross_entropy.h"
#include "parallel/communicator.h"

namespace loom {

// Which implementation runs the softmax steps: kAuto as above; kAten and kPortableKernels (the row kernels'
// portable build, on any CPU) for tests.
enum class SoftmaxSteps { kAuto, kAten, kPortableKernels };

// hidden: (N, C), weight: (V, C) or (V_r, C) with `tp`, targets: (N) int64 -> scalar mean loss.
// chunk_tokens: tokens per chunk (> 0).
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                   int64_t chunk_tokens, double label_smoothing = 0.0,
                                   int64_t ignore_index = kIgnoreIndex, Communicator* tp = nullptr,
                                   SoftmaxSteps steps = SoftmaxSteps::kAuto);

}  // namespace loom
