#include "models/moe_dispatch.h"

#include <atomic>
#include <chrono>

#include "core/error.h"

namespace loom {
namespace {

std::atomic<int64_t> all_to_all_waited_ns{0};

// One blocking exchange over the ep group, its time added to expert_all_to_all_wait_s.
void timed_all_to_all(Communicator& group, const torch::Tensor& send, torch::Tensor& recv,
                      const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows) {
  const auto start = std::chrono::steady_clock::now();
  group.all_to_all(send, recv, send_rows, recv_rows);
  all_to_all_waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                              .count();
}

// Forward: the all-to-all; backward: the reverse one. The group travels as an address (a Communicator
// outlives every graph built over it: the mesh owns it for the run).
class AllToAllRows : public torch::autograd::Function<AllToAllRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& rows, int64_t group,
                               std::vector<int64_t> send_rows, std::vector<int64_t> recv_rows) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    ctx->saved_data["rows"] = rows.size(0);
    return exchange(rows, group, send_rows, recv_rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    auto grad = grad_outputs[0];
    // Every rank takes part in the reverse exchange, whether or not a gradient reached its rows.
    if (!grad.defined()) throw Error("all_to_all_rows: backward without a gradient");
    return {exchange(grad, ctx->saved_data["group"].toInt(), recv, send), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }

 private:
  static torch::Tensor exchange(const torch::Tensor& rows, int64_t group, const std::vector<int64_t>& send,
                                const std::vector<int64_t>& recv) {
    auto& comm = *reinterpret_cast<Communicator*>(group);
    int64_t total = 0;
    for (int64_t r : recv) total += r;
    auto shape = rows.sizes().vec();
    shape[0] = total;
    auto out = torch::empty(shape, rows.options());
    timed_all_to_all(comm, rows.contiguous(), out, send, recv);
    return out;
  }
};

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& rows, Communicator& group, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows) {
  return AllToAllRows::apply(rows, reinterpret_cast<int64_t>(&group), send_rows, recv_rows);
}

torch::Tensor dispatch_to_experts(const torch::Tensor& rows, const torch::Tensor& expert_counts, Communicator& group,
                                  const LocalExperts& run) {
  const int64_t ep = group.size(), E = expert_counts.numel();
  LOOM_CHECK(E % ep == 0, "expert parallelism: ", E, " experts do not split over ", ep, " ranks");
  const int64_t local = E / ep;
  // The counts: what this rank sends each rank, per expert of that rank -> what each rank sends this one.
  const auto counts = expert_counts.to(torch::kLong).contiguous();
  auto on_device = torch::empty({ep, local}, torch::TensorOptions().dtype(torch::kLong).device(rows.device()));
  timed_all_to_all(group, counts.reshape({ep, local}).to(rows.device()), on_device,
                   std::vector<int64_t>(static_cast<size_t>(ep), 1), std::vector<int64_t>(static_cast<size_t>(ep), 1));
  const auto received_counts = on_device.cpu();
  std::vector<int64_t> send(static_cast<size_t>(ep)), recv(static_cast<size_t>(ep)), per_expert(static_cast<size_t>(local));
  const auto by_rank = counts.reshape({ep, local});
  for (int64_t r = 0; r < ep; ++r) {
    send[static_cast<size_t>(r)] = by_rank[r].sum().item<int64_t>();
    recv[static_cast<size_t>(r)] = received_counts[r].sum().item<int64_t>();
  }
  // The rows: each source rank's block comes sorted by local expert; regroup all blocks by local expert.
  const auto received = all_to_all_rows(rows, group, send, recv);
  const auto expert_of_row = torch::repeat_interleave(torch::arange(local, torch::kLong).repeat({ep}),
                                                      received_counts.reshape(-1));
  const auto order = std::get<1>(expert_of_row.sort(/*stable=*/true, 0, false)).to(rows.device());
  for (int64_t e = 0; e < local; ++e) per_expert[static_cast<size_t>(e)] = received_counts.select(1, e).sum().item<int64_t>();
  // Run even with no rows: the local experts then still get (zero) gradients in this backward, as on every
  // other rank, so the gradient sync reduces their buckets at the same point everywhere (and the output
  // stays on the graph, so backward's exchange takes place).
  const auto grouped = run(received.index_select(0, order), per_expert);
  const auto computed = torch::empty_like(grouped).index_copy(0, order, grouped);  // back in the order received
  return all_to_all_rows(computed, group, recv, send);
}

double expert_all_to_all_wait_s() { return static_cast<double>(all_to_all_waited_ns.load()) * 1e-9; }

int64_t expert_all_to_all_bytes(int64_t tokens, int64_t top_k, int64_t d_model, int64_t element_size, int64_t ep) {
  if (ep <= 1) return 0;
  // Out and back in forward, the same in backward; (ep - 1) / ep of the slots leave the rank.
  return 4 * tokens * top_k * d_model * element_size * (ep - 1) / ep;
}

}  // namespace loom
