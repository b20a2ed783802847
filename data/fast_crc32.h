// CRC-32 through zlib (slicing tables, several GB/s): the same checksum as core/file_io.h's crc32, for the
// places that checksum whole corpora (`loom prepare`'s inputs and shards).
#pragma once
#include <zlib.h>

#include <cstddef>
#include <cstdint>

namespace loom {

inline uint32_t fast_crc32(const void* data, size_t size, uint32_t crc = 0) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), size));
}

}  // namespace loom
