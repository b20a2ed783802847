// FusedAdamW (what make_adamw builds): the same parameters and moments as LibTorch's AdamW step by step
// on a real model with two weight-decay groups and a changing learning rate, and state that survives the
// optimizer's save/load (checkpoints) so a restored optimizer continues identically.
#include "models/gpt.h"
#include "optim/fused_adamw.h"
#include "optim/optimizer.h"
#include "test_util.h"

using loom::test::max_abs_diff;

namespace {

loom::Gpt small_model() {
  const auto c = loom::test::small_gpt_config(/*vocab_size=*/50, /*d_model=*/32, /*n_layers=*/2, /*n_heads=*/2,
                                              /*max_seq_len=*/8);
  torch::manual_seed(5);
  return loom::Gpt(c);
}

void set_random_grads(loom::Gpt& model, int64_t step) {
  torch::manual_seed(100 + step);
  for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
}

}  // namespace

TEST_CASE("fused adamw: steps equal torch::optim::AdamW and its state round-trips", "[losses]") {
  auto fused_model = small_model(), plain_model = small_model();
  loom::OptimConfig config;
  config.lr = 1e-2;
  auto fused = loom::make_adamw(*fused_model, config);
  REQUIRE(dynamic_cast<loom::FusedAdamW*>(fused.get()) != nullptr);
  auto groups = loom::weight_decay_groups(*plain_model);
  std::vector<torch::optim::OptimizerParamGroup> plain_groups;
  for (size_t g = 0; g < groups.size(); ++g)
    plain_groups.emplace_back(groups[g], std::make_unique<torch::optim::AdamWOptions>(
                                             torch::optim::AdamWOptions(config.lr)
                                                 .betas({config.betas[0], config.betas[1]})
                                                 .eps(config.eps)
                                                 .weight_decay(g == 0 ? config.weight_decay : 0.0)));
  torch::optim::AdamW plain(std::move(plain_groups));

  auto run_steps = [&](torch::optim::Optimizer& a, torch::optim::Optimizer& b, int64_t first, int64_t last) {
    for (int64_t step = first; step < last; ++step) {
      const double lr = 1e-2 * (1.0 - 0.1 * static_cast<double>(step));
      loom::set_learning_rate(a, lr);
      loom::set_learning_rate(b, lr);
      set_random_grads(fused_model, step);
      set_random_grads(plain_model, step);
      a.step();
      b.step();
      const auto fp = fused_model->parameters(), pp = plain_model->parameters();
      for (size_t i = 0; i < fp.size(); ++i) {
        INFO("step " << step << " parameter " << i);
        CHECK(max_abs_diff(fp[i], pp[i]) <= 1e-6);
      }
    }
  };
  run_steps(*fused, plain, 0, 4);

  // The state is LibTorch AdamW's own (step count, both moments), so save/load restores it.
  torch::serialize::OutputArchive saved;
  fused->save(saved);
  std::stringstream bytes;
  saved.save_to(bytes);
  auto restored = loom::make_adamw(*fused_model, config);
  torch::serialize::InputArchive loaded;
  loaded.load_from(bytes);
  restored->load(loaded);
  loom::apply_group_options(*restored, config);
  const auto& state = restored->state();
  REQUIRE(state.size() == fused_model->parameters().size());
  for (const auto& [key, value] : state) CHECK(static_cast<torch::optim::AdamWParamState&>(*value).step() == 4);
  run_steps(*restored, plain, 4, 8);
}
