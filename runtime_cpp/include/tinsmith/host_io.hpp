// Whole-file binary I/O for the host runner that feeds generated models from disk.
//
// Host only: firmware never includes this header.
#pragma once

#include <cstddef>

namespace tinsmith::host {

// Reads the file at `path` into `dst`, which holds `bytes` bytes. Fails, leaving `dst`
// untouched, unless the file holds exactly `bytes` bytes: a size mismatch means the
// caller and the file disagree about the tensor's shape or dtype, and reading a prefix
// would hide that. Failures are reported on stderr.
bool read_exact(const char* path, void* dst, std::size_t bytes);

// Writes `bytes` bytes from `src` to `path`, replacing the file. Failures are reported
// on stderr.
bool write_all(const char* path, const void* src, std::size_t bytes);

}  // namespace tinsmith::host
