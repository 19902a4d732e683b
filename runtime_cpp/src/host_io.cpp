#include "tinsmith/host_io.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tinsmith::host {

namespace {

// Owns a FILE* so every early return closes it.
class File {
 public:
  File(const char* path, const char* mode) : f_(std::fopen(path, mode)) {}
  ~File() {
    if (f_ != nullptr) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::FILE* get() const { return f_; }

  // Closes explicitly so that a failed flush of buffered writes is seen.
  bool close() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    return rc == 0;
  }

 private:
  std::FILE* f_;
};

void report(const char* path, const char* what) {
  std::fprintf(stderr, "tinsmith: %s: %s: %s\n", path, what, std::strerror(errno));
}

}  // namespace

bool read_exact(const char* path, void* dst, std::size_t bytes) {
  File file(path, "rb");
  if (file.get() == nullptr) {
    report(path, "cannot open for reading");
    return false;
  }
  // Check the size before reading so a mismatched file leaves dst untouched.
  if (std::fseek(file.get(), 0, SEEK_END) != 0) {
    report(path, "cannot seek");
    return false;
  }
  const long size = std::ftell(file.get());
  if (size < 0) {
    report(path, "cannot tell size");
    return false;
  }
  if (static_cast<std::size_t>(size) != bytes) {
    std::fprintf(stderr, "tinsmith: %s: expected %zu bytes, file holds %ld bytes\n", path,
                 bytes, size);
    return false;
  }
  std::rewind(file.get());
  if (std::fread(dst, 1, bytes, file.get()) != bytes) {
    report(path, "read failed");
    return false;
  }
  return true;
}

bool write_all(const char* path, const void* src, std::size_t bytes) {
  File file(path, "wb");
  if (file.get() == nullptr) {
    report(path, "cannot open for writing");
    return false;
  }
  if (std::fwrite(src, 1, bytes, file.get()) != bytes || !file.close()) {
    report(path, "write failed");
    return false;
  }
  return true;
}

InputSets::~InputSets() {
  if (file_ != nullptr) std::fclose(file_);
}

bool InputSets::open(const char* path, std::size_t set_bytes) {
  path_ = path;
  set_bytes_ = set_bytes;
  file_ = std::fopen(path, "rb");
  if (file_ == nullptr) {
    report(path, "cannot open for reading");
    return false;
  }
  if (std::fseek(file_, 0, SEEK_END) != 0) {
    report(path, "cannot seek");
    return false;
  }
  const long size = std::ftell(file_);
  if (size < 0) {
    report(path, "cannot tell size");
    return false;
  }
  const std::size_t bytes = static_cast<std::size_t>(size);
  if (set_bytes == 0 ? bytes != 0 : bytes == 0 || bytes % set_bytes != 0) {
    std::fprintf(stderr, "tinsmith: %s: expected a multiple of %zu bytes (the inputs of one call), "
                 "file holds %ld bytes\n", path, set_bytes, size);
    return false;
  }
  count_ = set_bytes == 0 ? 1 : bytes / set_bytes;
  std::rewind(file_);
  return true;
}

bool InputSets::read(void* dst) {
  if (set_bytes_ != 0 && std::fread(dst, 1, set_bytes_, file_) != set_bytes_) {
    report(path_, "read failed");
    return false;
  }
  return true;
}

OutputSets::~OutputSets() {
  if (file_ != nullptr) std::fclose(file_);
}

bool OutputSets::open(const char* path) {
  path_ = path;
  file_ = std::fopen(path, "wb");
  if (file_ == nullptr) {
    report(path, "cannot open for writing");
    return false;
  }
  return true;
}

bool OutputSets::write(const void* src, std::size_t bytes) {
  if (std::fwrite(src, 1, bytes, file_) != bytes) {
    report(path_, "write failed");
    return false;
  }
  return true;
}

bool OutputSets::close() {
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    report(path_, "write failed");
    return false;
  }
  return true;
}

}  // namespace tinsmith::host
