// A group of one rank: all-reduce, broadcast and barrier leave data as it is; all-gather and
// reduce-scatter and all-to-all copy the one chunk. Point-to-point has no peer and is an error.
#include "core/error.h"
#include "parallel/communicator.h"

namespace loom {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

  std::shared_ptr<Work> all_reduce_async(torch::Tensor, ReduceOp) override { return done(); }
  std::shared_ptr<Work> all_gather_async(torch::Tensor input, torch::Tensor output) override {
    output.view(-1).copy_(input.reshape(-1));
    return done();
  }
  std::shared_ptr<Work> reduce_scatter_async(torch::Tensor input, torch::Tensor output) override {
    output.view(-1).copy_(input.reshape(-1));
    return done();
  }
  std::shared_ptr<Work> broadcast_async(torch::Tensor, int) override { return done(); }
  std::shared_ptr<Work> send_async(torch::Tensor, int peer, int) override { return no_peer(peer); }
  std::shared_ptr<Work> recv_async(torch::Tensor, int peer, int) override { return no_peer(peer); }
  std::shared_ptr<Work> barrier_async() override { return done(); }
  std::shared_ptr<Work> all_to_all_async(torch::Tensor input, torch::Tensor output, std::vector<int64_t> send_rows,
                                         std::vector<int64_t> recv_rows) override {
    LOOM_CHECK(send_rows.size() == 1 && recv_rows.size() == 1 && send_rows[0] == recv_rows[0] &&
                   input.size(0) == send_rows[0] && output.size(0) == recv_rows[0],
               name_, ": all_to_all of one rank sends its rows to itself");
    output.copy_(input);
    return done();
  }
  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    return std::make_unique<SelfCommunicator>(name);
  }

 private:
  static std::shared_ptr<Work> done() { return std::make_shared<DoneWork>(); }
  std::shared_ptr<Work> no_peer(int peer) const {
    throw Error(name_ + ": no rank " + std::to_string(peer) + " to talk to in a group of one");
  }
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace loom
