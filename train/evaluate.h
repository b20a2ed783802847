// The validation loss, shared by the Trainer's periodic evaluation and `loom eval`: the mean cross-entropy
// over train.eval_batches global batches of train.batch_size consecutive windows of data.seq_len + 1
// tokens (wrapping around the file), the same set whatever the parallel layout and micro-batch size. It
// neither trains nor touches RNG state.
#pragma once
#include <torch/torch.h>

#include "core/config.h"
#include "data/token_file.h"
#include "models/gpt.h"
#include "parallel/mesh.h"

namespace loom {

// Each DP rank of the mesh evaluates its slice in micro-batches; the mean is over the mesh's DP group.
double evaluate_loss(GptImpl& model, const TokenFile& data, const Config& config, const Mesh& mesh, torch::Device device);

}  // namespace loom
