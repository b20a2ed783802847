#include "models/moe.h"

#include "core/error.h"
#include "models/few_rows_linear.h"
#include "models/gelu.h"
#include "models/moe_dispatch.h"
#include "models/moe_router.h"
#include "models/recompute.h"
#include "parallel/tensor_parallel.h"

namespace loom {
namespace {

// Identity on the layer's output whose backward adds weight x d(aux)/d(router) (Megatron's
// MoEAuxLossAutoScaler): the aux losses reach backward from any pipeline stage, weighted as the
// micro-batch's loss is.
class MoeAuxLossScaler : public torch::autograd::Function<MoeAuxLossScaler> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& output,
                               const torch::Tensor& aux, double weight) {
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["aux_options"] = aux.detach();  // the scalar's dtype and device
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto aux = ctx->saved_data["aux_options"].toTensor();
    const double weight = ctx->saved_data["weight"].toDouble();
    return {grad_outputs[0], torch::full_like(aux, weight), torch::Tensor()};
  }
};

torch::Tensor moe_activate(Activation activation, const torch::Tensor& x) {
  switch (activation) {
    case Activation::kGelu:
    case Activation::kGeglu: return gelu_tanh(x);
    case Activation::kRelu: return torch::relu(x);
    case Activation::kSwiglu: return torch::silu(x);
    case Activation::kGeluErf: return torch::gelu(x);
  }
  throw Error("unreachable activation");
}

bool moe_gated(Activation a) { return a == Activation::kSwiglu || a == Activation::kGeglu; }

bool moe_replay_enabled = true;
bool moe_overlap_enabled = true;

// What a checkpointed MoE layer's first run keeps for its re-run (models/recompute.h's stash).
struct MoeReplay {
  DispatchReplay dispatch;
  torch::Tensor whole_counts;  // context parallelism: the load and token count summed over the cp group
  torch::Tensor whole_keep;    // context parallelism with a capacity: the slots kept over the whole sequences
};

}  // namespace

MoeOptions moe_options(const ModelConfig& c) {
  MoeOptions o;
  const MoeConfig& e = c.moe;
  o.d_model = c.d_model;
  o.num_experts = e.num_experts;
  o.top_k = e.top_k;
  o.d_ff = c.expert_dim();
  o.shared_d_ff = e.shared_experts > 0 ? c.shared_expert_dim() : 0;
  o.shared_gate = e.shared_gate;
  o.activation = c.activation;
  o.router = e.router;
  o.normalize = e.normalize;
  o.aux_loss_coef = e.aux_loss_coef;
  o.z_loss_coef = e.z_loss_coef;
  o.expert_bias = e.bias_update_rate > 0;
  o.capacity_factor = e.capacity_factor;
  o.init_std = c.init_std;
  return o;
}

MoeExpertsImpl::MoeExpertsImpl(int64_t E, int64_t C, int64_t F, Activation activation, double init_std,
                               double out_init_std)
    : num_experts_(E), activation_(activation) {
  torch::NoGradGuard no_grad;
  if (moe_gated(activation)) gate = register_parameter("gate", torch::empty({E, F, C}).normal_(0.0, init_std));
  up = register_parameter("up", torch::empty({E, F, C}).normal_(0.0, init_std));
  down = register_parameter("down", torch::empty({E, C, F}).normal_(0.0, out_init_std));
}

void MoeExpertsImpl::keep_local_experts(Communicator& ep) {
  LOOM_CHECK(ep_ == nullptr && num_experts_ % ep.size() == 0, "an MoE layer's ", num_experts_,
             " experts split once over an ep group dividing them, not over ", ep.size());
  const int64_t local = num_experts_ / ep.size();
  first_expert_ = ep.rank() * local;
  // The whole layer was initialised first (the single process's values): the local rows are its.
  torch::NoGradGuard no_grad;
  for (auto* t : {&gate, &up, &down})
    if (t->defined()) t->set_data(t->narrow(0, first_expert_, local).clone());
  ep_ = ep.size() > 1 ? &ep : nullptr;
}

torch::Tensor MoeExpertsImpl::expert(int64_t e, const torch::Tensor& x) {
  return expert_of(gate.defined() ? gate[e] : torch::Tensor(), up[e], down[e], x);
}

