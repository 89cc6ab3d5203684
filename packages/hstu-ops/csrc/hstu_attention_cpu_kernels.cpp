// Tile kernels of jagged HSTU attention on the CPU, float32 throughout.
//
// This file is compiled once per instruction set, with HSTU_CPU_ISA naming the namespace
// (generic, avx2, avx512) and HSTU_CPU_VECTOR_BYTES the vector width the code is written for;
// CMake adds the matching -m flags. Vectors are GCC/Clang vector extensions, so the same source
// becomes SSE, AVX2 or AVX-512 code. Nothing here has external linkage but kernel_table() (see
// hstu_attention_cpu.h for why), and no standard-library or torch header is included.
//
// Work, per (sequence, head):
//   forward, per query block: S^T = K_blk Q_blk^T for each key block the mask reaches, the SiLU
//     weights in place, out_blk += W V_blk. Q_blk^T is packed once per query block.
//   backward, per key block: S = Q_blk K_blk^T and dW = dO_blk V_blk^T for each query block
//     that reaches it, then dv += W^T dO, dk += dZ^T Q (and dq += dZ K when one work item owns
//     the whole sequence). K_blk^T and V_blk^T are packed once per key block.
//   backward, dq per query block (when the sequences are too few to balance the threads): like
//     the forward, with dQ_blk += dZ K_blk.
// Every product is one small GEMM on row-major float32 operands, by a register-blocked
// micro-kernel; tiles that the mask excludes entirely are skipped, partly masked rows are
// zeroed outside their key (or query) intervals.
#include "hstu_attention_cpu.h"

#ifndef HSTU_CPU_ISA
#error "HSTU_CPU_ISA must name the instruction set (generic, avx2, avx512)"
#endif
#ifndef HSTU_CPU_VECTOR_BYTES
#error "HSTU_CPU_VECTOR_BYTES must give the vector width in bytes (16, 32, 64)"
#endif

#define HSTU_STR_(x) #x
#define HSTU_STR(x) HSTU_STR_(x)

#if HSTU_CPU_VECTOR_BYTES >= 32 && defined(__AVX__)
// Only for the reciprocal estimates: the compiler's intrinsics are always inlined, never emitted
// as functions of their own.
#include <immintrin.h>
#endif

