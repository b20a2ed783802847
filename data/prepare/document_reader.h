// Cuts the text of one corpus file (an InputStream) into documents, reading it in pieces:
//   kLines       one document per line (JSON Lines always: one record per line)
//   kBlankLines  documents separated by blank (empty or whitespace-only) lines, their lines joined by '\n'
//   kWholeFile   the whole file is one document
// A trailing '\r' is dropped from every line (files written on Windows). A document longer than
// max_bytes is not held: it comes back with too_long set and no text, and reading goes on after it, so
// memory stays bounded by max_bytes plus one read buffer whatever the input.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/prepare/input_stream.h"

namespace loom {

enum class DocumentSplit { kLines, kBlankLines, kWholeFile };

struct RawDocument {
  std::string_view text;  // valid until the next call to next()
  int64_t line = 0;       // of its first line, from 1
  bool too_long = false;
};

class DocumentReader {
 public:
  DocumentReader(InputStream& stream, DocumentSplit split, size_t max_bytes);
  // The next document; false at the end of the file.
  bool next(RawDocument& document);

 private:
  // The next line (without '\n' or a trailing '\r'); false at the end.
  bool next_line(std::string_view& line, bool& too_long);
  bool fill();

  InputStream& stream_;
  DocumentSplit split_;
  size_t max_bytes_;
  std::string buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes are buffer_[begin_, end_)
  bool eof_ = false;
  int64_t line_ = 0;  // lines read so far
  std::string joined_;  // kBlankLines, kWholeFile: the document being put together
};

// Every document of a list of corpus files, in order: JSON Lines files a record per line, text files as
// text_split says. Also the file bytes read so far (progress) and each finished file's CRC-32; a file
// whose size changed since the list was made is an error (it was being written to).
class CorpusReader {
 public:
  CorpusReader(const std::vector<InputFile>& inputs, DocumentSplit text_split, size_t max_bytes);
  ~CorpusReader();
  // The next document and the index of its file; false after the last file.
  bool next(RawDocument& document, uint32_t& file);
  uint64_t bytes_read() const;
  // CRC-32 of file i's bytes; valid once next() has moved past it.
  uint32_t file_crc(size_t i) const { return crcs_.at(i); }

 private:
  const std::vector<InputFile>& inputs_;
  DocumentSplit text_split_;
  size_t max_bytes_;
  size_t file_ = 0;  // the file being read (inputs_.size(): done)
  uint64_t finished_bytes_ = 0;
  std::unique_ptr<InputStream> stream_;
  std::unique_ptr<DocumentReader> reader_;
  std::vector<uint32_t> crcs_;
};

}  // namespace loom
