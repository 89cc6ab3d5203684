// Raw GPU kernels for the jagged primitives. One source for CUDA (nvcc) and HIP (hipcc).
//
// This file deliberately includes no torch header: `ci/check_gpu_builds.sh` compile-checks it
// with a bare hipcc. The torch-facing glue lives in ../jagged_gpu.cu.
//
// The kernels avoid warp-level intrinsics so that the 32-lane (NVIDIA) and 64-lane (AMD)
// wavefront sizes need no special cases.
#include "gpu_compat.h"
#include "jagged_kernels.h"

namespace hstu_ops::gpu {
namespace {

constexpr int kScanBlock = 512;
constexpr int kCopyBlock = 256;
constexpr std::int64_t kMaxCopyBlocks = 16384;

// Inclusive scan of one tile of kScanBlock values per iteration; `carry` holds the running
// total of the earlier tiles. Hillis-Steele with double-buffered shared memory.
template <typename Index>
__global__ void complete_cumsum_kernel(const Index* __restrict__ lengths,
                                       Index* __restrict__ offsets, std::int64_t n) {
  __shared__ Index buf[2][kScanBlock];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    offsets[0] = Index(0);
  }
  Index carry = Index(0);
  for (std::int64_t base = 0; base < n; base += kScanBlock) {
    const std::int64_t i = base + tid;
    int cur = 0;
    buf[cur][tid] = i < n ? lengths[i] : Index(0);
    __syncthreads();
    for (int step = 1; step < kScanBlock; step <<= 1) {
      Index v = buf[cur][tid];
      if (tid >= step) {
        v += buf[cur][tid - step];
      }
      buf[cur ^ 1][tid] = v;
      cur ^= 1;
      __syncthreads();
    }
    if (i < n) {
      offsets[i + 1] = carry + buf[cur][tid];
    }
    carry += buf[cur][kScanBlock - 1];
    // Every thread must have read the tile total before the next tile overwrites the buffer.
    __syncthreads();
  }
}

template <typename Word>
HSTU_DEVICE void copy_words(const Word* __restrict__ src, Word* __restrict__ dst,
                            std::int64_t count) {
  for (std::int64_t w = threadIdx.x; w < count; w += blockDim.x) {
    dst[w] = src[w];
  }
}

// One block per sequence (grid-stride over sequences), threads stride over the words.
template <typename Word, typename Index>
__global__ void concat_1d_jagged_kernel(const Word* __restrict__ a,
                                        const Index* __restrict__ offsets_a,
                                        const Word* __restrict__ b,
                                        const Index* __restrict__ offsets_b,
                                        Word* __restrict__ out, Index* __restrict__ out_offsets,
                                        std::int64_t batch, std::int64_t row_words) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out_offsets[0] = offsets_a[0] + offsets_b[0];
  }
  for (std::int64_t s = blockIdx.x; s < batch; s += gridDim.x) {
    const std::int64_t a_begin = offsets_a[s];
    const std::int64_t a_rows = static_cast<std::int64_t>(offsets_a[s + 1]) - a_begin;
    const std::int64_t b_begin = offsets_b[s];
    const std::int64_t b_rows = static_cast<std::int64_t>(offsets_b[s + 1]) - b_begin;
    const std::int64_t out_begin = a_begin + b_begin;
    if (threadIdx.x == 0) {
      out_offsets[s + 1] = offsets_a[s + 1] + offsets_b[s + 1];
    }
    copy_words(a + a_begin * row_words, out + out_begin * row_words, a_rows * row_words);
    copy_words(b + b_begin * row_words, out + (out_begin + a_rows) * row_words,
               b_rows * row_words);
  }
}

