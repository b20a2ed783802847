// A fixed set of worker threads that runs jobs in any order and hands their results back in the order
// the jobs were submitted: `loom prepare` tokenizes batches of documents on every core and still writes
// them in input order, so its output is the same byte for byte whatever the number of threads. Each job
// gets the index of the worker that runs it (per-thread state such as a JSON parser). The caller bounds
// memory by how many jobs it keeps in flight (in_flight() after submit()). Destroying the pool (an error
// on the caller's side) waits for the jobs running and drops those not started.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

template <class Result>
class OrderedPool {
 public:
  explicit OrderedPool(size_t workers) {
    for (size_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w); });
  }
  ~OrderedPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  OrderedPool(const OrderedPool&) = delete;
  OrderedPool& operator=(const OrderedPool&) = delete;

  size_t workers() const { return threads_.size(); }
  size_t in_flight() const { return results_.size(); }

  void submit(std::function<Result(size_t worker)> job) {
    std::packaged_task<Result(size_t)> task(std::move(job));
    results_.push_back(task.get_future());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

  // The result of the oldest job still held, waiting for it; a job's exception is rethrown here.
  Result next() {
    auto future = std::move(results_.front());
    results_.pop_front();
    return future.get();
  }

 private:
  void work(size_t worker) {
    for (;;) {
      std::packaged_task<Result(size_t)> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;  // jobs not started are dropped: no one waits for them any more
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task(worker);
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<Result(size_t)>> jobs_;
  std::deque<std::future<Result>> results_;  // only the submitting thread touches it
  bool stopping_ = false;
};

}  // namespace loom
