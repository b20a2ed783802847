// GradientSync's ZeRO stages (parallel/gradient_sync.h) against plain autograd, written for any world size:
// ctest runs them in one process (the group of one) and under `mpirun -np 2` and `-np 4` (the [mpi] suite).
// Each rank runs two micro-batches of its own inputs; every rank can compute every rank's inputs, so the
// reference is one model accumulating all of them, averaged over the ranks. What each rank's optimizer
// sees (its shard, ParameterSlice by ParameterSlice) must be that average's part, also under hybrid sharding
// (shards over half the ranks, all-reduced over the replicas).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "optim/optimizer.h"
#include "parallel/gradient_sync.h"
#include "test_util.h"

using namespace loom;
using loom::test::max_abs_diff;
using loom::test::one_entry;
using loom::test::zero_stage;

namespace {

struct ThreeLayer : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  ThreeLayer() {
    a = register_module("a", torch::nn::Linear(8, 16));
    b = register_module("b", torch::nn::Linear(16, 16));
    c = register_module("c", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return c(torch::tanh(b(torch::tanh(a(x))))); }
};

constexpr int kMicroBatches = 2;

torch::Tensor input_of(int rank, int step, int micro) {
  torch::manual_seed(1000 + 100 * step + 10 * rank + micro);
  return torch::randn({3, 8});
}

torch::Tensor loss_of(ThreeLayer& model, const torch::Tensor& x) { return model.forward(x).pow(2).mean(); }

// The same initial weights every time: a model and its reference.
ThreeLayer seeded_three_layer() {
  torch::manual_seed(5);
  return ThreeLayer();
}

// The reference's gradients of a step: every rank's micro-batches accumulated into one model.
void reference_backward(ThreeLayer& reference, int ranks, int step) {
  for (auto& p : reference.parameters()) p.mutable_grad() = torch::Tensor();
  for (int k = 0; k < ranks; ++k)
    for (int m = 0; m < kMicroBatches; ++m) loss_of(reference, input_of(k, step, m)).backward();
}

// The index of `t` among `params` (by identity).
size_t index_of(const std::vector<torch::Tensor>& params, const torch::Tensor& t) {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return i;
  FAIL("not a parameter of the model");
  return 0;
}

// A communicator that counts the all-reduces started on it and hands everything to `inner`.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  int all_reduces_started() const { return all_reduces_; }
  int all_gathers_started() const { return all_gathers_; }
  int most_all_gathers_in_flight() const { return most_gathers_in_flight_; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  std::shared_ptr<Work> all_reduce_async(torch::Tensor t, ReduceOp op) override {
    ++all_reduces_;
    return inner_.all_reduce_async(t, op);
  }
  // An all-gather is in flight from its start until its wait() returns.
  std::shared_ptr<Work> all_gather_async(torch::Tensor in, torch::Tensor out) override {
    ++all_gathers_;
    most_gathers_in_flight_ = std::max(most_gathers_in_flight_, ++gathers_in_flight_);
    return std::make_shared<CountedWork>(inner_.all_gather_async(in, out), gathers_in_flight_);
  }
  std::shared_ptr<Work> reduce_scatter_async(torch::Tensor in, torch::Tensor out) override {
    return inner_.reduce_scatter_async(in, out);
  }
  std::shared_ptr<Work> broadcast_async(torch::Tensor t, int root) override { return inner_.broadcast_async(t, root); }
  std::shared_ptr<Work> send_async(torch::Tensor t, int peer, int tag) override { return inner_.send_async(t, peer, tag); }
  std::shared_ptr<Work> recv_async(torch::Tensor t, int peer, int tag) override { return inner_.recv_async(t, peer, tag); }
  std::shared_ptr<Work> barrier_async() override { return inner_.barrier_async(); }
  std::shared_ptr<Work> all_to_all_async(torch::Tensor in, torch::Tensor out, std::vector<int64_t> send,
                                         std::vector<int64_t> recv) override {
    return inner_.all_to_all_async(in, out, std::move(send), std::move(recv));
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return inner_.split(color, key, name);
  }

 private:
  class CountedWork : public Work {
   public:
    CountedWork(std::shared_ptr<Work> inner, int& in_flight) : inner_(std::move(inner)), in_flight_(in_flight) {}
    void wait() override {
      inner_->wait();
      if (!waited_) --in_flight_;
      waited_ = true;
    }

   private:
    std::shared_ptr<Work> inner_;
    int& in_flight_;
    bool waited_ = false;
  };
  Communicator& inner_;
  int all_reduces_ = 0, all_gathers_ = 0, gathers_in_flight_ = 0, most_gathers_in_flight_ = 0;
};

}  // namespace