namespace hstu_ops::attn_cpu::HSTU_CPU_ISA {
namespace {

constexpr int kVec = HSTU_CPU_VECTOR_BYTES / 4;  // floats per vector
typedef float vfloat __attribute__((vector_size(HSTU_CPU_VECTOR_BYTES)));
typedef float vfloat_unaligned
    __attribute__((vector_size(HSTU_CPU_VECTOR_BYTES), aligned(4), may_alias));
typedef std::int32_t vint __attribute__((vector_size(HSTU_CPU_VECTOR_BYTES)));

// Register tile of the micro-kernel: kRows rows by kPanels vectors. AVX-512 has 32 vector
// registers (8 x 2 accumulators, 2 for B, 1 broadcast); AVX2 and SSE have 16 (6 x 2 + 3).
constexpr int kRows = kVec == 16 ? 8 : 6;
constexpr int kPanels = 2;
static_assert(kDimAlign % kVec == 0 && kBlockM % kVec == 0 && kBlockN % kVec == 0);

inline vfloat load(const float* p) { return *reinterpret_cast<const vfloat_unaligned*>(p); }
inline void store(float* p, vfloat x) { *reinterpret_cast<vfloat_unaligned*>(p) = x; }
inline vfloat splat(float x) { return vfloat{} + x; }

// 1 / x for x >= 1: the hardware estimate (14 or 12 bits) refined by one Newton step, within a
// few ulp, for less than the cost of a division.
inline vfloat reciprocal(vfloat x) {
#if HSTU_CPU_VECTOR_BYTES == 64 && defined(__AVX512F__)
  // (The zero-masked form: the plain one starts from an undefined register, which GCC's
  // -Wmaybe-uninitialized reports.)
  const vfloat r = (vfloat)_mm512_maskz_rcp14_ps(static_cast<__mmask16>(0xFFFF), (__m512)x);
  return r * (2.0f - x * r);
#elif HSTU_CPU_VECTOR_BYTES == 32 && defined(__AVX__)
  const vfloat r = (vfloat)_mm256_rcp_ps((__m256)x);
  return r * (2.0f - x * r);
#else
  return 1.0f / x;
#endif
}

// e^x for float32 vectors, within 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6
// polynomial (Cephes' expf), 2^n assembled in the exponent bits. Inputs are clamped to
// [-87, 88], where the result stays finite and normal; silu and its derivative saturate there.
inline vfloat vexp(vfloat x) {
  x = x < -87.0f ? splat(-87.0f) : x;
  x = x > 88.0f ? splat(88.0f) : x;
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick: the sum's low mantissa bits
  // hold the integer.
  const vfloat shifter = splat(12582912.0f);
  const vfloat t = x * 1.44269504088896341f + shifter;
  const vfloat nf = t - shifter;
  const vint n = (vint)t - (vint)shifter;  // bit patterns
  vfloat r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  vfloat p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vint scale = (n + 127) << 23;
  return p * (vfloat)scale;
}

// ------------------------------------------------------------------------------------------
// GEMM: C[M x N] (+)= A[M x K] B[K x N], float32, B and C row-major with N a multiple of kVec.
// A is row-major (A(i, p) = a[i * lda + p]) or, with kATransposed, column-major
// (A(i, p) = a[p * lda + i]), which is how the kernels multiply by a transposed score tile.
// ------------------------------------------------------------------------------------------
template <int Rows, int Panels, bool kATransposed>
inline void micro_kernel(std::int64_t kdim, const float* __restrict a, std::int64_t lda,
                         const float* __restrict b, std::int64_t ldb, float* __restrict c,
                         std::int64_t ldc, bool accumulate) {
  vfloat acc[Rows][Panels];
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < Panels; ++j) {
      acc[i][j] = accumulate ? load(c + i * ldc + j * kVec) : vfloat{};
    }
  }
  for (std::int64_t p = 0; p < kdim; ++p) {
    vfloat bp[Panels];
#pragma GCC unroll 4
    for (int j = 0; j < Panels; ++j) {
      bp[j] = load(b + p * ldb + j * kVec);
    }
#pragma GCC unroll 16
    for (int i = 0; i < Rows; ++i) {
      const float ai = kATransposed ? a[p * lda + i] : a[i * lda + p];
#pragma GCC unroll 4
      for (int j = 0; j < Panels; ++j) {
        acc[i][j] += ai * bp[j];
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < Rows; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < Panels; ++j) {
      store(c + i * ldc + j * kVec, acc[i][j]);
    }
  }
}

// The micro-kernel for `rows` (1 .. kRows) rows: a switch over instantiations, so that the
// accumulators stay in registers for every row count.
template <int Panels, bool kATransposed, int Rows = kRows>
inline void micro_kernel_rows(int rows, std::int64_t kdim, const float* a, std::int64_t lda,
                              const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                              bool accumulate) {
  if constexpr (Rows > 0) {
    if (rows == Rows) {
      micro_kernel<Rows, Panels, kATransposed>(kdim, a, lda, b, ldb, c, ldc, accumulate);
    } else {
      micro_kernel_rows<Panels, kATransposed, Rows - 1>(rows, kdim, a, lda, b, ldb, c, ldc,
                                                         accumulate);
    }
  }
}

template <bool kATransposed>
void gemm(std::int64_t m, std::int64_t n, std::int64_t kdim, const float* a, std::int64_t lda,
          const float* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  // Column panels outside, row tiles inside: one K x panel slice of B stays in L1 while it
  // meets every row of A.
  std::int64_t j = 0;
  for (; j + kPanels * kVec <= n; j += kPanels * kVec) {
    for (std::int64_t i = 0; i < m; i += kRows) {
      const float* ai = kATransposed ? a + i : a + i * lda;
      micro_kernel_rows<kPanels, kATransposed>(static_cast<int>(imin(kRows, m - i)), kdim, ai,
                                               lda, b + j, ldb, c + i * ldc + j, ldc,
                                               accumulate);
    }
  }
  for (; j < n; j += kVec) {
    for (std::int64_t i = 0; i < m; i += kRows) {
      const float* ai = kATransposed ? a + i : a + i * lda;
      micro_kernel_rows<1, kATransposed>(static_cast<int>(imin(kRows, m - i)), kdim, ai, lda,
                                         b + j, ldb, c + i * ldc + j, ldc, accumulate);
    }
  }
}

// dst[d * ld + r] = src[r * stride + d] for r < rows, d < width (a multiple of kDimAlign);
// columns rows .. cols of dst are zeroed (padding of a partial block). Blocks of 16 x 16 pass
// through a local array: whole-row vector loads in, whole-column stores out.
void pack_transposed(const float* src, std::int64_t stride, std::int64_t rows,
                     std::int64_t width, float* dst, std::int64_t ld, std::int64_t cols) {
  constexpr int kTile = 16;
  static_assert(kDimAlign % kTile == 0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int nr = static_cast<int>(imin(kTile, rows - r0));
    for (std::int64_t d0 = 0; d0 < width; d0 += kTile) {
      float block[kTile][kTile];
      for (int r = 0; r < kTile; ++r) {
        if (r < nr) {
          __builtin_memcpy(block[r], src + (r0 + r) * stride + d0, sizeof(block[r]));
        } else {
          __builtin_memset(block[r], 0, sizeof(block[r]));
        }
      }
      for (int d = 0; d < kTile; ++d) {
        float column[kTile];
#pragma GCC unroll 16
        for (int r = 0; r < kTile; ++r) {
          column[r] = block[r][d];
        }
        __builtin_memcpy(dst + (d0 + d) * ld + r0, column, sizeof(float) * nr);
      }
    }
  }
  if (rows < cols) {
    for (std::int64_t d = 0; d < width; ++d) {
      __builtin_memset(dst + d * ld + rows, 0, sizeof(float) * (cols - rows));
    }
  }
}

// ------------------------------------------------------------------------------------------
// Masking of score tiles. A tile row is a query (keys along the row) or a key (queries along
// it); its spans are the positions it pairs with. Rows may be untouched by the mask (kAll),
// partly masked (kSome) or excluded (kNone).
// ------------------------------------------------------------------------------------------
struct TileRows {
  Spans spans[kBlockM > kBlockN ? kBlockM : kBlockN];
  Cover cover[kBlockM > kBlockN ? kBlockM : kBlockN];
  std::int64_t rows = 0;
  bool any = false;  // some row pairs with some column
};

// Classifies rows row0 .. row0 + rows of a tile whose columns are positions col0 .. col0 + cols
// (those at or beyond the sequence end are padding, never covered). `own` holds the spans of
// the work item's own block, which supplies the columns (`own_rows` of them are real): when each
// of them pairs with every row, so does every row with every column, and the rows' own spans
// are not needed (the common case, away from the mask's edges).
template <bool kRowsAreQueries>
void classify_rows(const SequenceMask& mask, const Spans* own, std::int64_t own_rows,
                   std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols,
                   TileRows& t) {
  t.rows = rows;
  bool full = own_rows == cols;
  for (std::int64_t c = 0; full && c < cols; ++c) {
    full = cover(own[c], row0, row0 + rows) == Cover::kAll;
  }
  if (full) {
    for (std::int64_t r = 0; r < rows; ++r) {
      t.cover[r] = Cover::kAll;
    }
    t.any = rows > 0;
    return;
  }
  t.any = false;
  for (std::int64_t r = 0; r < rows; ++r) {
    t.spans[r] =
        kRowsAreQueries ? mask.keys_of_query(row0 + r) : mask.queries_of_key(row0 + r);
    t.cover[r] = cover(t.spans[r], col0, col0 + cols);
    t.any = t.any || t.cover[r] != Cover::kNone;
  }
}

// The spans of the work item's own block [b0, b0 + rows) (queries, or keys) into `own`;
// returns their hull [lo, hi), the positions of the other kind that the block reaches.
template <bool kBlockIsQueries>
void own_spans(const SequenceMask& mask, std::int64_t b0, std::int64_t rows, Spans* own,
               std::int64_t& lo, std::int64_t& hi) {
  lo = mask.n;
  hi = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    own[r] = kBlockIsQueries ? mask.keys_of_query(b0 + r) : mask.queries_of_key(b0 + r);
    lo = imin(lo, own[r].first());
    hi = imax(hi, own[r].end());
  }
}

