// The one thread that runs the inference engine (serve/engine.h) for `loom serve`'s HTTP handler threads. A
// handler submits a request and waits for its output; the worker thread alone calls the Engine: it takes the new
// requests and cancellations under the mutex, steps the engine without it (so handlers never wait on a forward),
// then hands each request its new pieces and its completion and wakes its waiter (a mutex and a condition variable
// per job: no engine call from two threads). It steps while any request waits or runs and sleeps otherwise. It also
// keeps the server's numbers for GET /metrics (serve/serve_metrics.h).
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "serve/engine.h"
#include "serve/serve_metrics.h"
#include "serve/step_broadcast.h"

namespace loom {

class EngineWorker {
 public:
  // A submitted request's output as the worker hands it over.
  struct Job {
    GenerationRequest request;
    std::chrono::steady_clock::time_point submitted;
    // Guarded by the worker's mutex:
    std::deque<TextDelta> deltas;
    std::optional<Completion> done;
    std::string error;  // the engine refused it or failed: no completion follows
    bool cancel_requested = false;
    bool first_token_seen = false;
    bool streaming = false;  // its waiter takes the pieces as they come; else it is woken for the end only
    int64_t id = -1;  // the engine's, once added
    std::condition_variable changed;
  };

  // Starts the thread. The engine is the worker's alone from now on. leader (tensor-parallel serving,
  // serve/step_broadcast.h): the engine's changes and steps go through it, to the other ranks too.
  explicit EngineWorker(Engine& engine, StepLeader* leader = nullptr);
  ~EngineWorker();  // close(), then joins the thread

  // Queues a request. streaming: its pieces (TextDelta) are handed to wait() as they come; else wait() returns
  // at its end only (the engine streams every request all the same: the time to first token, the rate). After
  // close() the job comes back with its error set.
  std::shared_ptr<Job> submit(GenerationRequest request, bool streaming);
  // Waits (at most `timeout`) until the job has new pieces, its completion or an error; moves the pieces into
  // `deltas`. True when the job is over (done or error): then `done` is its completion (or empty on error).
  bool wait(Job& job, std::vector<TextDelta>& deltas, std::optional<Completion>& done, std::string& error,
            std::chrono::milliseconds timeout);
  // The job leaves the engine (a client that went away); its blocks are freed with the next step.
  void cancel(const std::shared_ptr<Job>& job);
  // Refuses new requests and cancels every live one (shutdown); the thread runs on until destruction.
  void close();

  ServeMetrics metrics() const;

 private:
  void loop();
  void deliver(const std::vector<TextDelta>& deltas, std::vector<Completion>& done);
  int64_t add(const GenerationRequest& request) { return leader_ ? leader_->add(request) : engine_.add(request); }
  void cancel_id(int64_t id) { leader_ ? leader_->cancel(id) : engine_.cancel(id); }
  std::vector<Completion> step() { return leader_ ? leader_->step() : engine_.step(); }

  Engine& engine_;
  StepLeader* leader_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the worker's: new work, a cancellation, stop
  std::vector<std::shared_ptr<Job>> incoming_;
  std::vector<std::shared_ptr<Job>> cancels_;
  std::map<int64_t, std::shared_ptr<Job>> live_;  // in the engine, by its id
  bool busy_ = false, closed_ = false, stopping_ = false;
  ServeMetrics metrics_;
  RateWindow rate_;
  std::thread thread_;
};

}  // namespace loom
