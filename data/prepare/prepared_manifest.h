// DIR/manifest.json of a prepared directory (`loom prepare`): what went in (each input's path, size and
// CRC-32; the tokenizer's path, checksum and vocabulary; the options that decide the output), what came
// out (per split: documents, tokens, text bytes and the shards), and what was left out (skipped documents
// by reason). Written last, atomically: a directory without one is not a prepared dataset, whatever
// shards it holds. Training reads the shard list from it (data/corpus/token_corpus.h); a re-run compares it with
// what it would write to find it has nothing to do.
//
// Designed to grow: a shard entry may later name per-token side files (an SFT loss mask) beside its
// index, and readers ignore keys they do not know.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/prepare/shard_writer.h"

namespace loom {

struct PreparedInput {
  std::string path;  // absolute
  std::string format, compression;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct PreparedTokenizer {
  std::string path;  // absolute, or a name inside the directory when prepare trained it
  uint32_t checksum = 0;
  int64_t vocab_size = 0;
  int32_t eos_id = -1;
  bool trained = false;  // by --train-tokenizer, into the directory
};

struct PreparedSplit {
  int64_t documents = 0, tokens = 0, text_bytes = 0;
  std::vector<ShardInfo> shards;
};

struct PreparedManifest {
  std::vector<PreparedInput> inputs;
  PreparedTokenizer tokenizer;
  nlohmann::json options;  // every option that changes the output (not --threads: it does not)
  std::array<PreparedSplit, 2> splits;  // train, valid (data/prepare/document_encoder.h's Split)
  std::map<std::string, int64_t> skipped;  // by skip_reason_key
};

constexpr const char* kManifestName = "manifest.json";

nlohmann::json manifest_json(const PreparedManifest& manifest);
void write_prepared_manifest(const std::filesystem::path& dir, const PreparedManifest& manifest);

bool is_prepared_dir(const std::filesystem::path& dir);
// Reads and checks DIR/manifest.json; throws loom::Error naming the file and what is wrong.
PreparedManifest read_prepared_manifest(const std::filesystem::path& dir);

}  // namespace loom