TEST_CASE("gradient sync: ZeRO-1 and ZeRO-2 shards hold the DP average of accumulated gradients", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  // Hybrid sharding (an even world): shards over groups of half the ranks, ranks r and r + ranks / 2 replicas
  // of each other (as the mesh's dp_shard and dp_replicate axes order them).
  std::unique_ptr<Communicator> hybrid_shards, replicas;
  if (ranks % 2 == 0) {
    hybrid_shards = comm->split(rank / (ranks / 2), rank % (ranks / 2), "shard group");
    replicas = comm->split(rank % (ranks / 2), rank / (ranks / 2), "replica group");
  }
  for (const bool hybrid : {false, true}) {
    if (hybrid && !replicas) continue;
    Communicator& shard_group = hybrid ? *hybrid_shards : *comm;
    for (const int64_t zero : {1, 2}) {
      for (const bool defer_first : {false, true}) {
        INFO("zero " << zero << ", first parameter deferred " << defer_first << ", hybrid sharding " << hybrid);
        ThreeLayer model = seeded_three_layer(), reference = seeded_three_layer();
        const auto params = model.parameters(), reference_params = reference.parameters();
        // Buckets of ~200 bytes: one per weight matrix, so more reductions than kReductionsInFlight.
        std::vector<torch::Tensor> deferred;
        if (defer_first) deferred.push_back(params.front());
        std::optional<CountingCommunicator> counted_replicas;
        if (hybrid) counted_replicas.emplace(*replicas);
        GradientSync sync(one_entry(weight_decay_groups(model), shard_group, hybrid ? &*counted_replicas : nullptr),
                          zero_stage(zero, 0.0002, torch::kFloat, deferred));
        REQUIRE(sync.bucket_count() > loom::kReductionsInFlight);
        for (int step = 0; step < 2; ++step) {
          INFO("step " << step);
          reference_backward(reference, ranks, step);

          sync.zero_grad();
          for (int m = 0; m < kMicroBatches; ++m) {
            if (m == kMicroBatches - 1 && !defer_first) sync.prepare_last_backward();
            loss_of(model, input_of(rank, step, m)).backward();
          }
          // A deferred parameter's gradient is completed after backward, and the sync started after that (as
          // the pipeline runner does for a tied embedding's copies): every rank adds 1, the average gains 1.
          if (defer_first) {
            REQUIRE(params.front().grad().defined());
            params.front().grad().add_(1.0);
            sync.prepare_last_backward();
          }
          // Hybrid ZeRO-2: a bucket's all-reduce over the replicas starts as its last reduce-scatter is waited
          // for in the last backward: all but the kReductionsInFlight still in flight (none before a deferred
          // parameter's late sync, and none at ZeRO-1, whose reduce-scatters are waited for in finish()).
          const int started = hybrid ? counted_replicas->all_reduces_started() : 0;
          const int buckets = static_cast<int>(sync.bucket_count());
          if (hybrid)
            CHECK(started - step * buckets ==
                  (zero == 2 && !defer_first ? buckets - static_cast<int>(loom::kReductionsInFlight) : 0));
          sync.finish();
          if (hybrid) CHECK(counted_replicas->all_reduces_started() == (step + 1) * buckets);

          const auto shards = sync.optimizer_parameters();
          const auto slices = sync.optimizer_slices();
          REQUIRE(shards.size() == slices.size());
          int64_t held = 0;
          for (size_t i = 0; i < shards.size(); ++i) {
            for (const auto& slice : slices[i]) {
              const size_t p = index_of(params, slice.parameter);
              auto expected = reference_params[p].grad().reshape(-1).narrow(0, slice.parameter_offset, slice.length) /
                              static_cast<double>(ranks);
              if (defer_first && p == 0) expected = expected + 1.0;
              const auto got = shards[i].grad().narrow(0, slice.offset, slice.length);
              CHECK(max_abs_diff(got, expected) <= 1e-6 * (1.0 + expected.abs().max().item<double>()));
              held += slice.length;
            }
          }
          // The shard group's shards partition every parameter.
          auto total = torch::tensor({static_cast<double>(held)}, torch::kDouble);
          shard_group.all_reduce(total);
          int64_t numel = 0;
          for (const auto& p : params) numel += p.numel();
          CHECK(total.item<double>() == static_cast<double>(numel));
          // ZeRO-2 keeps no parameter's whole gradient once reduced; ZeRO-1 keeps its buckets.
          for (const auto& p : params) CHECK(p.grad().defined() == (zero == 1));
        }
      }
    }
  }
}

