#include "serve/engine_worker.h"

#include <exception>

#include "core/logging.h"

namespace loom {

EngineWorker::EngineWorker(Engine& engine, StepLeader* leader) : engine_(engine), leader_(leader) {
  metrics_.kv_blocks_total = engine_.pool().blocks();
  metrics_.kv_block_size = engine_.pool().block_size();
  thread_ = std::thread([this] { loop(); });
}

EngineWorker::~EngineWorker() {
  close();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<EngineWorker::Job> EngineWorker::submit(GenerationRequest request, bool streaming) {
  auto job = std::make_shared<Job>();
  job->request = std::move(request);
  job->streaming = streaming;
  job->request.stream = true;  // every token as it comes: streams, the time to first token, the rate
  job->submitted = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) {
      job->error = "the server is shutting down";
      return job;
    }
    ++metrics_.requests;
    incoming_.push_back(job);
  }
  wake_.notify_all();
  return job;
}

bool EngineWorker::wait(Job& job, std::vector<TextDelta>& deltas, std::optional<Completion>& done, std::string& error,
                        std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  job.changed.wait_for(lock, timeout, [&] { return !job.deltas.empty() || job.done || !job.error.empty(); });
  while (!job.deltas.empty()) {
    deltas.push_back(std::move(job.deltas.front()));
    job.deltas.pop_front();
  }
  if (job.done) done = std::move(job.done);
  error = job.error;
  return done.has_value() || !error.empty();
}

void EngineWorker::cancel(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job->cancel_requested || job->done || !job->error.empty()) return;
    job->cancel_requested = true;
    cancels_.push_back(job);
  }
  wake_.notify_all();
}

void EngineWorker::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
    for (auto& job : incoming_) {  // never reached the engine
      job->error = "the server is shutting down";
      job->changed.notify_all();
    }
    incoming_.clear();
    for (auto& [id, job] : live_) {
      if (job->cancel_requested) continue;
      job->cancel_requested = true;
      cancels_.push_back(job);
    }
  }
  wake_.notify_all();
}

ServeMetrics EngineWorker::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ServeMetrics out = metrics_;
  out.tokens_per_second = const_cast<RateWindow&>(rate_).per_second(std::chrono::steady_clock::now());
  return out;
}

void EngineWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || busy_ || !incoming_.empty() || !cancels_.empty(); });
    if (stopping_ && !busy_ && incoming_.empty() && cancels_.empty()) break;
    auto incoming = std::move(incoming_);
    auto cancels = std::move(cancels_);
    incoming_.clear();
    cancels_.clear();
    lock.unlock();

    std::vector<std::shared_ptr<Job>> added, refused;
    std::vector<std::string> reasons;
    int64_t prompt_tokens = 0;
    for (auto& job : incoming) {
      try {
        job->id = add(job->request);
        added.push_back(job);
        prompt_tokens += static_cast<int64_t>(job->request.prompt.size());
      } catch (const std::exception& e) {
        refused.push_back(job);
        reasons.push_back(e.what());
      }
    }
    for (auto& job : cancels)
      if (job->id >= 0) cancel_id(job->id);
    std::vector<Completion> done;
    std::vector<TextDelta> deltas;
    std::string failure;
    try {
      done = step();
      deltas = engine_.take_deltas();
    } catch (const std::exception& e) {  // the batch's forward failed: every live request ends with the error
      failure = e.what();
      spdlog::error("loom serve: an engine step failed: {}", failure);
    }

    lock.lock();
    for (auto& job : added) {
      live_[job->id] = job;
      if (closed_ && !job->cancel_requested) {  // closed while it was being added: cancelled next step
        job->cancel_requested = true;
        cancels_.push_back(job);
      }
    }
    for (size_t i = 0; i < refused.size(); ++i) {
      refused[i]->error = reasons[i];
      ++metrics_.finished["error"];
      refused[i]->changed.notify_all();
    }
    metrics_.prompt_tokens += prompt_tokens;
    if (failure.empty()) {
      deliver(deltas, done);
    } else {
      for (auto& [id, job] : live_) {
        cancel_id(id);
        job->error = "the engine failed: " + failure;
        ++metrics_.finished["error"];
        job->changed.notify_all();
      }
      live_.clear();
      step();  // frees the cancelled ones' blocks
      engine_.take_deltas();
    }
    const auto& stats = engine_.stats();
    metrics_.steps = stats.steps;
    metrics_.preemptions = stats.preemptions;
    metrics_.prefix_hit_tokens = stats.prefix_hit_tokens;
    metrics_.drafted_tokens = stats.drafted_tokens;
    metrics_.accepted_tokens = stats.accepted_tokens;
    metrics_.kv_blocks_cached = engine_.pool().cached_blocks();
    metrics_.running = engine_.running();
    metrics_.waiting = engine_.waiting();
    metrics_.kv_blocks_used = engine_.pool().used_blocks();
    busy_ = !engine_.idle() || !cancels_.empty();
  }
}

void EngineWorker::deliver(const std::vector<TextDelta>& deltas, std::vector<Completion>& done) {
  const auto now = std::chrono::steady_clock::now();
  int64_t generated = 0;
  for (const auto& delta : deltas) {
    const auto it = live_.find(delta.id);
    if (it == live_.end()) continue;
    auto& job = *it->second;
    if (!delta.tokens.empty() && !job.first_token_seen) {
      job.first_token_seen = true;
      metrics_.ttft.observe(std::chrono::duration<double>(now - job.submitted).count());
    }
    generated += static_cast<int64_t>(delta.tokens.size());
    if (!job.streaming) continue;
    job.deltas.push_back(delta);
    job.changed.notify_all();
  }
  metrics_.generated_tokens += generated;
  rate_.add(generated, now);
  for (auto& c : done) {
    const auto it = live_.find(c.id);
    if (it == live_.end()) continue;
    ++metrics_.finished[finish_reason_name(c.finish)];
    if (c.drafted > 0) metrics_.acceptance.observe(static_cast<double>(c.accepted) / static_cast<double>(c.drafted));
    it->second->done = std::move(c);
    it->second->changed.notify_all();
    live_.erase(it);
  }
}

}  // namespace loom
