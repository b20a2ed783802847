#include "parallel/nccl_communicator.h"

#include "core/error.h"

#ifdef LOOM_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#define LOOM_NCCL_CHECK(call)                                                                          \
  do {                                                                                                \
    const ncclResult_t loom_nccl_rc = (call);                                                         \
    if (loom_nccl_rc != ncclSuccess)                                                                  \
      throw ::loom::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call +      \
                          " failed: " + ncclGetErrorString(loom_nccl_rc));                            \
  } while (0)

#define LOOM_CUDA_CHECK(call)                                                                          \
  do {                                                                                                \
    const cudaError_t loom_cuda_rc = (call);                                                          \
    if (loom_cuda_rc != cudaSuccess)                                                                  \
      throw ::loom::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call +      \
                          " failed: " + cudaGetErrorString(loom_cuda_rc));                            \
  } while (0)

namespace loom {
namespace {

ncclDataType_t nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return ncclFloat32;
    case torch::kDouble: return ncclFloat64;
    case torch::kHalf: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    case torch::kChar: return ncclInt8;
    default: throw Error(std::string("NCCL cannot move tensors of type ") + c10::toString(t.scalar_type()));
  }
}

void check_cuda_contiguous(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, ": the NCCL backend takes CUDA tensors (CPU tensors go through MPI)");
  TORCH_CHECK(t.is_contiguous(), what, ": tensor must be contiguous");
}

class NcclWork : public Work {
 public:
  NcclWork(cudaEvent_t done, ncclComm_t comm, std::string what, double timeout_s)
      : done_(done), comm_(comm), what_(std::move(what)), timeout_s_(timeout_s) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) LOOM_CUDA_CHECK(state);
      ncclResult_t async_error = ncclSuccess;
      LOOM_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
      LOOM_NCCL_CHECK(async_error);
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm_);
        throw Error(collective_timeout_message(what_, timeout_s_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Later work on the caller's stream sees the result.
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), done_, 0));
  }

 private:
  cudaEvent_t done_;
  ncclComm_t comm_;
  std::string what_;
  double timeout_s_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::string name, double timeout_s)
      : comm_(comm), device_(device), name_(std::move(name)), timeout_s_(timeout_s),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device))) {
    LOOM_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    LOOM_NCCL_CHECK(ncclCommCount(comm_, &size_));
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  std::shared_ptr<Work> all_reduce_async(torch::Tensor t, ReduceOp op) override {
    check_cuda_contiguous(t, "all_reduce");
    const ncclRedOp_t nccl_op = op == ReduceOp::kSum ? ncclSum : ncclMax;
    return enqueue("all_reduce", {t}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), nccl_op, comm_, s));
    });
  }
  std::shared_ptr<Work> all_gather_async(torch::Tensor in, torch::Tensor out) override {
    check_cuda_contiguous(in, "all_gather");
    check_cuda_contiguous(out, "all_gather");
    TORCH_CHECK(out.numel() == in.numel() * size_, "all_gather: output must hold size() x input.numel() elements");
    return enqueue("all_gather", {in, out}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in), comm_, s));
    });
  }
  std::shared_ptr<Work> reduce_scatter_async(torch::Tensor in, torch::Tensor out) override {
    check_cuda_contiguous(in, "reduce_scatter");
    check_cuda_contiguous(out, "reduce_scatter");
    TORCH_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: input must hold size() x output.numel() elements");
    return enqueue("reduce_scatter", {in, out}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in), ncclSum, comm_, s));
    });
  }
  std::shared_ptr<Work> broadcast_async(torch::Tensor t, int root) override {
    check_cuda_contiguous(t, "broadcast");
    return enqueue("broadcast", {t}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root, comm_, s));
    });
  }
  std::shared_ptr<Work> send_async(torch::Tensor t, int peer, int) override {
    check_cuda_contiguous(t, "send");
    return enqueue("send", {t}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), nccl_type(t), peer, comm_, s));
    });
  }
  std::shared_ptr<Work> recv_async(torch::Tensor t, int peer, int) override {
    check_cuda_contiguous(t, "recv");
    return enqueue("recv", {t}, [&](cudaStream_t s) {
      LOOM_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), nccl_type(t), peer, comm_, s));
    });
  }
  // Grouped sends and receives, one of each per peer with rows to move (NCCL has no all-to-all-v).
  std::shared_ptr<Work> all_to_all_async(torch::Tensor in, torch::Tensor out, std::vector<int64_t> send_rows,
                                         std::vector<int64_t> recv_rows) override {
    check_cuda_contiguous(in, "all_to_all");
    check_cuda_contiguous(out, "all_to_all");
    TORCH_CHECK(static_cast<int>(send_rows.size()) == size_ && static_cast<int>(recv_rows.size()) == size_ &&
                    in.sizes().slice(1) == out.sizes().slice(1) && in.dtype() == out.dtype(),
                "all_to_all: one row count per rank, and one row shape and dtype");
    const int64_t row = c10::multiply_integers(in.sizes().slice(1));
    return enqueue("all_to_all", {in, out}, [&](cudaStream_t s) {
      const auto type = nccl_type(in);
      auto* send = static_cast<char*>(in.data_ptr());
      auto* recv = static_cast<char*>(out.data_ptr());
      const int64_t bytes = row * static_cast<int64_t>(in.element_size());
      LOOM_NCCL_CHECK(ncclGroupStart());
      for (int p = 0; p < size_; ++p) {
        if (send_rows[p] > 0) LOOM_NCCL_CHECK(ncclSend(send, send_rows[p] * row, type, p, comm_, s));
        if (recv_rows[p] > 0) LOOM_NCCL_CHECK(ncclRecv(recv, recv_rows[p] * row, type, p, comm_, s));
        send += send_rows[p] * bytes;
        recv += recv_rows[p] * bytes;
      }
      LOOM_NCCL_CHECK(ncclGroupEnd());
    });
  }
  std::shared_ptr<Work> barrier_async() override {
    auto token = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device_));
    return all_reduce_async(token, ReduceOp::kSum);
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclComm_t sub = nullptr;
    LOOM_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    return std::make_unique<NcclCommunicator>(sub, device_, name, timeout_s_);
  }

 private:
  // Runs `launch` on the communication stream after the caller's queued work, keeps the tensors'
  // memory from being reused until the collective is done, and returns its completion event.
  template <class Launch>
  std::shared_ptr<Work> enqueue(const char* what, std::initializer_list<torch::Tensor> tensors, Launch&& launch) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    cudaEvent_t ready = nullptr, done = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream().stream()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
    cudaEventDestroy(ready);
    launch(stream_.stream());
    for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventRecord(done, stream_.stream()));
    return std::make_shared<NcclWork>(done, comm_, std::string(what) + " over the " + name_, timeout_s_);
  }

  ncclComm_t comm_;
  int device_;
  std::string name_;
  double timeout_s_;
  c10::cuda::CUDAStream stream_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device, const std::string& name,
                                                     double timeout_s) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  ncclUniqueId id;
  if (bootstrap.rank() == 0) LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
  auto bytes = torch::empty({static_cast<int64_t>(sizeof id)}, torch::kByte);
  std::memcpy(bytes.data_ptr(), &id, sizeof id);
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof id);
  ncclComm_t comm = nullptr;
  LOOM_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::make_unique<NcclCommunicator>(comm, device, name, timeout_s);
}

}  // namespace loom

#else  // built without CUDA

namespace loom {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, const std::string& name, double) {
  throw Error(name + ": NCCL needs a CUDA build of loom (LibTorch with CUDA and the CUDA toolkit)");
}

}  // namespace loom

#endif