TEST_CASE("gradient sync: ZeRO-2 partitions the optimizer state as ZeRO-1 does", "[mpi]") {
  // The same shards, so a checkpoint's optimizer state moves between the two stages unchanged.
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  torch::manual_seed(5);
  ThreeLayer model;
  std::vector<std::vector<std::tuple<int64_t, int64_t, int64_t>>> layouts;
  for (const int64_t zero : {1, 2}) {
    GradientSync sync(one_entry(weight_decay_groups(model), *comm), zero_stage(zero, 0.001));
    layouts.emplace_back();
    for (const auto& tensor : sync.optimizer_slices())
      for (const auto& s : tensor) layouts.back().emplace_back(s.parameter_offset, s.offset, s.length);
  }
  CHECK((layouts[0] == layouts[1]));
  CHECK_FALSE(layouts[0].empty());
}

namespace {

// Each rank's optimizer tensors hold, slice by slice, its part of the reference's gradients averaged over
// the ranks.
void check_shard_gradients(const GradientSync& sync, const std::vector<torch::Tensor>& params,
                           const std::vector<torch::Tensor>& reference_params, int ranks) {
  const auto shards = sync.optimizer_parameters();
  const auto slices = sync.optimizer_slices();
  REQUIRE(shards.size() == slices.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const auto& slice : slices[i]) {
      const size_t p = index_of(params, slice.parameter);
      const auto expected =
          reference_params[p].grad().reshape(-1).narrow(0, slice.parameter_offset, slice.length) / ranks;
      const auto got = shards[i].grad().narrow(0, slice.offset, slice.length);
      CHECK(max_abs_diff(got, expected) <= 1e-6 * (1.0 + expected.abs().max().item<double>()));
    }
  }
}

// The same SGD step (lr 0.5) on the shards and on the reference.
void sgd_step(const GradientSync& sync, const std::vector<torch::Tensor>& reference_params, int ranks) {
  torch::NoGradGuard no_grad;
  for (const auto& shard : sync.optimizer_parameters()) shard.sub_(shard.grad() * 0.5);
  for (auto p : reference_params) p.sub_(p.grad() / ranks * 0.5);
}

// A ZeRO-3 step's start: the reference's gradients of the step, the sync's zeroed. Returns the gathers so far.
int64_t begin_step(GradientSync& sync, ThreeLayer& reference, int ranks, int step) {
  reference_backward(reference, ranks, step);
  sync.zero_grad();
  return sync.parameter_units()->gathers();
}

// ThreeLayer as ZeRO-3 units, as a model's stage forward calls them: `a` in the ends unit (0), b and c the
// blocks (1, 2).
torch::Tensor unit_loss(ThreeLayer& model, ParameterUnits* units, const torch::Tensor& x) {
  units->before_forward(0);
  auto h = torch::tanh(model.a(x));
  h = run_unit(units, 1, [&] { return torch::tanh(model.b(h)); });
  h = run_unit(units, 2, [&] { return model.c(h); });
  return h.pow(2).mean();
}

}  // namespace

TEST_CASE("gradient sync: a deferred parameter has a bucket of its own", "[mpi]") {
  // A pipeline stage's copy of the tied embedding is deferred: under ZeRO-2 its bucket stays whole until
  // finish(), so it holds nothing else. b's weight between a's and c's parameters, all in one group and one
  // bucket_mb: {c, b.bias} | {b.weight} | {a}, bucketed from the last parameter back.
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  for (const int64_t zero : {0, 1, 2}) {
    INFO("zero " << zero);
    ThreeLayer model;
    const std::vector<std::vector<torch::Tensor>> one_group = {model.parameters()};
    CHECK(GradientSync(one_entry(one_group, *comm), zero_stage(zero, 25)).bucket_count() == 1);
    CHECK(GradientSync(one_entry(one_group, *comm), zero_stage(zero, 25, torch::kFloat, {model.b->weight})).bucket_count() == 3);
    CHECK(GradientSync(one_entry(one_group, *comm), zero_stage(zero, 25, torch::kFloat, {model.c->bias})).bucket_count() == 2);
  }
}

