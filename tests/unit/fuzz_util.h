// Fuzz-style checks shared by the readers of untrusted files (token files, pair files, safetensors):
// many damaged versions of a valid file, each of which must be read correctly or refused with a
// loom::Error naming the file. Never another exception, a crash, or a read past the end of the file.
#pragma once
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace loom::test {

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

using Mutations = std::vector<std::pair<std::string, std::string>>;  // (description, bytes)

// Every way to damage `good` whose first `header` bytes are its header: cut at every length, every header
// byte flipped several ways, random data bytes flipped, padding, another format's magic, garbage.
inline Mutations mutations(const std::string& good, size_t header = 64) {
  Mutations out;
  for (size_t length = 0; length < good.size(); ++length) out.emplace_back("cut at " + std::to_string(length), good.substr(0, length));
  for (size_t i = 0; i < std::min(header, good.size()); ++i)
    for (const int mask : {0x01, 0x02, 0x10, 0x80, 0xFF}) {
      auto bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ mask);
      out.emplace_back("header byte " + std::to_string(i) + " ^ " + std::to_string(mask), bytes);
    }
  std::mt19937 random(7);
  if (good.size() > header)
    for (int n = 0; n < 300; ++n) {
      auto bytes = good;
      const size_t at = header + random() % (good.size() - header);
      bytes[at] = static_cast<char>(bytes[at] ^ (1 + random() % 255));
      out.emplace_back("data byte " + std::to_string(at), bytes);
    }
  out.emplace_back("padded", good + std::string(2, '\0'));
  out.emplace_back("another format", "PK\x03\x04" + good.substr(4));
  out.emplace_back("text", "In the beginning God created the heaven and the earth.\n" + std::string(64, 'x'));
  std::string garbage(good.size(), '\0');
  for (auto& c : garbage) c = static_cast<char>(random());
  out.emplace_back("garbage", garbage);
  return out;
}

// Writes each mutation to dir and opens it with `open`, which must read everything it opened; returns how
// many opened. A refusal must be a loom::Error naming the file.
template <class Open>
int64_t fuzz(const std::filesystem::path& dir, const Mutations& cases, Open open) {
  int64_t opened = 0, refused = 0;
  for (const auto& [what, bytes] : cases) {
    const auto path = dir / "mutated.bin";
    write_bytes(path, bytes);
    try {
      open(path);
      ++opened;
    } catch (const loom::Error& e) {
      ++refused;
      INFO(what << ": " << e.what());
      CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
    } catch (const std::exception& e) {
      FAIL(what << ": not a loom::Error: " << e.what());
    }
  }
  UNSCOPED_INFO(opened << " opened, " << refused << " refused");
  return opened;
}

}  // namespace loom::test
