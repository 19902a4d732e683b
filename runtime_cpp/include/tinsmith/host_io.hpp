// Whole-file binary I/O for the host runner that feeds generated models from disk.
//
// Host only: firmware never includes this header.
#pragma once

#include <cstddef>
#include <cstdio>

namespace tinsmith::host {

// Reads the file at `path` into `dst`, which holds `bytes` bytes. Fails, leaving `dst`
// untouched, unless the file holds exactly `bytes` bytes: a size mismatch means the
// caller and the file disagree about the tensor's shape or dtype, and reading a prefix
// would hide that. Failures are reported on stderr.
bool read_exact(const char* path, void* dst, std::size_t bytes);

// Writes `bytes` bytes from `src` to `path`, replacing the file. Failures are reported
// on stderr.
bool write_all(const char* path, const void* src, std::size_t bytes);

// The input file of calls in a row: a whole number of input sets of `set_bytes` bytes each,
// at least one, read one set per call (a model that keeps state between calls sees them as a
// stream). A model without input bytes takes an empty file: one call. Failures are reported
// on stderr.
class InputSets {
 public:
  InputSets() = default;
  ~InputSets();
  InputSets(const InputSets&) = delete;
  InputSets& operator=(const InputSets&) = delete;

  // Opens the file; fails, reading nothing, unless it holds a whole number of sets.
  bool open(const char* path, std::size_t set_bytes);
  std::size_t count() const { return count_; }
  // Reads the next set into `dst`, which holds `set_bytes` bytes.
  bool read(void* dst);

 private:
  std::FILE* file_ = nullptr;
  const char* path_ = "";
  std::size_t set_bytes_ = 0;
  std::size_t count_ = 0;
};

// The output file of calls in a row: each call's outputs appended. Replaces the file.
// Failures are reported on stderr.
class OutputSets {
 public:
  OutputSets() = default;
  ~OutputSets();
  OutputSets(const OutputSets&) = delete;
  OutputSets& operator=(const OutputSets&) = delete;

  bool open(const char* path);
  bool write(const void* src, std::size_t bytes);
  // Closes explicitly so that a failed flush of buffered writes is seen.
  bool close();

 private:
  std::FILE* file_ = nullptr;
  const char* path_ = "";
};

}  // namespace tinsmith::host