TEST_CASE("gradient sync: ZeRO-1 and ZeRO-2 gather the updated shards a few buckets at a time", "[mpi]") {
  // gather_parameters() sends a copy of each shard (the gather writes over the shard's own storage): with
  // every bucket's gather under way at once, the copies would be a whole shard of the model beside it.
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  CountingCommunicator counting(*comm);
  for (const int64_t zero : {1, 2}) {
    INFO("zero " << zero);
    torch::manual_seed(5);
    ThreeLayer model;
    const auto before = model.parameters();
    std::vector<torch::Tensor> values;
    for (const auto& p : before) values.push_back(p.detach().clone());
    GradientSync sync(one_entry(weight_decay_groups(model), counting), zero_stage(zero, 1e-6));  // a bucket per parameter
    REQUIRE(sync.bucket_count() == 6);
    const int started = counting.all_gathers_started();
    torch::NoGradGuard no_grad;
    for (const auto& shard : sync.optimizer_parameters()) shard.add_(1.0);  // an update every rank makes
    sync.gather_parameters();
    CHECK(counting.all_gathers_started() - started == 6);
    CHECK(counting.most_all_gathers_in_flight() == static_cast<int>(loom::kReductionsInFlight));
    const auto after = model.parameters();
    for (size_t i = 0; i < after.size(); ++i) CHECK(max_abs_diff(after[i], values[i] + 1.0) == 0.0);
  }
}

TEST_CASE("gradient sync: ZeRO-3 gathers each unit for forward and backward and shards its gradients", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  for (const bool reshard : {true, false}) {
    INFO("reshard_after_forward " << reshard);
    ThreeLayer model = seeded_three_layer(), reference = seeded_three_layer();
    const auto params = model.parameters(), reference_params = reference.parameters();
    GradientSync sync(one_entry(weight_decay_groups(model), *comm),
                      zero_stage(3, 25, torch::kFloat, {}, {model.a->parameters(), model.b->parameters(), model.c->parameters()},
                                 reshard));
    REQUIRE(sync.shards_parameters());
    CHECK(sync.bucket_count() == 6);  // 3 units x (weights, biases)
    UnitGathers* units = sync.parameter_units();
    REQUIRE(units != nullptr);
    for (const auto& p : params) CHECK(p.storage().nbytes() == 0);  // only the shards hold values
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const int64_t gathers_before = begin_step(sync, reference, ranks, step);
      for (int m = 0; m < kMicroBatches; ++m) {
        if (m == kMicroBatches - 1) sync.prepare_last_backward();
        const bool forward_follows = m + 1 < kMicroBatches;  // told as the trainer tells it
        sync.set_next_pass(NextPass::kBackward);
        const auto loss = unit_loss(model, units, input_of(rank, step, m));
        // After forward: the ends stay, the last block too (backward starts there); block 1 only without
        // resharding.
        CHECK(units->gathered(0));
        CHECK(units->gathered(1) == !reshard);
        CHECK(units->gathered(2));
        sync.set_next_pass(forward_follows ? NextPass::kForward : NextPass::kNone);
        loss.backward();
        CHECK(units->gathered(0));  // until the step's gradients are all reduced
        // Without resharding the blocks stay for the next micro-batch; with it block 1 stays for the next
        // micro-batch's forward.
        CHECK(units->gathered(1) == (!reshard || forward_follows));
        CHECK(units->gathered(2) == !reshard);
      }
      // Resharding, per micro-batch: block 1 for its forward and again for its backward (but the forward
      // after a backward: kept), block 2 once; the ends once per step. Without: every unit once per step.
      CHECK(units->gathers() - gathers_before == (reshard ? 1 + kMicroBatches * 3 - (kMicroBatches - 1) : 3));
      sync.finish();
      for (size_t u = 0; u < units->unit_count(); ++u) CHECK_FALSE(units->gathered(u));
      for (const auto& p : params) CHECK(p.storage().nbytes() == 0);

      check_shard_gradients(sync, params, reference_params, ranks);
      // The same SGD step on the shards and on the reference: the next step's forwards gather the update.
      sgd_step(sync, reference_params, ranks);
      sync.gather_parameters();  // nothing to gather at ZeRO-3
      for (const auto& p : params) CHECK(p.storage().nbytes() == 0);
    }
  }
}

