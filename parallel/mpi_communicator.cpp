// The MPI backend of Communicator (CPU tensors), and the process set-up that goes with it
// (parallel/process_group.h). Each communicator owns worker threads that run its MPI calls in order
// (collectives on one, sends and receives on one each), so an async collective really proceeds while the
// caller computes (backward overlaps gradient all-reduce), and waiting on it can time out.
#include "parallel/process_group.h"

// The C API only: OpenMPI's deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.h"

#define LOOM_MPI_CHECK(call)                                                                     \
  do {                                                                                          \
    const int loom_mpi_rc = (call);                                                             \
    if (loom_mpi_rc != MPI_SUCCESS) ::loom::throw_mpi_error(loom_mpi_rc, #call, __FILE__, __LINE__); \
  } while (0)

namespace loom {

[[noreturn]] void throw_mpi_error(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + std::string(text, length));
}

namespace {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "LOOM_MPI"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

MPI_Datatype mpi_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kLong: return MPI_INT64_T;
    case torch::kInt: return MPI_INT32_T;
    case torch::kByte: return MPI_UINT8_T;
    case torch::kChar: return MPI_INT8_T;
    case torch::kBool: return MPI_C_BOOL;
    default: throw Error(std::string("MPI cannot reduce tensors of type ") + c10::toString(t.scalar_type()));
  }
}

void check_cpu_contiguous(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), what, ": the MPI backend takes CPU tensors (CUDA tensors go through NCCL)");
  TORCH_CHECK(t.is_contiguous(), what, ": tensor must be contiguous");
}

// Copies data as raw bytes: any dtype, bf16 included.
int byte_count(const torch::Tensor& t) {
  const auto bytes = t.numel() * static_cast<int64_t>(t.element_size());
  TORCH_CHECK(bytes <= std::numeric_limits<int>::max(), "message of ", bytes, " bytes is beyond one MPI call");
  return static_cast<int>(bytes);
}

// All-to-all's checks: one count per rank, the rows' sums equal to the tensors' first dims, one row shape and
// dtype. Returns a row's bytes.
int64_t rows_bytes(const torch::Tensor& input, const torch::Tensor& output, const std::vector<int64_t>& send_rows,
                   const std::vector<int64_t>& recv_rows, int ranks) {
  TORCH_CHECK(static_cast<int>(send_rows.size()) == ranks && static_cast<int>(recv_rows.size()) == ranks,
              "all_to_all: one row count per rank");
  TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1 && input.sizes().slice(1) == output.sizes().slice(1) &&
                  input.dtype() == output.dtype(),
              "all_to_all: input and output need the same row shape and dtype");
  int64_t sent = 0, received = 0;
  for (int64_t r : send_rows) sent += r;
  for (int64_t r : recv_rows) received += r;
  TORCH_CHECK(sent == input.size(0) && received == output.size(0), "all_to_all: the row counts sum to ", sent, " and ",
              received, " but the tensors hold ", input.size(0), " and ", output.size(0), " rows");
  return c10::multiply_integers(input.sizes().slice(1)) * static_cast<int64_t>(input.element_size());
}