// Zeroes the columns of row `r` that its spans do not cover.
inline void zero_uncovered(const TileRows& t, std::int64_t r, std::int64_t col0,
                           std::int64_t cols, float* row) {
  if (t.cover[r] == Cover::kAll) {
    return;
  }
  const Spans& s = t.spans[r];
  std::int64_t from = 0;  // start of the next uncovered stretch, relative to col0
  for (int i = 0; i < s.count; ++i) {
    const std::int64_t lo = imin(imax(s.lo[i] - col0, 0), cols);
    const std::int64_t hi = imin(imax(s.hi[i] - col0, 0), cols);
    if (lo > from) {
      __builtin_memset(row + from, 0, sizeof(float) * (lo - from));
    }
    from = imax(from, hi);
  }
  if (from < cols) {
    __builtin_memset(row + from, 0, sizeof(float) * (cols - from));
  }
}

// s <- silu(alpha s) / max_seq_len on the tile, masked.
void forward_weights(const Problem& p, const TileRows& t, std::int64_t col0, std::int64_t cols,
                     float* s, std::int64_t ld) {
  const float alpha = p.alpha;
  const float inv_n = p.inv_max_seq_len;
  for (std::int64_t r = 0; r < t.rows; ++r) {
    float* row = s + r * ld;
    if (t.cover[r] == Cover::kNone) {
      __builtin_memset(row, 0, sizeof(float) * cols);
      continue;
    }
    for (std::int64_t x = 0; x < cols; x += kVec) {
      const vfloat z = load(row + x) * alpha;
      const vfloat sig = reciprocal(1.0f + vexp(-z));
      store(row + x, z * sig * inv_n);
    }
    zero_uncovered(t, r, col0, cols, row);
  }
}

