// A caching allocator for CPU tensors (runtime.cpu_allocator: caching), what PyTorch's CUDA allocator is
// for GPU memory. A training step allocates and frees the same large activation and gradient buffers every
// step; through malloc each of them costs fresh pages (page faults, zeroing by the kernel: ~8% of a bench-gpt
// step) and the heap fragments (peak RSS ~40% above the tensors in use under activation checkpointing).
// Here a freed block of 256 KiB or more is kept in a free list of its size class (8 classes per power of
// two, so at most 12.5% of a block is slack) and handed out again for a request of that class; smaller
// requests go to malloc. Blocks of 2 MiB or more are 2 MiB-aligned and marked for transparent huge pages.
// trim() (the Trainer calls it after every step) returns to the system the cached
// blocks that were not reused since the previous trim, and a request the cache cannot serve first frees
// the blocks not yet reused in this step, so variable batch shapes (translation) cannot pile up blocks of
// old sizes. It also counts the bytes in tensors (current and peak), which
// `loom bench` reports as peak_allocated_mb next to the process's peak RSS.
#pragma once
#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/config_enums.h"  // CpuAllocatorKind

namespace loom {

struct CpuMemoryStats {
  int64_t allocated = 0;       // bytes in live tensors (requested sizes)
  int64_t peak_allocated = 0;  // since the last reset_peak()
  int64_t cached = 0;          // bytes in free blocks kept for reuse
  int64_t reused = 0;          // allocations served from the cache
  int64_t fresh = 0;           // large allocations that needed new memory
};

class CachingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kMinCachedBytes = 256 * 1024;

  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, size_t count) const override;

  void trim();  // frees the cached blocks not handed out since the last trim()
  void release_all();
  CpuMemoryStats stats() const;
  void reset_peak();

  // The size class of a request: the smallest of 8 steps per power of two that holds it.
  static size_t size_class(size_t bytes);

 private:
  struct Header;
  static void free_block(void* data);
  void give_back(Header* header);
  void* take(size_t capacity);
  void release_stale();  // frees the cached blocks not handed out in this generation; under mutex_

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<Header*>> free_;  // size class -> free blocks
  CpuMemoryStats stats_;
  uint64_t generation_ = 0;  // advanced by trim()
};

// Makes `kind` the allocator of new CPU tensors (runtime.cpu_allocator); the first call with kCaching
// installs the process's one CachingCpuAllocator, kSystem puts LibTorch's default back.
void use_cpu_allocator(CpuAllocatorKind kind);
// The installed caching allocator, or null when CPU tensors come from the system allocator.
CachingCpuAllocator* caching_cpu_allocator();

// glibc malloc's policy, process-wide, for a process whose tensor sizes change every step (the inference engine
// of loom serve and loom generate --input, where the caching allocator's per-step trim does not fit): glibc's
// defaults hand freed memory back to the system (a heap top above 128 KiB is trimmed, blocks above a moving
// threshold are mapped afresh), so each step faults the pages in again, each zeroed by the kernel (slow under a
// hypervisor: 5-10% of the CPU at 64 concurrent requests). This keeps it in the heap instead (mallopt: no trimming
// below 1 GiB, fresh mappings only from 32 MiB, 64 MiB of slack at the top). Once, before the work.
void retain_freed_malloc_memory();

}  // namespace loom