// Runs its communicator's MPI calls one after another on its own thread. The queue lives in state
// shared with the thread, so a thread stuck in a call on a dead peer can be let go (detached) safely.
class Worker {
 public:
  Worker() : state_(std::make_shared<State>()), thread_([state = state_] { loop(*state); }) {}
  ~Worker() {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
      busy = state_->busy;
    }
    state_->ready.notify_one();
    // A call stuck on a failed peer never returns: leave it to the abort that follows such a failure.
    if (busy) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  std::shared_future<void> submit(std::function<void()> task) {
    auto promise = std::make_shared<std::promise<void>>();
    std::shared_future<void> done = promise->get_future().share();
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->tasks.emplace_back([task = std::move(task), promise] {
        try {
          task();
          promise->set_value();
        } catch (...) {
          promise->set_exception(std::current_exception());
        }
      });
    }
    state_->ready.notify_one();
    return done;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::function<void()>> tasks;
    bool busy = false;
    bool stopping = false;
  };

  static void loop(State& state) {
    std::unique_lock<std::mutex> lock(state.mutex);
    for (;;) {
      state.ready.wait(lock, [&state] { return state.stopping || !state.tasks.empty(); });
      if (state.tasks.empty()) return;
      auto task = std::move(state.tasks.front());
      state.tasks.pop_front();
      state.busy = true;
      lock.unlock();
      task();
      lock.lock();
      state.busy = false;
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

class MpiWork : public Work {
 public:
  MpiWork(std::shared_future<void> done, std::string what, double timeout_s)
      : done_(std::move(done)), what_(std::move(what)), timeout_s_(timeout_s) {}
  void wait() override {
    const auto limit = std::chrono::duration<double>(timeout_s_);
    if (done_.wait_for(limit) != std::future_status::ready)
      throw Error(collective_timeout_message(what_, timeout_s_));
    done_.get();
  }

 private:
  std::shared_future<void> done_;
  std::string what_;
  double timeout_s_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s, bool owned)
      : comm_(comm), name_(std::move(name)), timeout_s_(timeout_s), owned_(owned) {
    LOOM_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    LOOM_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    LOOM_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    worker_ = std::make_unique<Worker>();
    send_worker_ = std::make_unique<Worker>();
    recv_worker_ = std::make_unique<Worker>();
  }
  ~MpiCommunicator() override {
    worker_.reset();
    send_worker_.reset();
    recv_worker_.reset();
    if (owned_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  std::shared_ptr<Work> all_reduce_async(torch::Tensor tensor, ReduceOp op) override {
    check_cpu_contiguous(tensor, "all_reduce");
    const MPI_Op mpi_op = op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
    return run("all_reduce", [this, tensor, mpi_op] {
      // MPI has no bf16 or fp16: reduce those in fp32 and round once at the end.
      const bool widen = tensor.scalar_type() == torch::kBFloat16 || tensor.scalar_type() == torch::kHalf;
      torch::Tensor buffer = widen ? tensor.to(torch::kFloat) : tensor;
      LOOM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(buffer.numel()),
                                   mpi_type(buffer), mpi_op, comm_));
      if (widen) tensor.copy_(buffer);
    });
  }

  std::shared_ptr<Work> all_gather_async(torch::Tensor input, torch::Tensor output) override {
    check_cpu_contiguous(input, "all_gather");
    check_cpu_contiguous(output, "all_gather");
    TORCH_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
                "all_gather: output must hold size() x input.numel() elements of the input's dtype");
    return run("all_gather", [this, input, output] {
      LOOM_MPI_CHECK(MPI_Allgather(input.data_ptr(), byte_count(input), MPI_BYTE, output.data_ptr(),
                                   byte_count(input), MPI_BYTE, comm_));
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(torch::Tensor input, torch::Tensor output) override {
    check_cpu_contiguous(input, "reduce_scatter");
    check_cpu_contiguous(output, "reduce_scatter");
    TORCH_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(),
                "reduce_scatter: input must hold size() x output.numel() elements of the output's dtype");
    return run("reduce_scatter", [this, input, output] {
      const bool widen = input.scalar_type() == torch::kBFloat16 || input.scalar_type() == torch::kHalf;
      torch::Tensor in = widen ? input.to(torch::kFloat) : input;
      torch::Tensor out = widen ? torch::empty({output.numel()}, torch::kFloat) : output;
      LOOM_MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), static_cast<int>(out.numel()),
                                              mpi_type(in), MPI_SUM, comm_));
      if (widen) output.view(-1).copy_(out);
    });
  }

  std::shared_ptr<Work> broadcast_async(torch::Tensor tensor, int root) override {
    check_cpu_contiguous(tensor, "broadcast");
    return run("broadcast", [this, tensor, root] {
      LOOM_MPI_CHECK(MPI_Bcast(tensor.data_ptr(), byte_count(tensor), MPI_BYTE, root, comm_));
    });
  }

  std::shared_ptr<Work> send_async(torch::Tensor tensor, int peer, int tag) override {
    check_cpu_contiguous(tensor, "send");
    return run(*send_worker_, "send to rank " + std::to_string(peer), [this, tensor, peer, tag] {
      LOOM_MPI_CHECK(MPI_Send(tensor.data_ptr(), byte_count(tensor), MPI_BYTE, peer, tag, comm_));
    });
  }

  std::shared_ptr<Work> recv_async(torch::Tensor tensor, int peer, int tag) override {
    check_cpu_contiguous(tensor, "recv");
    return run(*recv_worker_, "recv from rank " + std::to_string(peer), [this, tensor, peer, tag] {
      LOOM_MPI_CHECK(MPI_Recv(tensor.data_ptr(), byte_count(tensor), MPI_BYTE, peer, tag, comm_, MPI_STATUS_IGNORE));
    });
  }

  std::shared_ptr<Work> barrier_async() override {
    return run("barrier", [this] { LOOM_MPI_CHECK(MPI_Barrier(comm_)); });
  }

  std::shared_ptr<Work> all_to_all_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> send_rows,
                                         std::vector<int64_t> recv_rows) override {
    check_cpu_contiguous(input, "all_to_all");
    check_cpu_contiguous(output, "all_to_all");
    // In bytes (any dtype): a row is the elements past dim 0.
    const int64_t row_bytes = rows_bytes(input, output, send_rows, recv_rows, size_);
    auto bytes = [row_bytes](const std::vector<int64_t>& rows, std::vector<int>& counts, std::vector<int>& offsets) {
      int64_t offset = 0;
      for (int64_t r : rows) {
        const int64_t n = r * row_bytes;
        TORCH_CHECK(offset + n <= std::numeric_limits<int>::max(), "all_to_all: beyond one MPI call's bytes");
        counts.push_back(static_cast<int>(n));
        offsets.push_back(static_cast<int>(offset));
        offset += n;
      }
    };
    auto plan = std::make_shared<std::array<std::vector<int>, 4>>();
    bytes(send_rows, (*plan)[0], (*plan)[1]);
    bytes(recv_rows, (*plan)[2], (*plan)[3]);
    return run("all_to_all", [this, input, output, plan] {
      auto& p = *plan;
      LOOM_MPI_CHECK(MPI_Alltoallv(input.data_ptr(), p[0].data(), p[1].data(), MPI_BYTE, output.data_ptr(),
                                   p[2].data(), p[3].data(), MPI_BYTE, comm_));
    });
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    MPI_Comm sub = MPI_COMM_NULL;
    // Collective over this group: through the worker so that it is ordered after earlier async calls.
    run("split", [&] { LOOM_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub)); })->wait();
    return std::make_unique<MpiCommunicator>(sub, name, timeout_s_, /*owned=*/true);
  }

 private:
  std::shared_ptr<Work> run(const std::string& what, std::function<void()> task) {
    return run(*worker_, what, std::move(task));
  }
  std::shared_ptr<Work> run(Worker& worker, const std::string& what, std::function<void()> task) {
    return std::make_shared<MpiWork>(worker.submit(std::move(task)), what + " over the " + name_, timeout_s_);
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_s_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
  // Collectives run in call order on one thread (MPI needs the same order on every rank); sends and
  // receives each have their own, so a rank can wait for a message while its own send is under way.
  std::unique_ptr<Worker> worker_, send_worker_, recv_worker_;
};

}  // namespace

