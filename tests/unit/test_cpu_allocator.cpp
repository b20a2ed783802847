// The caching CPU allocator (core/cpu_allocator.h): size classes, reuse of freed blocks, trim, counting,
// alignment; and a model trained through it equals one trained through malloc.
#include <cstdint>
#include <set>

#include "core/cpu_allocator.h"
#include "test_util.h"

using loom::CachingCpuAllocator;

TEST_CASE("size classes: 8 per power of two, at most 12.5% slack, small sizes exact", "[allocator]") {
  CHECK(CachingCpuAllocator::size_class(1000) == 1000);
  CHECK(CachingCpuAllocator::size_class(262144) == 262144);           // 2^18: a class of its own
  CHECK(CachingCpuAllocator::size_class(262145) == 262144 + 32768);   // next eighth
  CHECK(CachingCpuAllocator::size_class(1 << 20) == (1 << 20));
  CHECK(CachingCpuAllocator::size_class((1 << 20) + 1) == (1 << 20) + (1 << 17));
  CHECK(CachingCpuAllocator::size_class(2047 * 1024) == 2048 * 1024);
  std::set<size_t> classes;
  for (size_t bytes = CachingCpuAllocator::kMinCachedBytes; bytes < (size_t{1} << 26); bytes = bytes * 17 / 16 + 12345) {
    const size_t c = CachingCpuAllocator::size_class(bytes);
    CHECK(c >= bytes);
    CHECK(static_cast<double>(c - bytes) <= 0.125 * static_cast<double>(bytes));
    CHECK(CachingCpuAllocator::size_class(c) == c);  // a class maps to itself
    classes.insert(c);
  }
  CHECK(classes.size() <= 8 * 8);  // 2^18 .. 2^26: 8 powers of two
}

TEST_CASE("freed large blocks are reused by their class, small ones go back at once", "[allocator]") {
  CachingCpuAllocator allocator;
  void* first = nullptr;
  {
    auto block = allocator.allocate(1 << 20);
    first = block.get();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    CHECK(allocator.stats().allocated == (1 << 20));
  }
  auto stats = allocator.stats();
  CHECK(stats.allocated == 0);
  CHECK(stats.peak_allocated == (1 << 20));
  CHECK(stats.cached == static_cast<int64_t>(CachingCpuAllocator::size_class((1 << 20) + 64)));
  CHECK(stats.fresh == 1);
  {
    auto again = allocator.allocate((1 << 20) + 1000);  // same class: the same block
    CHECK(again.get() == first);
    CHECK(allocator.stats().reused == 1);
    CHECK(allocator.stats().cached == 0);
    auto other = allocator.allocate(3 << 20);  // another class: new memory
    CHECK(other.get() != first);
    CHECK(allocator.stats().allocated == (1 << 20) + 1000 + (3 << 20));
    auto small = allocator.allocate(4096);
    CHECK(reinterpret_cast<uintptr_t>(small.get()) % 64 == 0);
  }
  CHECK(allocator.stats().allocated == 0);
  CHECK(allocator.stats().cached > 0);
  CHECK(allocator.stats().peak_allocated == (1 << 20) + 1000 + (3 << 20) + 4096);
  allocator.reset_peak();
  CHECK(allocator.stats().peak_allocated == 0);
  CHECK(allocator.allocate(0).get() == nullptr);
}

TEST_CASE("trim frees what the last step did not reuse and keeps what it did", "[allocator]") {
  CachingCpuAllocator allocator;
  const size_t kept = 2 << 20, dropped = 5 << 20;
  { auto a = allocator.allocate(kept), b = allocator.allocate(dropped); }
  allocator.trim();  // both were handed out in this generation: kept
  const auto both = allocator.stats().cached;
  CHECK(both == static_cast<int64_t>(CachingCpuAllocator::size_class(kept + 64) +
                                     CachingCpuAllocator::size_class(dropped + 64)));
  { auto a = allocator.allocate(kept); }  // the next "step" uses only the first size
  allocator.trim();
  CHECK(allocator.stats().cached == static_cast<int64_t>(CachingCpuAllocator::size_class(kept + 64)));
  allocator.trim();  // not used at all since: released
  CHECK(allocator.stats().cached == 0);
  { auto a = allocator.allocate(kept); }
  allocator.release_all();
  CHECK(allocator.stats().cached == 0);
}

TEST_CASE("a size the cache lacks first frees the blocks this step has not reused", "[allocator]") {
  CachingCpuAllocator allocator;
  { auto a = allocator.allocate(2 << 20), b = allocator.allocate(5 << 20); }
  allocator.trim();  // the next step begins: both are stale until reused
  {
    auto a = allocator.allocate(2 << 20);  // reused: no longer stale
    CHECK(allocator.stats().reused == 1);
    auto c = allocator.allocate(9 << 20);  // a new size: the stale 5 MiB block goes back to the system
    CHECK(allocator.stats().cached == 0);
  }
  CHECK(allocator.stats().cached == static_cast<int64_t>(CachingCpuAllocator::size_class((2 << 20) + 64) +
                                                         CachingCpuAllocator::size_class((9 << 20) + 64)));
}

TEST_CASE("a model trained through the caching allocator equals one trained through malloc", "[allocator]") {
  // Losses after a few AdamW steps: any block handed out while still in use, or read before written,
  // would change them.
  auto train = [](loom::CpuAllocatorKind kind) {
    loom::use_cpu_allocator(kind);
    torch::manual_seed(7);
    torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::GELU(), torch::nn::Linear(1024, 256));
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
    std::vector<float> losses;
    for (int step = 0; step < 4; ++step) {
      const auto x = torch::randn({64 + 32 * step, 256});  // a new shape each step
      optimizer.zero_grad();
      auto loss = (model->forward(x) - x).pow(2).mean();
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item<float>());
      if (auto* allocator = loom::caching_cpu_allocator()) allocator->trim();
    }
    return losses;
  };
  const auto with_malloc = train(loom::CpuAllocatorKind::kSystem);
  const auto cached = train(loom::CpuAllocatorKind::kCaching);
  CHECK(loom::caching_cpu_allocator() != nullptr);
  CHECK(loom::caching_cpu_allocator()->stats().reused > 0);
  CHECK(cached == with_malloc);
  loom::use_cpu_allocator(loom::CpuAllocatorKind::kSystem);
  CHECK(loom::caching_cpu_allocator() == nullptr);
}