torch::Tensor MoeExpertsImpl::expert_of(const torch::Tensor& g, const torch::Tensor& u, const torch::Tensor& d,
                                        const torch::Tensor& x) const {
  auto h = linear_forward(x, u);
  h = g.defined() ? moe_activate(activation_, linear_forward(x, g)) * h : moe_activate(activation_, h);
  return linear_forward(h, d);
}

torch::Tensor MoeExpertsImpl::grouped(const torch::Tensor& rows, const std::vector<int64_t>& counts) {
  // Each expert's matrices as views of one unbind: backward stacks their gradients into the (E, ...) one
  // once (indexing each would write a whole-size zero gradient per expert).
  const auto gates = gate.defined() ? gate.unbind(0) : std::vector<torch::Tensor>();
  const auto ups = up.unbind(0), downs = down.unbind(0);
  std::vector<torch::Tensor> outputs;
  int64_t offset = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    outputs.push_back(expert_of(gates.empty() ? torch::Tensor() : gates[e], ups[e], downs[e],
                                rows.narrow(0, offset, counts[e])));
    offset += counts[e];
  }
  if (!outputs.empty()) return torch::cat(outputs);
  // No rows for any of this rank's experts (expert parallelism: the group routed none here): no rows out. The
  // experts get no gradient in this backward; the gradient sync reduces zeros for them in step with the ranks
  // whose experts computed (ShardedParameters::sparse, parallel/gradient_sync.h). The output still needs a
  // gradient wherever the experts' would have (through the rows, or else a leaf of its own), so that backward's
  // combine exchange runs here as on those ranks.
  auto none = rows * 0;
  if (torch::GradMode::is_enabled() && up.requires_grad() && !none.requires_grad())
    none = none + torch::zeros({}, rows.options()).requires_grad_(true);
  return none;
}

torch::Tensor MoeExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& experts,
                                      const torch::Tensor& weights, const torch::Tensor& keep,
                                      const WhileExchanging& overlap, DispatchReplay* replay) {
  const int64_t N = x.size(0), k = experts.size(1), E = num_experts_;
  auto slot_expert = experts.reshape(-1);
  auto slot_token = torch::arange(N, experts.options()).unsqueeze(1).expand({N, k}).reshape(-1);
  auto slot_weight = weights.reshape(-1);
  if (keep.defined()) {
    const auto kept = keep.reshape(-1).nonzero().squeeze(1);
    slot_expert = slot_expert.index_select(0, kept);
    slot_token = slot_token.index_select(0, kept);
    slot_weight = slot_weight.index_select(0, kept);
  }
  // Slots sorted by expert (stable: each expert's rows in token order), each expert's rows one block.
  const auto order = std::get<1>(slot_expert.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  const auto tokens = slot_token.index_select(0, order);
  const auto counts = torch::bincount(slot_expert, {}, E).cpu();
  const auto rows = x.index_select(0, tokens);
  auto out = torch::zeros_like(x);
  torch::Tensor computed;
  if (ep_ != nullptr) {
    // Every rank of the group takes part, whatever it routed.
    computed = dispatch_to_experts(
        rows, counts, *ep_, [this](const torch::Tensor& r, const std::vector<int64_t>& c) { return grouped(r, c); },
        overlap, replay);
  } else {
    // Without ep some expert always gets a row (a capacity of at least 1 keeps each routed expert's first slot).
    computed = grouped(rows, std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + E));
  }
  const auto weighted = computed * slot_weight.index_select(0, order).unsqueeze(1).to(x.dtype());
  return out.index_add(0, tokens, weighted);
}

