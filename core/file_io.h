// Durable file I/O: CRC-32 checksums, whole-file reads, and writes that are either complete or absent
// (temp file, fsync, rename, fsync of the directory).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace loom {

uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32_file(const std::filesystem::path& path);

std::string read_file(const std::filesystem::path& path);

// Writes `bytes` to path.tmp, fsyncs, renames over path and fsyncs the directory.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

void fsync_path(const std::filesystem::path& path);

}  // namespace loom
