// Collectives on tensors for one group of ranks. Every operation has an async form returning a Work
// handle; the blocking form is the async one waited on. A Work that does not finish within the
// group's timeout throws loom::Error naming the collective and the group: a failed or stalled peer
// ends the job instead of hanging it.
// Backends: MPI for CPU tensors (mpi_communicator.cpp), NCCL for CUDA tensors (nccl_communicator.h); a
// group of one rank needs no backend at all. Which one a group uses is the Mesh's choice (parallel/mesh.h).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace loom {

enum class ReduceOp { kSum, kMax };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "dp group [0,2]": used in error messages.
  virtual std::string name() const = 0;

  // In place on a contiguous tensor; bf16/fp16 are reduced in fp32.
  virtual std::shared_ptr<Work> all_reduce_async(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // output: size() x input.numel() elements, rank r's input at [r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> all_gather_async(torch::Tensor input, torch::Tensor output) = 0;
  // input: size() x output.numel() elements; output = sum over ranks of their chunk rank().
  virtual std::shared_ptr<Work> reduce_scatter_async(torch::Tensor input, torch::Tensor output) = 0;
  virtual std::shared_ptr<Work> broadcast_async(torch::Tensor tensor, int root) = 0;
  virtual std::shared_ptr<Work> send_async(torch::Tensor tensor, int peer, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv_async(torch::Tensor tensor, int peer, int tag = 0) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;
  // Rows to every rank, variable counts per peer (MPI_Alltoallv): input's first send_rows[0] rows (along dim 0)
  // go to rank 0, the next send_rows[1] to rank 1, ...; output receives recv_rows[0] rows from rank 0 first,
  // then rank 1's, .... Both contiguous, of one dtype and row shape; send_rows[p] on this rank must equal
  // recv_rows[me] on rank p (exchange_counts gives them). A count may be 0 (a rank sending or receiving nothing).
  virtual std::shared_ptr<Work> all_to_all_async(torch::Tensor input, torch::Tensor output,
                                                 std::vector<int64_t> send_rows, std::vector<int64_t> recv_rows) = 0;

  void all_reduce(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum) { all_reduce_async(tensor, op)->wait(); }
  void all_gather(torch::Tensor input, torch::Tensor output) { all_gather_async(input, output)->wait(); }
  void reduce_scatter(torch::Tensor input, torch::Tensor output) { reduce_scatter_async(input, output)->wait(); }
  void broadcast(torch::Tensor tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void send(torch::Tensor tensor, int peer, int tag = 0) { send_async(tensor, peer, tag)->wait(); }
  void recv(torch::Tensor tensor, int peer, int tag = 0) { recv_async(tensor, peer, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }
  void all_to_all(torch::Tensor input, torch::Tensor output, std::vector<int64_t> send_rows,
                  std::vector<int64_t> recv_rows) {
    all_to_all_async(input, output, std::move(send_rows), std::move(recv_rows))->wait();
  }
  // The counts half of a variable all-to-all: what every rank sends this one (send_counts[p]: what this rank
  // sends rank p). One int64 per peer, on `device` (the group's: CPU for MPI, CUDA for NCCL).
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send_counts, torch::Device device = torch::kCPU);
  // Counts first, then the rows: input's rows split by send_rows (one count per rank) -> the rows received,
  // rank 0's first; recv_rows (if given) gets how many came from each rank.
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_rows,
                           std::vector<int64_t>* recv_rows = nullptr);

  // The sub-group of ranks with the same color, ordered by key (MPI_Comm_split semantics).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

// The error a Work throws when its peers do not arrive within parallel.timeout_s (what: "all_reduce
// over the dp group of dp0-tp0-pp0"), the same for every backend.
std::string collective_timeout_message(const std::string& what, double timeout_s);

// The group of this process alone: every collective is the identity, and nothing is ever waited for.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");

}  // namespace loom
