#include "models/moe_dispatch.h"

#include <atomic>
#include <chrono>

#include "core/error.h"

namespace loom {
namespace {

std::atomic<int64_t> all_to_all_waited_ns{0};
std::atomic<int64_t> all_to_all_started{0};

// Waits for an exchange, the time added to expert_all_to_all_wait_s.
void timed_wait(Work& work) {
  const auto start = std::chrono::steady_clock::now();
  work.wait();
  all_to_all_waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                              .count();
}

std::shared_ptr<Work> start_all_to_all(Communicator& group, const torch::Tensor& send, const torch::Tensor& recv,
                                       const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows) {
  ++all_to_all_started;
  return group.all_to_all_async(send, recv, send_rows, recv_rows);
}

// One exchange of rows between two autograd nodes, ExchangeStart and ExchangeFinish: whatever the caller
// computes between them runs while the rows are in flight, and in backward autograd runs those nodes between
// the finish's backward (which starts the gradients' reverse exchange) and the start's (which waits for it).
// The group travels as an address (a Communicator outlives every graph built over it: the mesh owns it).
struct PendingExchange : torch::CustomClassHolder {
  Communicator* group = nullptr;
  std::vector<int64_t> send, recv;
  std::shared_ptr<Work> work;
  torch::Tensor replayed;  // a checkpointed layer's re-run: the rows the first run received (nothing is sent)
  torch::Tensor out;       // forward: the rows arriving
  torch::Tensor grad_out;  // backward: the gradients of the rows sent, arriving
};
using Pending = c10::intrusive_ptr<PendingExchange>;

Pending pending_of(torch::autograd::AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<PendingExchange>(ctx->saved_data["pending"].toCapsule());
}

torch::Tensor empty_rows(const torch::Tensor& like, const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t r : counts) total += r;
  auto shape = like.sizes().vec();
  shape[0] = total;
  return torch::empty(shape, like.options());
}

class ExchangeStart : public torch::autograd::Function<ExchangeStart> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& rows, Pending pending) {
    ctx->saved_data["pending"] = c10::IValue::make_capsule(pending);
    if (pending->replayed.defined()) {
      pending->out = pending->replayed.view_as(pending->replayed);
      pending->replayed = torch::Tensor();
      return pending->out;
    }
    pending->out = empty_rows(rows, pending->recv);
    pending->work = start_all_to_all(*pending->group, rows.contiguous(), pending->out, pending->send, pending->recv);
    return pending->out;  // filled once ExchangeFinish has waited
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    auto pending = pending_of(ctx);
    if (!pending->work) throw Error("all_to_all_rows: backward without the gradients' exchange");
    timed_wait(*pending->work);
    pending->work.reset();
    auto grad = std::move(pending->grad_out);
    return {grad, torch::Tensor()};
  }
};

class ExchangeFinish : public torch::autograd::Function<ExchangeFinish> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& arriving, Pending pending) {
    ctx->saved_data["pending"] = c10::IValue::make_capsule(pending);
    if (pending->work) timed_wait(*pending->work);
    pending->work.reset();
    pending->out = torch::Tensor();
    return arriving.view_as(arriving);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    // Every rank takes part in the reverse exchange, whether or not a gradient reached its rows.
    auto pending = pending_of(ctx);
    const auto grad = grad_outputs[0].contiguous();
    pending->grad_out = empty_rows(grad, pending->send);
    pending->work = start_all_to_all(*pending->group, grad, pending->grad_out, pending->recv, pending->send);
    return {grad, torch::Tensor()};  // ExchangeStart's backward waits for the exchange
  }
};

// rows -> the rows exchanged, with `between` run while they are in flight (and its nodes between the
// exchange's in backward).
torch::Tensor exchange_rows(const torch::Tensor& rows, Communicator& group, std::vector<int64_t> send,
                            std::vector<int64_t> recv, const std::function<void()>& between,
                            const torch::Tensor& replayed = {}) {
  auto pending = c10::make_intrusive<PendingExchange>();
  pending->group = &group;
  pending->send = std::move(send);
  pending->recv = std::move(recv);
  pending->replayed = replayed;
  const auto arriving = ExchangeStart::apply(rows, pending);
  if (between) between();
  return ExchangeFinish::apply(arriving, pending);
}

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& rows, Communicator& group, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows) {
  return exchange_rows(rows, group, send_rows, recv_rows, {});
}