TEST_CASE("gradient sync: ZeRO-3 frees the ends between the embeddings and the head", "[mpi]") {
  // ThreeLayer as a GPT's units: `a` the embeddings and `c` the head, both in the ends unit (0), `b` the one
  // block (1). run_embeddings frees the ends after `a` (whose backward needs no weights: x needs no
  // gradient), run_head gathers them again for `c` and keeps them for its backward, which frees them.
  const bool reshard = GENERATE(true, false);  // parallel.reshard_after_forward
  CAPTURE(reshard);
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  {
    ThreeLayer model = seeded_three_layer(), reference = seeded_three_layer();
    const auto params = model.parameters(), reference_params = reference.parameters();
    std::vector<torch::Tensor> ends = model.a->parameters();
    for (const auto& p : model.c->parameters()) ends.push_back(p);
    GradientSync sync(one_entry(weight_decay_groups(model), *comm),
                      zero_stage(3, 25, torch::kFloat, {}, {ends, model.b->parameters()}, reshard));
    UnitGathers* units = sync.parameter_units();
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const int64_t gathers_before = begin_step(sync, reference, ranks, step);
      for (int m = 0; m < kMicroBatches; ++m) {
        if (m == kMicroBatches - 1) sync.prepare_last_backward();
        sync.set_next_pass(NextPass::kBackward);
        const auto x = input_of(rank, step, m);
        auto h = run_embeddings(units, [&] { return model.a(x); });
        h = run_unit(units, 1, [&] {
          // The first forward frees the ends for the block; later ones prefetch them for the head meanwhile.
          if (step == 0 && m == 0) CHECK((model.a->weight.storage().nbytes() == 0) == reshard);
          return model.b(torch::tanh(h));
        });
        const auto out = run_head(units, h, [&](const torch::Tensor& in) { return model.c(torch::tanh(in)); });
        const auto loss = out.pow(2).mean();
        CHECK(units->gathered(0));  // kept for the head's backward
        sync.set_next_pass(m + 1 < kMicroBatches ? NextPass::kForward : NextPass::kNone);
        loss.backward();
        // Resharding, freed after the head's backward (the next forward's gather may be on its way).
        if (m + 1 == kMicroBatches) CHECK(units->gathered(0) == !reshard);
      }
      // Resharding, per micro-batch the ends twice (embeddings, head); the block once per step (kept from a
      // backward to the next forward). Without: each unit once per step.
      CHECK(units->gathers() - gathers_before == (reshard ? 2 * kMicroBatches + 1 : 2));
      sync.finish();
      check_shard_gradients(sync, params, reference_params, ranks);
      sgd_step(sync, reference_params, ranks);
    }
  }
}

