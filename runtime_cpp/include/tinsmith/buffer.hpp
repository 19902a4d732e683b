// Tensor and workspace storage shared by all generated code.
//
// Firmware includes this header, so it stays free of the heap, exceptions, RTTI and
// any standard header beyond <cstddef>.
#pragma once

#include <cstddef>

namespace tinsmith {

// A tensor the caller owns, stored row-major. It is a plain aggregate with no padding
// beyond T's own, so sizeof(Buffer) == kSize * sizeof(T) and the C API can pass
// `data` as a bare pointer to the same bytes. An empty tensor (a zero dimension, which
// ONNX allows: an empty slice, a reduction's empty input) has kSize == 0 and holds one
// element nobody reads, because C++ has no zero-length arrays; its size is then sizeof(T).
template <typename T, std::size_t... Ns>
struct Buffer {
  using value_type = T;
  static constexpr std::size_t kRank = sizeof...(Ns);
  static constexpr std::size_t kSize = (std::size_t{1} * ... * Ns);  // 1 for a scalar
  // A rank-0 tensor still gets a one-element shape array ({0}), because C++ has no
  // zero-length arrays; read kRank before kShape.
  static constexpr std::size_t kShape[kRank > 0 ? kRank : 1] = {Ns...};

  T data[kSize > 0 ? kSize : 1];
};

// Scratch memory for a graph's intermediates. They live at offsets planned at build
// time, each a multiple of 16, so the block itself must be 16-byte aligned for those
// offsets to be aligned too. A graph with no intermediates still gets one byte because
// C++ has no zero-length arrays.
template <std::size_t N>
struct Workspace {
  alignas(16) unsigned char bytes[N > 0 ? N : 1];
};

}  // namespace tinsmith
