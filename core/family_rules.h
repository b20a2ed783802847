// What the layers below train/ ask of a model family (model.arch): its own checks of the config, and the
// shape of its model, which the pipeline split (ModelConfig::pipeline_layers), the closed-form estimates
// (models/estimates.cpp) and `loom info` read. They are part of the family's entry in the family table
// (train/model_family.h), which registers them here; nothing below train/ names a family.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/config.h"

namespace loom {

class ConfigChecks;  // core/config_checks.h

// A family's model as the estimates count it: stacks of models/block.h's blocks between its embeddings
// (a token embedding, and with learned positions a table per embedded sequence) and its head.
struct ModelShape {
  int64_t encoder_layers = 0;    // blocks over a source, split into pipeline stages before the decoder's; 0: none
  int64_t decoder_layers = 0;    // the GPT's blocks, the encoder-decoder's decoder blocks
  bool cross_attention = false;  // each decoder block attends to the encoder's output (a norm and an attention more)
  int64_t position_tables = 1;   // learned positions: one table per embedded sequence
  // model.position relative (T5): a relative_buckets x n_heads bias table per stack, held by the first stage
  // (which computes each stack's bias and passes it on with the hidden states).
  int64_t relative_bias_tables = 0;
  bool final_norms = true;       // each stack ends in a norm (pre-norm)
  int64_t stage_outputs = 1;     // tensors a pipeline stage passes on (and gradients it sends back)
  bool fused_loss = false;       // its task fuses head and loss on a whole model without TP (train.loss_chunk_tokens)
  // ZeRO-3 keeps the ends (embeddings, final norms, head) gathered over a step; false: gathers them for the
  // embeddings and again for the head, freed over the blocks.
  bool ends_kept = false;
  // BERT's ends: a token-type table of this many rows and a norm after the embeddings; an MLM head (a
  // C x C dense layer with bias and a norm before the vocabulary product, and an output bias of V).
  int64_t token_types = 0;
  bool embedding_norm = false;
  bool mlm_head = false;
  // A sequence classifier's head instead of a vocabulary head (BERT's: a C x C pooler and a C x labels
  // classifier, both with biases); 0: none.
  int64_t classifier_labels = 0;

  int64_t pipeline_layers() const { return encoder_layers + decoder_layers; }
};

struct FamilyRules {
  // The family's own checks (called by validate(), core/config_validate.cpp): the keys that apply to it
  // only, those it refuses, and what its batches need of the layout.
  std::function<void(const Config&, ConfigChecks&)> validate;
  std::function<ModelShape(const ModelConfig&)> shape;
  // What its pipeline blocks count, for messages: "model.n_layers".
  std::string pipeline_keys;
};

// The family table registers every family's rules (train/model_family.h, register_model_family), before any
// config is parsed.
void register_family_rules(ModelArch arch, FamilyRules rules);
// Throws Error for an arch with no family registered.
const FamilyRules& family_rules(ModelArch arch);
ModelShape model_shape(const ModelConfig& model);

}  // namespace loom