// s <- the weights W, dw <- dZ = dL/d(q.k) = dW * silu'(alpha s) * alpha / max_seq_len, masked.
void backward_scores(const Problem& p, const TileRows& t, std::int64_t col0, std::int64_t cols,
                     float* s, float* dw, std::int64_t ld) {
  const float alpha = p.alpha;
  const float inv_n = p.inv_max_seq_len;
  const float dscale = p.alpha * p.inv_max_seq_len;
  for (std::int64_t r = 0; r < t.rows; ++r) {
    float* srow = s + r * ld;
    float* drow = dw + r * ld;
    if (t.cover[r] == Cover::kNone) {
      __builtin_memset(srow, 0, sizeof(float) * cols);
      __builtin_memset(drow, 0, sizeof(float) * cols);
      continue;
    }
    for (std::int64_t x = 0; x < cols; x += kVec) {
      const vfloat z = load(srow + x) * alpha;
      const vfloat sig = reciprocal(1.0f + vexp(-z));
      store(srow + x, z * sig * inv_n);
      // d silu(z) / dz = sig (1 + z (1 - sig))
      store(drow + x, load(drow + x) * (sig * (1.0f + z * (1.0f - sig))) * dscale);
    }
    zero_uncovered(t, r, col0, cols, srow);
    zero_uncovered(t, r, col0, cols, drow);
  }
}