ProcessGroup::ProcessGroup() {
  if (!launched_by_mpirun()) return;
  int provided = 0;
  LOOM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  mpi_ = true;
  if (provided < MPI_THREAD_MULTIPLE)
    throw Error("this MPI library does not provide MPI_THREAD_MULTIPLE, which loom's communicators need");
  LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info_.rank));
  LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info_.world_size));
  MPI_Comm node = MPI_COMM_NULL;
  LOOM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &node));
  LOOM_MPI_CHECK(MPI_Comm_rank(node, &info_.local_rank));
  LOOM_MPI_CHECK(MPI_Comm_size(node, &info_.local_size));
  MPI_Comm_free(&node);
}

ProcessGroup::~ProcessGroup() {
  if (mpi_) MPI_Finalize();
}

std::unique_ptr<Communicator> ProcessGroup::world(double timeout_s) const {
  if (!mpi_) return make_self_communicator("world");
  MPI_Comm comm = MPI_COMM_NULL;
  LOOM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiCommunicator>(comm, "world", timeout_s, /*owned=*/true);
}

void ProcessGroup::abort(int exit_code) const {
  if (mpi_ && info_.world_size > 1) {
    // MPI_Abort asks mpirun to end every rank. When mpirun's node cannot be reached (a cut link) it may
    // never return: this rank leaves regardless, and mpirun learns of the lost node by its keepalive.
    std::thread([exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::_Exit(exit_code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::_Exit(exit_code);
}

}  // namespace loom