TEST_CASE("gradient sync: ZeRO-3 under a pipeline schedule's interleaved micro-batches", "[mpi]") {
  // A pipeline stage runs several micro-batches' forwards before their backwards (GPipe: all of them; 1F1B:
  // a warm-up, then one forward and one backward in turn). Every forward gathers what it needs and every
  // backward what it needs, whatever ran before; the ends unit holds a stage's copy of the tied embedding
  // (`a`'s weight, deferred: its gradient is completed after the last backward, as the pipeline runner sums
  // the stages' copies).
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  constexpr int kMicro = 3;
  // Resharding, per micro-batch, block 1 for its forward and again for its backward, block 2 once; the ends
  // once. Told the next action (as the pipeline runner tells it), GPipe prefetches block 1 for a forward after
  // a forward and block 2 for a backward after a backward (the same count: prefetched instead of gathered on
  // demand); 1F1B keeps block 1 from its backward to the forward after it (one gather fewer).
  struct Schedule {
    std::string name, actions;
    int64_t gathers_resharding;
  };
  const std::vector<Schedule> schedules = {{"gpipe", "FFFBBB", 1 + kMicro * 3}, {"1f1b", "FFBFBB", kMicro * 3}};
  for (const auto& [name, schedule, gathers_resharding] : schedules) {
    for (const bool reshard : {true, false}) {
      INFO(name << ", reshard_after_forward " << reshard);
      ThreeLayer model = seeded_three_layer(), reference = seeded_three_layer();
      const auto params = model.parameters(), reference_params = reference.parameters();
      for (int k = 0; k < ranks; ++k)
        for (int m = 0; m < kMicro; ++m) loss_of(reference, input_of(k, 0, m)).backward();

      GradientSync sync(one_entry(weight_decay_groups(model), *comm),
                        zero_stage(3, 25, torch::kFloat, {model.a->weight},
                                   {model.a->parameters(), model.b->parameters(), model.c->parameters()}, reshard));
      UnitGathers* units = sync.parameter_units();
      sync.zero_grad();
      std::vector<torch::Tensor> losses;
      int backwards = 0;
      for (size_t i = 0; i < schedule.size(); ++i) {
        const char next = i + 1 < schedule.size() ? schedule[i + 1] : ' ';
        sync.set_next_pass(next == 'F' ? NextPass::kForward : next == 'B' ? NextPass::kBackward : NextPass::kNone);
        if (schedule[i] == 'F') {
          losses.push_back(unit_loss(model, units, input_of(rank, 0, static_cast<int>(losses.size()))));
          // The last block stays for a backward; block 1 only without resharding (resharding, a forward that
          // follows has it on its way).
          CHECK(units->gathered(1) == !reshard);
          CHECK(units->gathered(2));
        } else {
          losses[backwards++].backward();
          // Resharding, block 1 stays for a forward that follows, block 2 is on its way for a backward.
          CHECK(units->gathered(1) == (!reshard || next == 'F'));
          CHECK(units->gathered(2) == !reshard);
        }
        CHECK(units->gathered(0));
      }
      CHECK(units->gathers() == (reshard ? gathers_resharding : 3));
      REQUIRE(model.a->weight.grad().defined());
      model.a->weight.grad().add_(1.0);  // the other stage's part, summed in
      sync.prepare_last_backward();
      sync.finish();
      for (size_t u = 0; u < units->unit_count(); ++u) CHECK_FALSE(units->gathered(u));

      const auto shards = sync.optimizer_parameters();
      const auto slices = sync.optimizer_slices();
      for (size_t i = 0; i < shards.size(); ++i) {
        for (const auto& slice : slices[i]) {
          const size_t p = index_of(params, slice.parameter);
          auto expected = reference_params[p].grad().reshape(-1).narrow(0, slice.parameter_offset, slice.length) / ranks;
          if (p == 0) expected = expected + 1.0;  // a.weight, every rank's + 1 averaged
          const auto got = shards[i].grad().narrow(0, slice.offset, slice.length);
          CHECK(max_abs_diff(got, expected) <= 1e-6 * (1.0 + expected.abs().max().item<double>()));
        }
      }
    }
  }
}

TEST_CASE("gradient sync: ZeRO-3 gathers values read into its shards", "[mpi]") {
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  torch::manual_seed(5);
  ThreeLayer model;
  const auto initial = model.b->weight.detach().clone(), initial_a = model.a->weight.detach().clone();
  GradientSync sync(one_entry(weight_decay_groups(model), *comm),
                    zero_stage(3, 25, torch::kFloat, {}, {model.a->parameters(), model.b->parameters(), model.c->parameters()}));
  CHECK(model.b->weight.storage().nbytes() == 0);
  {
    // A checkpoint's load writes each rank's part of b.weight into its shard, as optimizer_slices() say.
    torch::NoGradGuard no_grad;
    const auto tensors = sync.optimizer_parameters();
    const auto slices = sync.optimizer_slices();
    for (size_t i = 0; i < tensors.size(); ++i)
      for (const auto& slice : slices[i])
        if (slice.parameter.unsafeGetTensorImpl() == model.b->weight.unsafeGetTensorImpl())
          tensors[i].view(-1).narrow(0, slice.offset, slice.length).fill_(0.25);
  }
  sync.gather_parameters();  // nothing at zero 3: the next gather reads the shards
  CHECK(model.b->weight.storage().nbytes() == 0);
  UnitGathers* units = sync.parameter_units();
  units->before_forward(1);
  CHECK(max_abs_diff(model.b->weight, torch::full_like(initial, 0.25)) == 0);
  units->before_forward(0);
  CHECK(max_abs_diff(model.a->weight, initial_a) == 0);  // the other units keep theirs
  sync.free_parameters();
  CHECK(model.b->weight.storage().nbytes() == 0);
}