// ------------------------------------------------------------------------------------------
// Work items
// ------------------------------------------------------------------------------------------
struct Head {
  const float* q;
  const float* k;
  const float* v;
  std::int64_t q_row;
  std::int64_t k_row;
  std::int64_t v_row;
};

inline Head head_rows(const Problem& p, std::int64_t seq, std::int64_t head) {
  const std::int64_t start = p.seq_offsets[seq];
  return {p.q.data + start * p.q.row_stride + head * p.q.head_stride,
          p.k.data + start * p.k.row_stride + head * p.k.head_stride,
          p.v.data + start * p.v.row_stride + head * p.v.head_stride,
          p.q.row_stride,
          p.k.row_stride,
          p.v.row_stride};
}

inline float* rows_at(const MutableRows& x, std::int64_t row, std::int64_t head) {
  return x.data + row * x.row_stride + head * x.head_stride;
}

inline const float* rows_at(const Rows& x, std::int64_t row, std::int64_t head) {
  return x.data + row * x.row_stride + head * x.head_stride;
}

inline void zero_rows(float* x, std::int64_t stride, std::int64_t rows, std::int64_t width) {
  for (std::int64_t r = 0; r < rows; ++r) {
    __builtin_memset(x + r * stride, 0, sizeof(float) * width);
  }
}

inline void copy_rows(const float* src, std::int64_t src_stride, std::int64_t rows,
                      std::int64_t width, float* dst, std::int64_t dst_stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    __builtin_memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * width);
  }
}

void forward_query_block(const Problem& p, MutableRows out, std::int64_t seq, std::int64_t head,
                         std::int64_t qb, float* scratch) {
  const SequenceMask mask(p, seq);
  const Head x = head_rows(p, seq, head);
  const std::int64_t dqk = p.attn_dim;
  const std::int64_t dv = p.hidden_dim;
  const std::int64_t ldo = dv + kAccumulatorPad;
  const std::int64_t i0 = qb * kBlockM;
  const std::int64_t nq = imin(kBlockM, mask.n - i0);
  float* qt = scratch;             // [dqk, kBlockM]
  float* st = qt + dqk * kBlockM;  // [kBlockN, kBlockM]: keys x queries
  float* acc = st + kBlockN * kBlockM;  // [kBlockM, ldo]
  pack_transposed(x.q + i0 * x.q_row, x.q_row, nq, dqk, qt, kBlockM, kBlockM);

  Spans queries[kBlockM];
  std::int64_t lo;
  std::int64_t hi;
  own_spans<true>(mask, i0, nq, queries, lo, hi);
  TileRows tile;
  bool written = false;  // the first tile sets the accumulator, later ones add to it
  for (std::int64_t j0 = lo / kBlockN * kBlockN; j0 < hi; j0 += kBlockN) {
    const std::int64_t nk = imin(kBlockN, mask.n - j0);
    classify_rows<false>(mask, queries, nq, j0, nk, i0, kBlockM, tile);
    if (!tile.any) {
      continue;
    }
    gemm<false>(nk, kBlockM, dqk, x.k + j0 * x.k_row, x.k_row, qt, kBlockM, st, kBlockM, false);
    forward_weights(p, tile, i0, kBlockM, st, kBlockM);
    gemm<true>(nq, dv, nk, st, kBlockM, x.v + j0 * x.v_row, x.v_row, acc, ldo, written);
    written = true;
  }
  if (!written) {  // unreachable (every token attends itself), but never leave rows unset
    zero_rows(acc, ldo, nq, dv);
  }
  copy_rows(acc, ldo, nq, dv, rows_at(out, p.seq_offsets[seq] + i0, head), out.row_stride);
}