template <typename Word, typename Index>
__global__ void split_1d_jagged_kernel(const Word* __restrict__ values,
                                       const Index* __restrict__ offsets,
                                       const Index* __restrict__ offsets_a, Word* __restrict__ a,
                                       Word* __restrict__ b, Index* __restrict__ offsets_b,
                                       std::int64_t batch, std::int64_t row_words) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    offsets_b[0] = offsets[0] - offsets_a[0];
  }
  for (std::int64_t s = blockIdx.x; s < batch; s += gridDim.x) {
    const std::int64_t begin = offsets[s];
    const std::int64_t a_begin = offsets_a[s];
    const std::int64_t a_rows = static_cast<std::int64_t>(offsets_a[s + 1]) - a_begin;
    const std::int64_t b_begin = begin - a_begin;
    const std::int64_t b_rows = static_cast<std::int64_t>(offsets[s + 1]) - begin - a_rows;
    if (threadIdx.x == 0) {
      offsets_b[s + 1] = offsets[s + 1] - offsets_a[s + 1];
    }
    copy_words(values + begin * row_words, a + a_begin * row_words, a_rows * row_words);
    copy_words(values + (begin + a_rows) * row_words, b + b_begin * row_words,
               b_rows * row_words);
  }
}

inline unsigned copy_grid(std::int64_t batch) {
  std::int64_t blocks = batch < 1 ? 1 : batch;
  if (blocks > kMaxCopyBlocks) {
    blocks = kMaxCopyBlocks;
  }
  return static_cast<unsigned>(blocks);
}

inline const char* launch_status() {
  const Error err = last_error();
  return err == kSuccess ? nullptr : error_string(err);
}

}  // namespace

template <typename Index>
const char* launch_complete_cumsum(const Index* lengths, Index* offsets, std::int64_t n,
                                   void* stream) {
  complete_cumsum_kernel<Index>
      <<<1, kScanBlock, 0, static_cast<Stream>(stream)>>>(lengths, offsets, n);
  return launch_status();
}

template <typename Word, typename Index>
const char* launch_concat_1d_jagged(const Word* a, const Index* offsets_a, const Word* b,
                                    const Index* offsets_b, Word* out, Index* out_offsets,
                                    std::int64_t batch, std::int64_t row_words, void* stream) {
  concat_1d_jagged_kernel<Word, Index>
      <<<copy_grid(batch), kCopyBlock, 0, static_cast<Stream>(stream)>>>(
          a, offsets_a, b, offsets_b, out, out_offsets, batch, row_words);
  return launch_status();
}

template <typename Word, typename Index>
const char* launch_split_1d_jagged(const Word* values, const Index* offsets,
                                   const Index* offsets_a, Word* a, Word* b, Index* offsets_b,
                                   std::int64_t batch, std::int64_t row_words, void* stream) {
  split_1d_jagged_kernel<Word, Index>
      <<<copy_grid(batch), kCopyBlock, 0, static_cast<Stream>(stream)>>>(
          values, offsets, offsets_a, a, b, offsets_b, batch, row_words);
  return launch_status();
}

// Explicit instantiations: the glue picks one of these at run time.
#define HSTU_INSTANTIATE_COPY(WORD, INDEX)                                                     \
  template const char* launch_concat_1d_jagged<WORD, INDEX>(                                   \
      const WORD*, const INDEX*, const WORD*, const INDEX*, WORD*, INDEX*, std::int64_t,       \
      std::int64_t, void*);                                                                    \
  template const char* launch_split_1d_jagged<WORD, INDEX>(                                    \
      const WORD*, const INDEX*, const INDEX*, WORD*, WORD*, INDEX*, std::int64_t,             \
      std::int64_t, void*);

#define HSTU_INSTANTIATE_INDEX(INDEX)                                                          \
  template const char* launch_complete_cumsum<INDEX>(const INDEX*, INDEX*, std::int64_t,       \
                                                     void*);                                   \
  HSTU_INSTANTIATE_COPY(std::uint8_t, INDEX)                                                   \
  HSTU_INSTANTIATE_COPY(std::uint16_t, INDEX)                                                  \
  HSTU_INSTANTIATE_COPY(std::uint32_t, INDEX)                                                  \
  HSTU_INSTANTIATE_COPY(std::uint64_t, INDEX)                                                  \
  HSTU_INSTANTIATE_COPY(Word16, INDEX)

HSTU_INSTANTIATE_INDEX(std::int32_t)
HSTU_INSTANTIATE_INDEX(std::int64_t)

#undef HSTU_INSTANTIATE_INDEX
#undef HSTU_INSTANTIATE_COPY

}  // namespace hstu_ops::gpu
