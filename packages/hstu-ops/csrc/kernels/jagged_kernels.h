// Host-side entry points of the raw GPU kernels (jagged_kernels.cu).
//
// Plain C++: no torch, CUDA or HIP types, so this header can be included from any translation
// unit. Pointers are device pointers; `stream` is a cudaStream_t / hipStream_t passed as void*.
// Every launcher returns nullptr on success or the runtime's error string.
//
// Values are copied as opaque words: a jagged row is `row_words` words of type Word, where the
// caller picks the widest Word (1, 2, 4, 8 or 16 bytes) that divides the row size and the
// alignment of every base pointer. The kernels are therefore independent of the value dtype.
#pragma once

#include <cstdint>

namespace hstu_ops::gpu {

// A 16-byte word for vectorised copies.
struct alignas(16) Word16 {
  std::uint64_t lo;
  std::uint64_t hi;
};

// offsets[0] = 0, offsets[i + 1] = lengths[0] + ... + lengths[i], for i < n.
// offsets must hold n + 1 elements. Runs as a single block (a chunked scan with a carry).
template <typename Index>
const char* launch_complete_cumsum(const Index* lengths, Index* offsets, std::int64_t n,
                                   void* stream);

// Sequence b of the output is sequence b of `a` followed by sequence b of `b`.
// out_offsets[i] = offsets_a[i] + offsets_b[i] for i <= batch.
template <typename Word, typename Index>
const char* launch_concat_1d_jagged(const Word* a, const Index* offsets_a, const Word* b,
                                    const Index* offsets_b, Word* out, Index* out_offsets,
                                    std::int64_t batch, std::int64_t row_words, void* stream);

// Inverse of launch_concat_1d_jagged: the first (offsets_a[i+1] - offsets_a[i]) rows of
// sequence i go to `a`, the rest to `b`. offsets_b[i] = offsets[i] - offsets_a[i].
template <typename Word, typename Index>
const char* launch_split_1d_jagged(const Word* values, const Index* offsets,
                                   const Index* offsets_a, Word* a, Word* b, Index* offsets_b,
                                   std::int64_t batch, std::int64_t row_words, void* stream);

}  // namespace hstu_ops::gpu