MoeImpl::MoeImpl(const MoeOptions& o) : options_(o) {
  LOOM_CHECK(o.num_experts > 0 && o.top_k >= 1 && o.top_k <= o.num_experts, "an MoE layer needs 1 <= top_k <= experts");
  router_ = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(o.d_model, o.num_experts).bias(false)));
  {
    torch::NoGradGuard no_grad;
    router_->weight.normal_(0.0, o.init_std);
  }
  experts_ = register_module("experts", MoeExperts(o.num_experts, o.d_model, o.d_ff, o.activation, o.init_std,
                                                   o.out_init_std));
  if (o.shared_d_ff > 0) {
    MlpOptions shared;
    shared.d_model = o.d_model;
    shared.d_ff = o.shared_d_ff;
    shared.activation = o.activation;
    shared.bias = false;
    shared.init_std = o.init_std;
    shared.out_init_std = o.out_init_std;
    shared_ = register_module("shared", Mlp(shared));
    if (o.shared_gate) {
      torch::NoGradGuard no_grad;
      shared_gate_ = register_parameter("shared_gate", torch::empty({1, o.d_model}).normal_(0.0, o.init_std));
    }
  }
  if (o.expert_bias) expert_bias_ = register_buffer("expert_bias", torch::zeros({o.num_experts}));
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  if (options_.sequence_group != nullptr && options_.sequence_group->size() > 1) {
    // Sequence parallelism: the whole sequence on every rank of the group, as under TP alone; each keeps its part.
    Communicator& group = *options_.sequence_group;
    return scatter_to_sequence(routed(replicate_sequence(x, group)), group);
  }
  return routed(x);
}

torch::Tensor MoeImpl::routed(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const int64_t C = shape.back();
  const auto flat = x.reshape({-1, C});
  const int64_t N = flat.size(0), E = options_.num_experts, k = options_.top_k;
  const auto logits = router_->forward(flat).to(torch::kFloat);  // routing in fp32 under autocast too
  Routing r = route(logits, options_.router, k, options_.normalize, expert_bias_);
  // A checkpointed layer's first run records its exchanges, the re-run in backward replays them.
  std::shared_ptr<MoeReplay> replay;
  if (auto* stash = recompute_stash(); stash != nullptr && moe_replay_enabled && is_training()) {
    auto& entry = stash->entry(this);
    if (!recomputing()) {
      entry = replay = std::make_shared<MoeReplay>();
    } else if (entry) {
      replay = std::static_pointer_cast<MoeReplay>(entry);
      replay->dispatch.mode = DispatchReplay::Mode::kReplay;
    }
  }
  const bool replaying = replay && replay->dispatch.mode == DispatchReplay::Mode::kReplay;
  torch::Tensor keep;
  if (options_.capacity_factor > 0 && splits_sequences()) {
    // Context parallelism: one all-gather of the group's choices (a re-run takes its first run's keep).
    keep = replaying && replay->whole_keep.defined()
               ? replay->whole_keep
               : capacity_keep_over_sequences(r.experts, shape[0], E, options_.capacity_factor, *options_.token_group);
    if (replay) replay->whole_keep = keep;
  } else if (options_.capacity_factor > 0) {
    keep = capacity_keep(r.experts, E, expert_capacity(options_.capacity_factor, N, k, E));
  }
  torch::Tensor out;
  if (shared_ && experts_->exchanges() && moe_overlap_enabled) {
    // The shared MLP in two halves of the tokens, each computed while a half of the exchange is in flight.
    const int64_t half = N / 2;
    torch::Tensor shared_parts[2];
    auto overlap = [&](int phase) {
      const auto part = phase == 0 ? flat.narrow(0, 0, half) : flat.narrow(0, half, N - half);
      shared_parts[phase] = shared_expert(part);
    };
    out = experts_->forward(flat, r.experts, r.weights, keep, overlap, replay ? &replay->dispatch : nullptr);
    out = out + torch::cat({shared_parts[0], shared_parts[1]});
  } else {
    out = experts_->forward(flat, r.experts, r.weights, keep, {}, replay ? &replay->dispatch : nullptr);
    if (shared_) out = out + shared_expert(flat);
  }
  if (is_training()) {
    const bool grads = torch::GradMode::is_enabled() && (options_.aux_loss_coef > 0 || options_.z_loss_coef > 0);
    torch::Tensor balance, z, load;
    {
      torch::NoGradGuard no_grad;
      load = expert_load(r.experts, E).to(torch::kDouble);
    }
    // Context parallelism: the load and the token count of the whole sequences (this rank's part of the
    // losses; models/moe_router.h). One small all-reduce per layer and micro-batch (a re-run takes its first run's).
    torch::Tensor tokens, whole_load = load;  // tokens undefined: this rank's are all
    if (splits_sequences()) {
      torch::NoGradGuard no_grad;
      torch::Tensor counts;
      if (replaying && replay->whole_counts.defined()) {
        counts = replay->whole_counts;
      } else {
        counts = torch::cat({load, torch::full({1}, static_cast<double>(N), load.options())});
        options_.token_group->all_reduce(counts);
        if (replay) replay->whole_counts = counts;
      }
      whole_load = counts.narrow(0, 0, E);
      tokens = counts[E];
    }
    {
      torch::AutoGradMode mode(grads && options_.aux_loss_coef > 0);
      balance = tokens.defined() ? load_balancing_loss(r.probs, whole_load, tokens, k) : load_balancing_loss(r.probs, r.experts);
    }
    {
      torch::AutoGradMode mode(grads && options_.z_loss_coef > 0);
      z = tokens.defined() ? router_z_loss(logits, tokens) : router_z_loss(logits);
    }
    if (grads) {
      const auto aux = balance * options_.aux_loss_coef + z * options_.z_loss_coef;
      out = MoeAuxLossScaler::apply(out, aux, aux_loss_weight_);
    }
    if (!recomputing()) {
      torch::NoGradGuard no_grad;
      const auto dropped = keep.defined() ? (~keep).sum().to(torch::kDouble) : torch::zeros({}, load.options());
      const auto sums = torch::stack({balance.detach().to(torch::kDouble), z.detach().to(torch::kDouble), dropped});
      load_sum_ = load_sum_.defined() ? load_sum_ + load : load;
      scalar_sums_ = scalar_sums_.defined() ? scalar_sums_ + sums : sums;
      micro_batches_ += 1;
    }
  }
  return out.reshape(shape);
}