TEST_CASE("gradient sync: two parameter entries on different shard groups each average over their own", "[mpi]") {
  // A second entry, as MoE experts are over their expert-data-parallel ranks: `b` averaged and sharded over a
  // group of its own (two ranks of four; one of two), `a` and `c` over the world. Each rank's optimizer must
  // see each parameter's gradient averaged over that parameter's group, and the updates must come back into
  // the weights (ZeRO-3: into the next step's gathers, which the second step's gradients depend on). ZeRO-3's
  // second unit holds parameters of both entries, gathered over their two groups.
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  const int expert_ranks = ranks >= 4 ? 2 : 1, expert_groups = ranks / expert_ranks;
  auto experts = comm->split(rank % expert_groups, rank / expert_groups, "expert group");
  REQUIRE(experts->size() == expert_ranks);
  for (const int64_t zero : {0, 1, 2, 3}) {
    INFO("zero " << zero << ", " << ranks << " ranks, expert groups of " << expert_ranks);
    ThreeLayer model = seeded_three_layer(), reference = seeded_three_layer();
    const auto params = model.parameters(), reference_params = reference.parameters();
    // The reference's b as each expert group holds it (they part after the first update).
    std::vector<std::vector<torch::Tensor>> experts_of(expert_groups);
    for (auto& held : experts_of)
      for (const auto& p : reference.b->parameters()) held.push_back(p.detach().clone());
    const auto use_experts_of = [&](int g) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < 2; ++i) reference.b->parameters()[i].copy_(experts_of[g][i]);
    };
    const auto is_expert = [&](size_t p) {
      return params[p].unsafeGetTensorImpl() == model.b->weight.unsafeGetTensorImpl() ||
             params[p].unsafeGetTensorImpl() == model.b->bias.unsafeGetTensorImpl();
    };
    // Per entry, its optimizer groups (matrices, vectors: with and without weight decay).
    std::vector<ShardedParameters> entries = {
        {{{model.a->weight, model.c->weight}, {model.a->bias, model.c->bias}}, comm.get(), nullptr},
        {{{model.b->weight}, {model.b->bias}}, experts.get(), nullptr}};
    std::vector<std::vector<torch::Tensor>> units;
    if (zero == 3) units = {model.a->parameters(), {model.b->weight, model.b->bias, model.c->weight, model.c->bias}};
    GradientSync sync(entries, zero_stage(zero, 0.0002, torch::kFloat, {}, units));
    // Buckets never mix entries: of ~200 bytes, a's and c's weights in two and their biases in one, b's two;
    // ZeRO-3: per unit, entry and group (a: 2; b and c: 2 + 2).
    CHECK(sync.bucket_count() == (zero == 3 ? 6 : 5));
    const auto loss = [&](const torch::Tensor& x) {
      if (zero != 3) return loss_of(model, x);
      ParameterUnits* gathers = sync.parameter_units();
      gathers->before_forward(0);
      auto h = torch::tanh(model.a(x));
      h = run_unit(gathers, 1, [&] { return model.c(torch::tanh(model.b(h))); });
      return h.pow(2).mean();
    };
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      // The reference's averages: a's and c's over every rank, each rank's inputs through its expert group's b;
      // b's over the ranks of its group.
      std::vector<torch::Tensor> expected(params.size());
      for (auto& p : reference_params) p.mutable_grad() = torch::Tensor();
      for (int k = 0; k < ranks; ++k) {
        use_experts_of(k % expert_groups);
        for (int m = 0; m < kMicroBatches; ++m) loss_of(reference, input_of(k, step, m)).backward();
      }
      for (size_t p = 0; p < params.size(); ++p)
        if (!is_expert(p)) expected[p] = reference_params[p].grad() / ranks;
      std::vector<std::vector<torch::Tensor>> expert_averages(expert_groups);
      for (int g = 0; g < expert_groups; ++g) {
        use_experts_of(g);
        for (auto& p : reference.b->parameters()) p.mutable_grad() = torch::Tensor();
        for (int k = 0; k < ranks; ++k)
          if (k % expert_groups == g)
            for (int m = 0; m < kMicroBatches; ++m) loss_of(reference, input_of(k, step, m)).backward();
        for (const auto& p : reference.b->parameters()) expert_averages[g].push_back(p.grad() / expert_ranks);
      }
      expected[index_of(params, model.b->weight)] = expert_averages[rank % expert_groups][0];
      expected[index_of(params, model.b->bias)] = expert_averages[rank % expert_groups][1];
      sync.zero_grad();
      for (int m = 0; m < kMicroBatches; ++m) {
        if (m == kMicroBatches - 1) sync.prepare_last_backward();
        loss(input_of(rank, step, m)).backward();
      }
      sync.finish();
      const auto shards = sync.optimizer_parameters();
      const auto slices = sync.optimizer_slices();
      REQUIRE(shards.size() == slices.size());
      int64_t checked = 0;
      for (size_t i = 0; i < shards.size(); ++i) {
        for (const auto& slice : slices[i]) {
          const auto want = expected[index_of(params, slice.parameter)].reshape(-1).narrow(0, slice.parameter_offset,
                                                                                           slice.length);
          const auto got = shards[i].grad().reshape(-1).narrow(0, slice.offset, slice.length);  // zero 0: whole
          CHECK(max_abs_diff(got, want) <= 1e-6 * (1.0 + want.abs().max().item<double>()));
          checked += slice.length;
        }
      }
      CHECK(checked > 0);
      // The same SGD step on what the optimizer steps and on the reference.
      torch::NoGradGuard no_grad;
      for (const auto& shard : shards) shard.sub_(shard.grad() * 0.5);
      for (size_t p = 0; p < params.size(); ++p)
        if (!is_expert(p)) reference_params[p].sub_(expected[p] * 0.5);
      for (int g = 0; g < expert_groups; ++g)
        for (size_t i = 0; i < 2; ++i) experts_of[g][i].sub_(expert_averages[g][i] * 0.5);
      use_experts_of(rank % expert_groups);
      sync.gather_parameters();
      if (zero == 3) continue;  // the weights are shards until the next forward gathers them
      for (size_t p = 0; p < params.size(); ++p)
        CHECK(max_abs_diff(params[p], reference_params[p]) <= 1e-6 * (1.0 + reference_params[p].abs().max().item<double>()));
    }
  }
}

