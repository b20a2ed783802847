// The decoder and post-processor of a Hugging Face tokenizer.json. Decoders, chained over the list of
// token strings as Hugging Face does: ByteLevel (alphabet characters back to bytes, then lossy UTF-8),
// ByteFallback (<0xXX> runs to their bytes), Fuse, Replace, Strip, WordPiece (## pieces joined, the others
// after a space, with its cleanup) and Sequence; none: tokens joined by spaces. Post-processors, for
// add_special_tokens: TemplateProcessing (its single-sequence template),
// RobertaProcessing and BertProcessing (cls ... sep), ByteLevel (adds nothing) and Sequence. Other
// types are refused at load, naming them.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom {

class HfDecoder {
 public:
  HfDecoder(const nlohmann::json& spec, const std::string& where);
  ~HfDecoder();
  std::string decode(std::vector<std::string> tokens) const;

  struct Step;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
  bool none_ = false;
};

// What add_special_tokens puts around one sequence.
struct HfPostProcessor {
  std::vector<int32_t> prefix, suffix;
};

// `token_id` maps a token's text to its id (-1: unknown), for the templates that name tokens.
HfPostProcessor parse_hf_post_processor(const nlohmann::json& spec, const std::string& where,
                                        const std::function<int32_t(const std::string&)>& token_id);

}  // namespace loom
