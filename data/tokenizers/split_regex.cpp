#include "data/tokenizers/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace loom {
namespace {

// Per-thread match data and JIT stack; 8 MB of JIT stack is far more than any split pattern needs on
// the longest run of one character class.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string with_reference_classes(const std::string& pattern) {
  // Unicode's \w (UTS #18), which Rust's regex and Oniguruma match; PCRE2's \w leaves out marks and more.
  static const std::string kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else if (e == 'w') {
        out += in_class ? kWord : "[" + kWord + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + kWord + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (close != std::string::npos) {
        out += pattern.substr(i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

SplitRegex::SplitRegex(const std::string& pattern, RegexDialect dialect, const std::string& where)
    : pattern_(pattern) {
  const std::string compiled = with_reference_classes(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  options |= dialect == RegexDialect::kTiktoken ? PCRE2_DOLLAR_ENDONLY : PCRE2_MULTILINE;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr)
    throw Error(where + ": the split pattern does not compile (PCRE2: " + pcre2_message(error) + " at offset " +
                std::to_string(error_offset) + "): " + pattern);
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool SplitRegex::find(std::string_view text, size_t offset, size_t& start, size_t& end) const {
  ThreadMatchState& state = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto* code = static_cast<const pcre2_code*>(code_);
  const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, 0, state.data, state.context)
                      : pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw Error("split pattern " + pattern_ + ": " + pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  start = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace loom