TEST_CASE("gradient sync: a sparse entry's parameter a rank got no gradient for is reduced as zeros, in order", "[mpi]") {
  // Three parameters of different sizes, a bucket each, one sparse entry (as MoE experts under ep): in each of two
  // micro-batches every odd rank leaves one of them without a gradient (the first one, then the middle one,
  // whose bucket the even ranks complete before the first's), which the even ranks use. Every rank must start
  // the same collectives in the same order (sizes differ: a mismatch fails, MPI_ERR_TRUNCATE, or hangs; without
  // the ordering and the zeros, zero 0 and 1 fail in the last backward, zero 2 in the first), and each gradient
  // must be the closed form: the sum of the weights each rank's loss gave it over the micro-batches where it used
  // it (zero where it did not), divided by the ranks.
  auto comm = loom::test::processes().world(/*timeout_s=*/60);
  const int rank = comm->rank(), ranks = comm->size();
  const std::vector<int64_t> sizes = {40, 24, 16};
  const auto used = [](int r, int m, size_t i) { return r % 2 == 0 || i != (m == 0 ? 0u : 1u); };
  const auto weight = [](int r, int m, size_t i, int64_t n) {
    torch::manual_seed(700 + 100 * r + 10 * m + static_cast<int>(i));
    return torch::randn({n});
  };
  for (const int64_t zero : {0, 1, 2}) {
    INFO("zero " << zero << ", " << ranks << " ranks");
    std::vector<torch::Tensor> params;
    for (const int64_t n : sizes) params.push_back(torch::zeros({n}).requires_grad_(true));
    std::vector<ShardedParameters> entries = one_entry({params, {}}, *comm);
    entries[0].sparse = true;
    GradientSync sync(entries, zero_stage(zero, 1e-6));  // a bucket per parameter
    REQUIRE(sync.bucket_count() == 3);
    for (int step = 0; step < 2; ++step) {
      sync.zero_grad();
      for (int m = 0; m < kMicroBatches; ++m) {
        if (m == kMicroBatches - 1) sync.prepare_last_backward();
        auto loss = torch::zeros({});
        for (size_t i = 0; i < params.size(); ++i)
          if (used(rank, m, i)) loss = loss + (params[i] * weight(rank, m, i, sizes[i])).sum();
        loss.backward();
        sync.end_backward();
      }
      sync.finish();
      const auto shards = sync.optimizer_parameters();
      const auto slices = sync.optimizer_slices();
      for (size_t k = 0; k < shards.size(); ++k) {
        for (const auto& slice : slices[k]) {
          const size_t i = index_of(params, slice.parameter);
          auto expected = torch::zeros({sizes[i]});
          for (int r = 0; r < ranks; ++r)
            for (int m = 0; m < kMicroBatches; ++m)
              if (used(r, m, i)) expected += weight(r, m, i, sizes[i]);
          expected = (expected / ranks).narrow(0, slice.parameter_offset, slice.length);
          const auto got = shards[k].grad().reshape(-1).narrow(0, slice.offset, slice.length);
          CHECK(max_abs_diff(got, expected) <= 1e-6);
        }
      }
    }
  }
}