// The tiles of key block [j0, j0 + nk) against every query block that reaches it: dk, dv of
// the block and, when dq_acc is given, the dq contributions of these keys (dq_acc: rows of the
// whole sequence, stride ldq).
void backward_keys(const Problem& p, const BackwardOutputs& g, const SequenceMask& mask,
                   const Head& x, std::int64_t seq, std::int64_t head, std::int64_t j0,
                   float* scratch, float* dq_acc, std::int64_t ldq) {
  const std::int64_t dqk = p.attn_dim;
  const std::int64_t dv = p.hidden_dim;
  const std::int64_t ldk = dqk + kAccumulatorPad;
  const std::int64_t ldv = dv + kAccumulatorPad;
  const std::int64_t start = p.seq_offsets[seq];
  const std::int64_t nk = imin(kBlockN, mask.n - j0);
  float* kt = scratch;                  // [dqk, kBlockN]
  float* vt = kt + dqk * kBlockN;       // [dv, kBlockN]
  float* s = vt + dv * kBlockN;         // [kBlockM, kBlockN]: queries x keys
  float* dw = s + kBlockM * kBlockN;    // [kBlockM, kBlockN]
  float* dk = dw + kBlockM * kBlockN;   // [kBlockN, ldk]
  float* dvv = dk + kBlockN * ldk;      // [kBlockN, ldv]
  pack_transposed(x.k + j0 * x.k_row, x.k_row, nk, dqk, kt, kBlockN, kBlockN);
  pack_transposed(x.v + j0 * x.v_row, x.v_row, nk, dv, vt, kBlockN, kBlockN);
  zero_rows(dk, ldk, nk, dqk);
  zero_rows(dvv, ldv, nk, dv);
  const float* dout = rows_at(g.dout, start, head);

  Spans keys[kBlockN];
  std::int64_t lo;
  std::int64_t hi;
  own_spans<false>(mask, j0, nk, keys, lo, hi);
  TileRows tile;
  for (std::int64_t i0 = lo / kBlockM * kBlockM; i0 < hi; i0 += kBlockM) {
    const std::int64_t nq = imin(kBlockM, mask.n - i0);
    classify_rows<true>(mask, keys, nk, i0, nq, j0, kBlockN, tile);
    if (!tile.any) {
      continue;
    }
    const float* q = x.q + i0 * x.q_row;
    const float* d_o = dout + i0 * g.dout.row_stride;
    gemm<false>(nq, kBlockN, dqk, q, x.q_row, kt, kBlockN, s, kBlockN, false);
    gemm<false>(nq, kBlockN, dv, d_o, g.dout.row_stride, vt, kBlockN, dw, kBlockN, false);
    backward_scores(p, tile, j0, kBlockN, s, dw, kBlockN);
    gemm<true>(nk, dv, nq, s, kBlockN, d_o, g.dout.row_stride, dvv, ldv, true);
    gemm<true>(nk, dqk, nq, dw, kBlockN, q, x.q_row, dk, ldk, true);
    if (dq_acc != nullptr) {
      gemm<false>(nq, dqk, nk, dw, kBlockN, x.k + j0 * x.k_row, x.k_row, dq_acc + i0 * ldq, ldq,
                  true);
    }
  }
  copy_rows(dk, ldk, nk, dqk, rows_at(g.dk, start + j0, head), g.dk.row_stride);
  copy_rows(dvv, ldv, nk, dv, rows_at(g.dv, start + j0, head), g.dv.row_stride);
}

