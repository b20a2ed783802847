// The single declaration of every config key: its path, the member it binds to and what it means.
// Parsing, dumping, --set overrides and the reference table are all driven by this one list. An
// enum-like key's allowed values, and what each means, are its enum's table in core/config_enums.h (the
// reference appends them to the meaning given here).
#pragma once
#include "core/config.h"

namespace loom {

template <class Visitor>
void visit_fields(Config& c, Visitor&& v) {
  v("run.dir", c.run.dir, "Run directory: resolved config, metrics.jsonl, checkpoints/. Training again with the same dir resumes.");
  v("run.seed", c.run.seed, "Seed for initialization, data sampling and dropout.");

  v("model.arch", c.model.arch, "Model family.");
  v("model.vocab_size", c.model.vocab_size, "Vocabulary size; 0 takes the tokenizer's.");
  v("model.d_model", c.model.d_model, "Hidden size.");
  v("model.n_layers", c.model.n_layers, "Number of Transformer blocks (transformer: decoder blocks).");
  v("model.n_encoder_layers", c.model.n_encoder_layers, "transformer: encoder blocks; 0 means model.n_layers.");
  v("model.n_heads", c.model.n_heads, "Attention (query) heads; must divide d_model.");
  v("model.n_kv_heads", c.model.n_kv_heads, "Key/value heads for grouped-query attention (1: multi-query); must divide n_heads. 0 means n_heads.");
  v("model.d_ff", c.model.d_ff, "MLP inner size (gated MLPs: of each of the gate and up projections); 0 means 4 * d_model.");
  v("model.head_dim", c.model.head_size, "Size of each attention head, when not d_model / n_heads (Qwen3: 128 with d_model 2048 and 32 heads; T5 v1.1's d_kv): the query projection is then C -> n_heads * head_dim. 0 means d_model / n_heads.");
  v("model.qk_norm", c.model.qk_norm, "model.arch=gpt: RMSNorm (model.norm_eps, a learned gain of head_dim) over each query and key head before RoPE (Qwen3's q_norm, k_norm).");
  v("model.max_seq_len", c.model.max_seq_len, "Context length: the longest sequence the model sees (training and generation), the size of a learned position table.");
  v("model.norm", c.model.norm, "The norm before each sublayer and at the end.");
  v("model.norm_position", c.model.norm_position, "Where the norms sit in each block.");
  v("model.norm_eps", c.model.norm_eps, "Epsilon of the norms.");
  v("model.position", c.model.position, "Position information.");
  v("model.relative_buckets", c.model.relative_buckets, "model.position=relative: buckets of the relative attention bias (T5: 32); in the encoder half of them for keys before the query, half after.");
  v("model.relative_max_distance", c.model.relative_max_distance, "model.position=relative: distances of this and more share the last bucket (T5: 128); below half the buckets each distance has its own, then buckets grow logarithmically.");
  v("model.rope_theta", c.model.rope_theta, "RoPE base: frequencies theta^(-2i/head_dim).");
  v("model.rope_scaling", c.model.rope_scaling, "RoPE context extension.");
  v("model.rope_scaling_factor", c.model.rope_scaling_factor, "Factor of model.rope_scaling (>= 1).");
  v("model.activation", c.model.activation, "The MLP's activation.");
  v("model.bias", c.model.bias, "Biases in the attention and MLP linear layers (norms keep theirs; the untied head has none).");
  v("model.attention_window", c.model.attention_window, "Sliding-window attention: each position sees itself and the window - 1 before it, and a generation cache keeps at most that many (model.arch=transformer: in both stacks' self-attention, the encoder's seeing window - 1 positions on either side). 0: full attention.");
  v("model.dropout", c.model.dropout, "Dropout on embeddings, attention probabilities and residual branches.");
  v("model.tie_embeddings", c.model.tie_embeddings, "Share the token embedding with the output projection.");
  v("model.scale_embeddings", c.model.scale_embeddings, "Multiply token embeddings by sqrt(d_model) (the original Transformer); they are then initialized with std d_model^-0.5 instead of init_std.");
  v("model.scale_attention", c.model.scale_attention, "Scale attention scores by 1/sqrt(head_dim); false: plain q.k, as T5 (whose init folds the scale into the query weights).");
  v("model.scale_head", c.model.scale_head, "model.arch=transformer with model.tie_embeddings: multiply the decoder's output by d_model^-0.5 before the tied output projection, as T5; the embedding is then initialized with std 1 (T5's init) instead of init_std.");
  v("model.init_std", c.model.init_std, "Std of the normal weight init; residual projections use init_std / sqrt(2 * n_layers).");
  v("model.init_from", c.model.init_from, "A .safetensors file, or a Hugging Face model directory holding model.safetensors (GPT-2 or LLaMA names, or loom's; see `loom export`), whose weights a fresh run starts from instead of the random init; shapes must match the model.* keys. A resumed run uses its checkpoint.");
  v("model.moe.num_experts", c.model.moe.num_experts, "Mixture of Experts (model.arch=gpt): routed experts in each MoE block's MLP (models/moe.h); 0: every block dense.");
  v("model.moe.top_k", c.model.moe.top_k, "Experts each token is routed to.");
  v("model.moe.every", c.model.moe.every, "An MoE MLP in every Nth block from model.moe.first_dense on (1: all of them); the others keep the dense MLP.");
  v("model.moe.first_dense", c.model.moe.first_dense, "The first blocks keep a dense MLP of model.d_ff (DeepSeek's first_k_dense).");
  v("model.moe.d_ff", c.model.moe.d_ff, "Each expert's inner size (fine-grained experts); 0 means model.d_ff.");
  v("model.moe.shared_experts", c.model.moe.shared_experts, "Shared experts every token passes through besides its routed ones, computed as one MLP of model.moe.shared_d_ff.");
  v("model.moe.shared_d_ff", c.model.moe.shared_d_ff, "The shared MLP's inner size; 0 means shared_experts * the expert size.");
  v("model.moe.shared_gate", c.model.moe.shared_gate, "Scale the shared MLP's output by sigmoid(x . w_gate), one learned vector (Qwen2-MoE's shared_expert_gate).");
  v("model.moe.router", c.model.moe.router, "How the router's logits become each token's experts and weights.");
  v("model.moe.normalize", c.model.moe.normalize, "softmax_topk and sigmoid: divide each token's top-k weights by their sum (Qwen3's norm_topk_prob, DeepSeek-V3).");
  v("model.moe.aux_loss_coef", c.model.moe.aux_loss_coef, "Switch/GShard load-balancing loss per MoE block, coef * E * sum_e f_e * P_e (f_e: the share of routed slots that went to expert e, P_e: its mean router probability), added to the training loss; 0: off.");
  v("model.moe.z_loss_coef", c.model.moe.z_loss_coef, "Router z-loss per MoE block, coef * mean over tokens of logsumexp(logits)^2 (ST-MoE); 0: off.");
  v("model.moe.bias_update_rate", c.model.moe.bias_update_rate, "Auxiliary-loss-free balancing (DeepSeek-V3): each expert has a bias added to its score for selection only (never to the weights), moved after each step by rate * sign(mean load - its load); saved in checkpoints. 0: no bias.");
  v("model.moe.capacity_factor", c.model.moe.capacity_factor, "Each expert takes at most ceil(capacity_factor * tokens * top_k / num_experts) of a micro-batch's routed slots (first come first served, by token order); the rest are dropped (the token keeps its other experts and the residual) and counted in metrics.jsonl. 0: dropless.");
  v("model.num_labels", c.model.num_labels, "model.arch=bert: 0 pretrains by masked language modelling (BertForMaskedLM); N >= 2 fine-tunes a sequence classifier over N labels (BertForSequenceClassification: the [CLS] position's hidden through a tanh pooler and a linear classifier) on JSON Lines of {\"text\": ..., \"label\": ...} (and \"text_pair\" for pairs) in data.train and data.valid; model.init_from takes a pretrained BertForMaskedLM's weights (`loom export` of an MLM run), the pooler and classifier starting fresh.");

  v("data.train", c.data.train, "Training data: a directory made by `loom prepare` (its train split), or a token file (scripts/prepare_kjv.sh, `loom tokenize`); or a list of sources mixed by weight, `[{path: DIR_A, weight: 0.7}, {path: DIR_B, weight: 0.3}]` (each sequence comes from source i with probability weight_i / sum of weights, exactly so over any run of steps; metrics.jsonl counts tokens_by_source). model.arch=transformer: pair files, mixed by step (each step's whole token-based batch comes from one file, drawn by weight the same way). A single path is a source of weight 1.");
  v("data.valid", c.data.valid, "Validation data: a directory made by `loom prepare` (its valid split) or a token file; empty disables evaluation.");
  v("data.test", c.data.test, "Test token file, read only by `loom eval --split test`.");
  v("data.seq_len", c.data.seq_len, "Tokens per training sequence (windows of seq_len + 1).");
  v("data.document_mask", c.data.document_mask, "model.arch=gpt: a window of seq_len + 1 tokens crosses document boundaries (a prepared directory's document index gives them; a token file's documents end at tokenizer.model's EOS id). true: each token attends only to the earlier tokens of its own document and positions (learned, sinusoidal, RoPE) restart at each document, for training and evaluation, as if each document ran alone. false: a window is one sequence (no mask is built). Generation is unchanged either way: a prompt is one document.");
  v("data.whole_word_masking", c.data.whole_word_masking, "model.arch=bert pretraining: masked language modelling chooses whole words (every piece of a chosen word, as BERT's whole-word-masking models) until 15% of the window's tokens are chosen, instead of single tokens; words are told apart by tokenizer.model (a token continues a word when it decodes without a space after the one before it: SentencePiece pieces without \u2581, WordPiece's ## pieces, byte-level BPE tokens without a leading space).");
  v("data.synthetic", c.data.synthetic, "transformer: train on generated pairs instead of files.");
  v("data.synthetic_vocab", c.data.synthetic_vocab, "Vocabulary of the synthetic pairs (ids 0-2 are padding/unk, bos, eos; sequences use 3 .. vocab - 1).");
  v("data.synthetic_min_len", c.data.synthetic_min_len, "Shortest synthetic source sequence.");
  v("data.synthetic_max_len", c.data.synthetic_max_len, "Longest synthetic source sequence.");
  v("data.synthetic_valid_size", c.data.synthetic_valid_size, "Pairs in the fixed synthetic validation set.");
  v("data.pad_to_multiple", c.data.pad_to_multiple, "transformer: pad every pair batch's source and target length up to a multiple of this many positions (padding is masked and counts for nothing in the loss; 8 suits tensor cores). With parallel.sequence_parallel the batches are padded to lcm(this, parallel.tp); model.max_seq_len must be a multiple of that. 1: pad only to the longest pair.");
  v("data.span_corruption", c.data.span_corruption, "model.arch=transformer: pretrain by T5's span corruption: windows of data.seq_len tokens of data.train / data.valid (token files or prepared directories, as model.arch=gpt reads them; train.batch_size windows a step) become pairs: the source keeps the window with each noise span replaced by a sentinel, the target is each sentinel followed by its span. Spans are a pure function of (run.seed, step, window index). Sentinels are the top ids of model.vocab_size (T5's <extra_id_0> = vocab_size - 1, then down), which must be set to cover the tokenizer's vocabulary and them.");
  v("data.noise_density", c.data.noise_density, "data.span_corruption: the share of each window's tokens in noise spans (round(density x seq_len) of them; T5: 0.15).");
  v("data.mean_noise_span", c.data.mean_noise_span, "data.span_corruption: the mean length of a noise span (round(noise tokens / this) spans a window; T5: 3).");

  v("tokenizer.model", c.tokenizer.model, "The tokenizer the token files or prepared directories were made with (checked by checksum): a SentencePiece `.model`, a Hugging Face `tokenizer.json` (byte-level BPE) or a tiktoken rank file (`.tiktoken`); `loom prepare --train-tokenizer` writes DIR/tokenizer.model. See docs/data.md, Tokenizers.");
  v("tokenizer.type", c.tokenizer.type, "What kind of file tokenizer.model is.");
  v("tokenizer.pattern", c.tokenizer.pattern, "tiktoken files: the split regex, or a name: `gpt2`, `cl100k_base`, `o200k_base`, `llama3`. Required for a .tiktoken file (it carries none).");
  v("tokenizer.special_tokens", c.tokenizer.special_tokens, "tiktoken files: special tokens, a preset name (`gpt2`, `cl100k_base`, `o200k_base`, `llama3`) or a mapping of token text to id; empty: the preset of a named tokenizer.pattern.");

  v("optim.lr", c.optim.lr, "Peak learning rate (for inverse_sqrt: the scale of the Noam formula).");
  v("optim.betas", c.optim.betas, "AdamW betas [beta1, beta2].");
  v("optim.eps", c.optim.eps, "AdamW epsilon.");
  v("optim.weight_decay", c.optim.weight_decay, "Decoupled weight decay on matrices and embeddings (never on biases or norm gains).");
  v("optim.grad_clip", c.optim.grad_clip, "Global gradient-norm clipping threshold; 0 disables.");
  v("optim.label_smoothing", c.optim.label_smoothing, "Label smoothing of the cross-entropy loss.");

  v("schedule.name", c.schedule.name, "Learning-rate schedule.");
  v("schedule.warmup_steps", c.schedule.warmup_steps, "Linear warmup steps.");
  v("schedule.min_lr", c.schedule.min_lr, "Final learning rate of cosine, linear and wsd decay.");
  v("schedule.total_steps", c.schedule.total_steps, "Horizon of the decay; 0 means train.max_steps.");
  v("schedule.decay_fraction", c.schedule.decay_fraction, "wsd: fraction of total_steps spent decaying at the end.");

  v("train.max_steps", c.train.max_steps, "Optimizer steps to train for (raise it to extend a finished run).");
  v("train.batch_size", c.train.batch_size, "Global sequences per optimizer step.");
  v("train.batch_tokens", c.train.batch_tokens, "Encoder-decoder runs on pair files: padded source + target tokens per global batch, pairs of similar lengths batched together (data/pairs/pair_sampler.h), so the pairs per step vary; each DP rank splits its share into batch_size / (micro_batch_size * dp) micro-batches. 0: off (a `gpt` language model and the synthetic tasks batch train.batch_size sequences; evaluation always does).");
  v("train.micro_batch_size", c.train.micro_batch_size, "Sequences per forward/backward; batch_size / (micro_batch_size * dp) micro-batches are accumulated. 0: batch_size / dp.");
  v("train.log_every", c.train.log_every, "Steps between progress lines and metrics rows.");
  v("train.eval_every", c.train.eval_every, "Steps between validation passes; 0 evaluates only at the end.");
  v("train.eval_batches", c.train.eval_batches, "Batches of train.batch_size validation sequences per evaluation (consecutive windows of the validation file).");
  v("train.activation_checkpointing", c.train.activation_checkpointing, "Recompute activations in backward instead of keeping them: same gradients, less memory, one more forward.");
  v("train.loss_chunk_tokens", c.train.loss_chunk_tokens, "Language models: the LM head and cross-entropy run fused, this many tokens at a time, each chunk's logit gradient computed in the same pass, so the (tokens x vocabulary) logits and their fp32 copies are never held whole (less memory, no extra pass). 0: the plain path (full logits, then cross-entropy), which tensor-parallel and pipeline runs always take. Same loss and gradients either way.");

  v("train.max_bad_steps", c.train.max_bad_steps, "A step whose loss or gradients hold inf/nan is skipped (no update; the step count, data and learning rate move on) and counted in metrics.jsonl (skipped_steps); this many such steps in a row stop the run with the step, rank and what was non-finite. 0: never stop.");

  v("decode.beam", c.decode.beam, "Beam size for translation (1: greedy); `loom translate --beam` overrides it.");
  v("decode.length_penalty", c.decode.length_penalty, "Beam search ranks finished hypotheses by log-probability / length^length_penalty (0: raw log-probability).");
  v("decode.max_len_a", c.decode.max_len_a, "Translations end after at most max_len_a * source length + max_len_b tokens.");
  v("decode.max_len_b", c.decode.max_len_b, "See decode.max_len_a.");
  v("decode.batch_size", c.decode.batch_size, "Source sentences decoded together.");

  v("precision.dtype", c.precision.dtype, "Compute precision; fp32 master weights and optimizer state either way.");
  v("precision.param_dtype", c.precision.param_dtype, "Dtype of the model's weights while training. bf16 (Megatron's --bf16): forward and backward run on bf16 weights (autocast still keeps softmax, norm statistics and the loss in fp32), the optimizer keeps an fp32 master copy and fp32 AdamW state, gradients are accumulated over micro-batches and reduced across DP ranks in fp32, clipped and checked in fp32, and the bf16 weights are refreshed from the master after each step. Checkpoints hold the fp32 master, so they load with either setting.");
  v("precision.loss_scale_init", c.precision.loss_scale_init, "fp16: initial loss scale.");
  v("precision.loss_scale_growth_interval", c.precision.loss_scale_growth_interval, "fp16: finite steps in a row after which the loss scale grows.");
  v("precision.loss_scale_growth", c.precision.loss_scale_growth, "fp16: factor the loss scale grows by.");
  v("precision.loss_scale_backoff", c.precision.loss_scale_backoff, "fp16: factor the loss scale shrinks by when gradients overflow (the step is skipped).");

  v("parallel.dp", c.parallel.dp, "Data-parallel size; -1 means world / (cp * tp * pp).");
  v("parallel.tp", c.parallel.tp, "Tensor-parallel size.");
  v("parallel.cp", c.parallel.cp, "Context-parallel size (model.arch=gpt): each rank holds 1/cp of every sequence, cut into 2 * cp chunks of which rank r holds chunks r and 2 * cp - 1 - r (equal causal work); attention is ring attention over the cp group (key/value blocks passed round, merged by log-sum-exp), everything else works on the local tokens, and gradients are averaged over dp x cp (ZeRO shards over dp x cp). data.seq_len must be a multiple of 2 * cp. Dropout: every CP rank draws its own masks (seeds by CP rank, all saved in checkpoints); attention-probability masks are a hash of the pair's global positions, regenerated in backward.");
  v("parallel.pp", c.parallel.pp, "Pipeline-parallel size: the model's embedding -> blocks -> head split into this many stages (embedding on the first, final norm, head and loss on the last); the encoder-decoder's blocks are its encoder blocks then its decoder blocks.");
  v("parallel.pp_layers", c.parallel.pp_layers, "Blocks per pipeline stage, e.g. [3, 5] (parallel.pp numbers summing to model.n_layers, for model.arch=transformer to model.n_encoder_layers + model.n_layers); empty: balanced, earlier stages taking the remainder.");
  v("parallel.microbatches", c.parallel.microbatches, "Micro-batches per step and DP rank, pipelined through the stages (they are the gradient-accumulation micro-batches: sets train.micro_batch_size = batch_size / (dp * microbatches)); 0: as train.micro_batch_size says.");
  v("parallel.pp_schedule", c.parallel.pp_schedule, "Pipeline schedule.");
  v("parallel.bucket_mb", c.parallel.bucket_mb, "Size of the flat buckets in which data-parallel gradients are all-reduced, overlapping backward.");
  v("parallel.ep", c.parallel.ep, "Expert-parallel size (a Mixture-of-Experts model): the ranks of dp x cp split into groups of ep consecutive ranks, cp innermost (Megatron's folding: an ep group holds whole cp groups and ep / cp DP ranks, or lies inside one cp group), each rank of a group keeping model.moe.num_experts / ep of every MoE layer's experts (the stacked experts' local rows). Each rank routes its own tokens (the router is replicated), the (token, expert) slots go to the rank owning their expert and back by two variable all-to-alls (counts, then rows; dropless), and the expert parameters' gradients are averaged over the dp x cp / ep ranks holding the same experts (ZeRO-1/2/3 shard them over those). With parallel.tp each TP rank dispatches the group's replicated tokens in its own ep group (experts whole on every TP rank); with parallel.pp each stage splits its own MoE layers' experts. Must divide parallel.dp x parallel.cp and model.moe.num_experts, be a multiple or a divisor of parallel.cp, and ep / cp must divide parallel.shard_size. Checkpoints store each expert tensor whole by name: they resume under any ep.");
  v("parallel.zero", c.parallel.zero, "ZeRO stage: what the DP ranks (times cp) shard between them; every model.arch, with parallel.tp and parallel.pp (each pipeline stage shards its own).");
  v("parallel.shard_size", c.parallel.shard_size, "Hybrid sharding (HSDP; parallel.zero 1, 2 or 3): ZeRO shards over groups of this many DP ranks (times cp) and replicates across the dp / shard_size groups: gradients are reduce-scattered inside a group, each shard's gradient is then all-reduced over the ranks holding the same shard, and parameters are all-gathered inside the group; memory per rank is that of ZeRO at dp = shard_size, the collectives stay within the group but the replicas' all-reduce of 1/shard_size of the gradients. Must divide parallel.dp. 0: the whole DP group.");
  v("parallel.reshard_after_forward", c.parallel.reshard_after_forward, "parallel.zero 3: free each block's gathered parameters after its forward and gather them again for its backward; false keeps every block gathered from its first forward to the end of the step (ZeRO-2's memory for the parameters, one all-gather per block and step).");
  v("parallel.sequence_parallel", c.parallel.sequence_parallel, "With tp > 1 (training and evaluation; generation loads the model whole): norms, dropout and residuals work on this rank's 1/tp of the positions (all-gather before column-parallel layers, reduce-scatter after row-parallel ones) instead of all of them. model.arch=gpt: data.seq_len must be a multiple of tp. model.arch=transformer: both stacks and the encoder output (memory) are split so, cross-attention gathers the memory; pair batches are padded to multiples of tp (data.pad_to_multiple) and model.max_seq_len must be a multiple of tp.");
  v("parallel.timeout_s", c.parallel.timeout_s, "A collective that waits longer than this for a failed or stalled rank ends the whole job.");

  v("checkpoint.every", c.checkpoint.every, "Steps between checkpoints (one is always written at the end); 0: only at the end.");
  v("checkpoint.keep", c.checkpoint.keep, "Newest checkpoints kept on disk.");

  v("runtime.threads", c.runtime.threads, "CPU threads for this rank; 0 means all cores (divided among local ranks).");
  v("runtime.device", c.runtime.device, "The device a rank computes on.");
  v("runtime.cpu_allocator", c.runtime.cpu_allocator, "CPU tensor memory.");
  v("runtime.deterministic", c.runtime.deterministic,
    "Only deterministic kernels (torch.use_deterministic_algorithms(True) and cuBLAS's fixed workspace): a GPU "
    "run then repeats bit for bit, exact resume included; an operator without a deterministic kernel stops the "
    "run, naming it. CPU runs repeat bit for bit without it.");
}

}  // namespace loom