torch::Tensor dispatch_to_experts(const torch::Tensor& rows, const torch::Tensor& expert_counts, Communicator& group,
                                  const LocalExperts& run, const WhileExchanging& overlap, DispatchReplay* replay) {
  const int64_t ep = group.size(), E = expert_counts.numel();
  LOOM_CHECK(E % ep == 0, "expert parallelism: ", E, " experts do not split over ", ep, " ranks");
  const int64_t local = E / ep;
  const bool replaying = replay != nullptr && replay->mode == DispatchReplay::Mode::kReplay;
  // The counts: what this rank sends each rank, per expert of that rank -> what each rank sends this one.
  const auto counts = expert_counts.to(torch::kLong).contiguous();
  torch::Tensor received_counts;
  if (replaying) {
    received_counts = replay->received_counts;
  } else {
    auto on_device = torch::empty({ep, local}, torch::TensorOptions().dtype(torch::kLong).device(rows.device()));
    timed_wait(*start_all_to_all(group, counts.reshape({ep, local}).to(rows.device()), on_device,
                                 std::vector<int64_t>(static_cast<size_t>(ep), 1),
                                 std::vector<int64_t>(static_cast<size_t>(ep), 1)));
    received_counts = on_device.cpu();
  }
  std::vector<int64_t> send(static_cast<size_t>(ep)), recv(static_cast<size_t>(ep)), per_expert(static_cast<size_t>(local));
  const auto by_rank = counts.reshape({ep, local});
  for (int64_t r = 0; r < ep; ++r) {
    send[static_cast<size_t>(r)] = by_rank[r].sum().item<int64_t>();
    recv[static_cast<size_t>(r)] = received_counts[r].sum().item<int64_t>();
  }
  auto phase = [&overlap](int p) -> std::function<void()> {
    if (!overlap) return {};
    return [&overlap, p] { overlap(p); };
  };
  // The rows: each source rank's block comes sorted by local expert; regroup all blocks by local expert.
  const auto received = exchange_rows(rows, group, send, recv, phase(0), replaying ? replay->received : torch::Tensor());
  const auto expert_of_row = torch::repeat_interleave(torch::arange(local, torch::kLong).repeat({ep}),
                                                      received_counts.reshape(-1));
  const auto order = std::get<1>(expert_of_row.sort(/*stable=*/true, 0, false)).to(rows.device());
  for (int64_t e = 0; e < local; ++e) per_expert[static_cast<size_t>(e)] = received_counts.select(1, e).sum().item<int64_t>();
  // Run even with no rows: the output stays on the graph, so backward's exchange takes place on every rank.
  const auto grouped = run(received.index_select(0, order), per_expert);
  const auto computed = torch::empty_like(grouped).index_copy(0, order, grouped);  // back in the order received
  auto combined = exchange_rows(computed, group, recv, send, phase(1), replaying ? replay->combined : torch::Tensor());
  if (replay != nullptr && !replaying) {
    replay->received_counts = received_counts;
    replay->received = received.detach();
    replay->combined = combined.detach();
  }
  return combined;
}

double expert_all_to_all_wait_s() { return static_cast<double>(all_to_all_waited_ns.load()) * 1e-9; }
int64_t expert_all_to_all_count() { return all_to_all_started.load(); }

int64_t expert_all_to_all_bytes(int64_t tokens, int64_t top_k, int64_t d_model, int64_t element_size, int64_t ep) {
  if (ep <= 1) return 0;
  // Out and back in forward, the same in backward; (ep - 1) / ep of the slots leave the rank.
  return 4 * tokens * top_k * d_model * element_size * (ep - 1) / ep;
}

}  // namespace loom