MoeStepStats MoeImpl::take_stats() {
  MoeStepStats out;
  out.micro_batches = micro_batches_;
  out.load = load_sum_.defined() ? load_sum_.cpu() : torch::zeros({options_.num_experts}, torch::kDouble);
  if (scalar_sums_.defined()) {
    const auto sums = scalar_sums_.cpu();
    out.aux_loss = sums[0].item<double>();
    out.z_loss = sums[1].item<double>();
    out.dropped = static_cast<int64_t>(sums[2].item<double>());
  }
  load_sum_ = scalar_sums_ = torch::Tensor();
  micro_batches_ = 0;
  return out;
}

std::vector<MoeImpl*> moe_layers(torch::nn::Module& model) {
  std::vector<MoeImpl*> out;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (auto* moe = dynamic_cast<MoeImpl*>(m.get())) out.push_back(moe);
  return out;
}

bool is_expert_parameter(const std::string& name) {
  return name.rfind("experts.", 0) == 0 || name.find(".experts.") != std::string::npos;
}

void keep_local_experts(torch::nn::Module& model, Communicator& ep) {
  for (auto* moe : moe_layers(model)) moe->experts()->keep_local_experts(ep);
}

std::map<const void*, ExpertPlacement> expert_placements(torch::nn::Module& model) {
  std::map<const void*, ExpertPlacement> out;
  for (auto* moe : moe_layers(model)) {
    auto& experts = *moe->experts();
    for (const auto& t : {experts.gate, experts.up, experts.down}) {
      if (!t.defined()) continue;
      ExpertPlacement p;
      p.shape = t.sizes().vec();
      p.shape[0] = experts.num_experts();
      p.offset = experts.first_expert() * (t.numel() / std::max<int64_t>(t.size(0), 1));
      out[t.unsafeGetTensorImpl()] = p;
    }
  }
  return out;
}

void set_moe_recompute_replay(bool replay) { moe_replay_enabled = replay; }
void set_moe_shared_overlap(bool overlap) { moe_overlap_enabled = overlap; }

torch::Tensor MoeImpl::shared_expert(const torch::Tensor& x) {
  auto shared = shared_->forward(x);
  if (shared_gate_.defined()) shared = torch::sigmoid(linear_forward(x, shared_gate_)) * shared;
  return shared;
}

void set_moe_aux_loss_weight(torch::nn::Module& model, double weight) {
  for (auto* moe : moe_layers(model)) moe->set_aux_loss_weight(weight);
}

}  // namespace loom
