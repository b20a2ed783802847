#include "core/cpu_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace loom {

// Every block starts with this header; the tensor's data follows it, so the deleter finds its block from
// the data pointer alone and the data keeps the 64-byte alignment of the block.
struct alignas(64) CachingCpuAllocator::Header {
  CachingCpuAllocator* owner;
  size_t capacity;   // the block's bytes, header included; 0: a small block, freed at once
  size_t requested;  // bytes of the tensor now in it
  uint64_t taken;    // the trim generation in which it was last handed out
};

namespace {

void* data_of(void* header) { return static_cast<char*>(header) + 64; }  // sizeof(Header)

// Blocks of 2 MiB or more start on a 2 MiB boundary and are marked for transparent huge pages (in the kernel's
// THP mode "madvise", Debian's default, only marked memory gets them): one TLB entry per 2 MiB of the
// activations, weights' copies and gradients the matrix products stream through. Measured on bench-gpt in
// bf16: ~2.5% less time per step. c10::free_cpu frees both kinds.
constexpr size_t kHugePage = size_t{2} << 20;

void* alloc_block(size_t bytes) {
  if (bytes < kHugePage) return c10::alloc_cpu(bytes);
  void* block = nullptr;
  TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&block, kHugePage, bytes) == 0,
                   "CPU allocator: out of memory allocating ", bytes, " bytes");
  madvise(block, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint: without THP it changes nothing
  return block;
}

}  // namespace

size_t CachingCpuAllocator::size_class(size_t bytes) {
  if (bytes < kMinCachedBytes) return bytes;
  size_t power = 1;
  while (power <= bytes / 2) power *= 2;  // the largest power of two <= bytes
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

void* CachingCpuAllocator::take(size_t capacity) {
  try {
    return alloc_block(capacity);
  } catch (const c10::Error&) {
    release_all();  // what the cache holds may be exactly what this request needs
    return alloc_block(capacity);
  }
}

c10::DataPtr CachingCpuAllocator::allocate(size_t bytes) {
  static_assert(sizeof(Header) == 64, "the header must keep the data 64-byte aligned");
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return {nullptr, nullptr, &free_block, cpu};
  const size_t total = bytes + sizeof(Header);
  const bool cached = total >= kMinCachedBytes;
  const size_t capacity = cached ? size_class(total) : total;
  Header* header = nullptr;
  uint64_t now = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    now = generation_;
    stats_.allocated += static_cast<int64_t>(bytes);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    if (cached) {
      auto& blocks = free_[capacity];
      if (!blocks.empty()) {
        header = blocks.back();
        blocks.pop_back();
        stats_.cached -= static_cast<int64_t>(capacity);
        stats_.reused += 1;
      } else {
        // New memory for a size the cache lacks: first let go of the blocks this step has not reused (with
        // varying shapes, last step's sizes), so the cache never holds them on top of this step's own.
        stats_.fresh += 1;
        release_stale();
      }
    }
    if (header != nullptr) {
      header->requested = bytes;
      header->taken = now;
    }
  }
  if (header == nullptr) {
    try {
      header = static_cast<Header*>(take(capacity));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated -= static_cast<int64_t>(bytes);  // nothing was allocated
      throw;
    }
    *header = Header{this, cached ? capacity : 0, bytes, now};
  }
  void* data = data_of(header);
  return {data, data, &free_block, cpu};
}

void CachingCpuAllocator::free_block(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - sizeof(Header));
  header->owner->give_back(header);
}

void CachingCpuAllocator::give_back(Header* header) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated -= static_cast<int64_t>(header->requested);
  if (header->capacity == 0) {
    c10::free_cpu(header);
    return;
  }
  free_[header->capacity].push_back(header);
  stats_.cached += static_cast<int64_t>(header->capacity);
}

c10::DeleterFnPtr CachingCpuAllocator::raw_deleter() const { return &free_block; }

void CachingCpuAllocator::copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }

void CachingCpuAllocator::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_stale();
  generation_ += 1;
}

void CachingCpuAllocator::release_stale() {
  for (auto& [capacity, blocks] : free_) {
    const auto unused =
        std::partition(blocks.begin(), blocks.end(), [this](const Header* h) { return h->taken == generation_; });
    for (auto it = unused; it != blocks.end(); ++it) {
      stats_.cached -= static_cast<int64_t>(capacity);
      c10::free_cpu(*it);
    }
    blocks.erase(unused, blocks.end());
  }
}

void CachingCpuAllocator::release_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [capacity, blocks] : free_)
    for (Header* header : blocks) c10::free_cpu(header);
  free_.clear();
  stats_.cached = 0;
}

CpuMemoryStats CachingCpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingCpuAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
}

namespace {
CachingCpuAllocator* installed = nullptr;
}

void use_cpu_allocator(CpuAllocatorKind kind) {
  if (kind == CpuAllocatorKind::kSystem) {
    c10::SetCPUAllocator(c10::GetDefaultCPUAllocator(), /*priority=*/0);
    installed = nullptr;
    return;
  }
  // Never destroyed: tensors freed during static destruction still find their allocator.
  static auto* allocator = new CachingCpuAllocator();
  c10::SetCPUAllocator(allocator, /*priority=*/0);
  installed = allocator;
}

CachingCpuAllocator* caching_cpu_allocator() { return installed; }

void retain_freed_malloc_memory() {
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's most on 64 bits
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace loom
