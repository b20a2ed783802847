// A SentencePiece model behind the few calls loom needs. The model file's CRC-32 ties token files
// to the tokenizer that made them.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

class Tokenizer {
 public:
  explicit Tokenizer(const std::filesystem::path& model_path);
  ~Tokenizer();

  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int64_t vocab_size() const;
  int32_t eos_id() const;  // -1: none
  int32_t bos_id() const;  // -1: none
  int32_t pad_id() const;  // -1: none
  uint32_t checksum() const { return checksum_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  uint32_t checksum_ = 0;
};

}  // namespace loom