void backward_sequence(const Problem& p, const BackwardOutputs& g, std::int64_t seq,
                       std::int64_t head, float* scratch) {
  const SequenceMask mask(p, seq);
  const Head x = head_rows(p, seq, head);
  const std::int64_t ldq = p.attn_dim + kAccumulatorPad;
  // After what backward_keys uses: the dq of the whole sequence.
  float* dq = scratch + scratch_floats(p.attn_dim, p.hidden_dim, 0);
  zero_rows(dq, ldq, mask.n, p.attn_dim);
  // Key blocks in order, query blocks in order within each: every dq row receives its key
  // blocks' contributions in ascending order, as backward_query_block adds them.
  for (std::int64_t j0 = 0; j0 < mask.n; j0 += kBlockN) {
    backward_keys(p, g, mask, x, seq, head, j0, scratch, dq, ldq);
  }
  copy_rows(dq, ldq, mask.n, p.attn_dim, rows_at(g.dq, p.seq_offsets[seq], head),
            g.dq.row_stride);
}

void backward_key_block(const Problem& p, const BackwardOutputs& g, std::int64_t seq,
                        std::int64_t head, std::int64_t kb, float* scratch) {
  const SequenceMask mask(p, seq);
  backward_keys(p, g, mask, head_rows(p, seq, head), seq, head, kb * kBlockN, scratch, nullptr,
                0);
}

void backward_query_block(const Problem& p, const BackwardOutputs& g, std::int64_t seq,
                          std::int64_t head, std::int64_t qb, float* scratch) {
  const SequenceMask mask(p, seq);
  const Head x = head_rows(p, seq, head);
  const std::int64_t dqk = p.attn_dim;
  const std::int64_t dv = p.hidden_dim;
  const std::int64_t ldq = dqk + kAccumulatorPad;
  const std::int64_t start = p.seq_offsets[seq];
  const std::int64_t i0 = qb * kBlockM;
  const std::int64_t nq = imin(kBlockM, mask.n - i0);
  float* qt = scratch;                  // [dqk, kBlockM]
  float* dot = qt + dqk * kBlockM;      // [dv, kBlockM]
  float* st = dot + dv * kBlockM;       // [kBlockN, kBlockM]: keys x queries
  float* dwt = st + kBlockN * kBlockM;  // [kBlockN, kBlockM]
  float* dq = dwt + kBlockN * kBlockM;  // [kBlockM, ldq]
  pack_transposed(x.q + i0 * x.q_row, x.q_row, nq, dqk, qt, kBlockM, kBlockM);
  pack_transposed(rows_at(g.dout, start + i0, head), g.dout.row_stride, nq, dv, dot, kBlockM,
                  kBlockM);
  zero_rows(dq, ldq, nq, dqk);

  Spans queries[kBlockM];
  std::int64_t lo;
  std::int64_t hi;
  own_spans<true>(mask, i0, nq, queries, lo, hi);
  TileRows tile;
  for (std::int64_t j0 = lo / kBlockN * kBlockN; j0 < hi; j0 += kBlockN) {
    const std::int64_t nk = imin(kBlockN, mask.n - j0);
    classify_rows<false>(mask, queries, nq, j0, nk, i0, kBlockM, tile);
    if (!tile.any) {
      continue;
    }
    const float* k = x.k + j0 * x.k_row;
    gemm<false>(nk, kBlockM, dqk, k, x.k_row, qt, kBlockM, st, kBlockM, false);
    gemm<false>(nk, kBlockM, dv, x.v + j0 * x.v_row, x.v_row, dot, kBlockM, dwt, kBlockM,
                false);
    backward_scores(p, tile, i0, kBlockM, st, dwt, kBlockM);
    gemm<true>(nq, dqk, nk, dwt, kBlockM, k, x.k_row, dq, ldq, true);
  }
  copy_rows(dq, ldq, nq, dqk, rows_at(g.dq, start + i0, head), g.dq.row_stride);
}

}  // namespace

KernelTable kernel_table() {
  return {HSTU_STR(HSTU_CPU_ISA), &forward_query_block, &backward_sequence, &backward_key_block,
          &backward_query_block};
}

}  // namespace hstu_ops::attn_cpu::HSTU_CPU_ISA
