#include "data/prepare/document_reader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace loom {
namespace {

constexpr size_t kReadBytes = 1 << 20;

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; });
}

}  // namespace

DocumentReader::DocumentReader(InputStream& stream, DocumentSplit split, size_t max_bytes)
    : stream_(stream), split_(split), max_bytes_(max_bytes), buffer_(kReadBytes, '\0') {}

bool DocumentReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {  // keep the unread tail at the front
    std::memmove(&buffer_[0], &buffer_[begin_], end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() - end_ < kReadBytes) buffer_.resize(end_ + kReadBytes);
  const size_t n = stream_.read(&buffer_[end_], kReadBytes);
  if (n == 0) eof_ = true;
  end_ += n;
  return n > 0;
}

bool DocumentReader::next_line(std::string_view& line, bool& too_long) {
  too_long = false;
  size_t scanned = 0;  // unread bytes known to hold no '\n' (an offset from begin_: fill() moves them)
  for (;;) {
    const void* found = std::memchr(&buffer_[begin_ + scanned], '\n', end_ - begin_ - scanned);
    if (found) {
      const size_t at = static_cast<size_t>(static_cast<const char*>(found) - buffer_.data());
      line = std::string_view(&buffer_[begin_], at - begin_);
      begin_ = at + 1;
      break;
    }
    scanned = end_ - begin_;
    if (scanned > max_bytes_) {  // drop what is held and read on to the line's end
      too_long = true;
      begin_ = end_;
      scanned = 0;
    }
    if (!fill()) {
      if (begin_ == end_ && !too_long) return false;
      line = std::string_view(&buffer_[begin_], end_ - begin_);  // a last line without '\n'
      begin_ = end_;
      break;
    }
  }
  ++line_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (too_long) line = {};
  return true;
}

bool DocumentReader::next(RawDocument& document) {
  document = RawDocument{};
  std::string_view line;
  bool too_long = false;
  if (split_ == DocumentSplit::kLines) {
    if (!next_line(line, too_long)) return false;
    document.text = line;
    document.line = line_;
    document.too_long = too_long || line.size() > max_bytes_;
    if (document.too_long) document.text = {};
    return true;
  }
  joined_.clear();
  bool any = false;
  while (next_line(line, too_long)) {
    if (split_ == DocumentSplit::kBlankLines && !too_long && blank(line)) {
      if (any) break;  // the blank line after a document ends it
      continue;        // blank lines before one are nothing
    }
    const bool first = !any;
    any = true;
    if (first) document.line = line_;
    if (document.too_long) continue;  // reading past the rest of a document already too long
    if (!first) joined_ += '\n';
    if (too_long || joined_.size() + line.size() > max_bytes_) {
      document.too_long = true;
      std::string().swap(joined_);
    } else {
      joined_.append(line);
    }
  }
  if (!any) return false;
  document.text = joined_;
  return true;
}

CorpusReader::CorpusReader(const std::vector<InputFile>& inputs, DocumentSplit text_split, size_t max_bytes)
    : inputs_(inputs), text_split_(text_split), max_bytes_(max_bytes), crcs_(inputs.size(), 0) {}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::next(RawDocument& document, uint32_t& file) {
  while (file_ < inputs_.size()) {
    const InputFile& input = inputs_[file_];
    if (!stream_) {
      stream_ = InputStream::open(input);
      const auto split = input.format == InputFormat::kJsonl ? DocumentSplit::kLines : text_split_;
      reader_ = std::make_unique<DocumentReader>(*stream_, split, max_bytes_);
    }
    if (reader_->next(document)) {
      file = static_cast<uint32_t>(file_);
      return true;
    }
    LOOM_CHECK(stream_->file_bytes_read() == input.bytes, input.path.string(), ": ", stream_->file_bytes_read(),
               " bytes read but the file had ", input.bytes, " when loom prepare started: it changed while being read");
    crcs_[file_] = stream_->file_crc();
    finished_bytes_ += input.bytes;
    reader_.reset();
    stream_.reset();
    ++file_;
  }
  return false;
}

uint64_t CorpusReader::bytes_read() const { return finished_bytes_ + (stream_ ? stream_->file_bytes_read() : 0); }

}  // namespace loom
