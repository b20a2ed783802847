// What every Communicator backend shares: the timeout message, and the counts-then-rows all-to-all built on
// each backend's all_to_all_async.
#include "parallel/communicator.h"

#include "core/error.h"

namespace loom {

std::string collective_timeout_message(const std::string& what, double timeout_s) {
  return what + " did not finish within parallel.timeout_s=" + std::to_string(static_cast<int>(timeout_s)) +
         "s: a rank of the group has failed or stalled";
}

std::vector<int64_t> Communicator::exchange_counts(const std::vector<int64_t>& send_counts, torch::Device device) {
  LOOM_CHECK(static_cast<int>(send_counts.size()) == size(), "all_to_all over the ", name(), ": ", send_counts.size(),
             " counts for ", size(), " ranks");
  const std::vector<int64_t> ones(send_counts.size(), 1);
  auto send = torch::tensor(send_counts, torch::kLong).to(device);
  auto recv = torch::empty_like(send);
  all_to_all(send, recv, ones, ones);
  recv = recv.cpu();
  return std::vector<int64_t>(recv.data_ptr<int64_t>(), recv.data_ptr<int64_t>() + recv.numel());
}

torch::Tensor Communicator::all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_rows,
                                       std::vector<int64_t>* recv_rows) {
  auto counts = exchange_counts(send_rows, input.device());
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  auto shape = input.sizes().vec();
  shape[0] = total;
  auto output = torch::empty(shape, input.options());
  all_to_all(input.contiguous(), output, send_rows, counts);
  if (recv_rows != nullptr) *recv_rows = std::move(counts);
  return output;
}

}  // namespace loom
