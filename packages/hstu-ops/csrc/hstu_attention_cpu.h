// Jagged HSTU attention on the CPU: what the torch-facing glue (hstu_attention_cpu.cpp) and the
// tile kernels (hstu_attention_cpu_kernels.cpp) share.
//
// The kernels are compiled once per instruction set (generic, AVX2, AVX-512) and picked at run
// time. Those translation units must not share any function with external linkage with the rest
// of the library: the linker keeps one copy of an inline function, and the AVX-512 copy would
// then run on every CPU. So this header holds plain structs, declarations, and helpers with
// internal linkage (an unnamed namespace), and it includes no standard or torch header with
// inline code.
//
// Semantics (the reference, hstu_ops/pytorch/pt_hstu_attention.py): per sequence and head,
//   out_i = sum_j mask(i, j) * silu(alpha * <q_i, k_j>) / max_seq_len * v_j
// with the mask given by ranks: r(p) = p, or max(p - c + 1, 0) with c contextual tokens, capped at
// h (the rank shared by the targets) when num_targets is given.
#pragma once

#include <cstdint>

namespace hstu_ops::attn_cpu {

// Tile shape: a tile holds kBlockM queries and kBlockN keys. Feature widths are padded to a
// multiple of kDimAlign floats, so every vector loop over them runs on whole vectors.
constexpr std::int64_t kBlockM = 64;
constexpr std::int64_t kBlockN = 64;
constexpr std::int64_t kDimAlign = 16;

// float32 rows of one [total, heads, dim] tensor: element (row, head, d) is at
// data[row * row_stride + head * head_stride + d], for d < the padded width (the padding is 0).
struct Rows {
  const float* data;
  std::int64_t row_stride;
  std::int64_t head_stride;
};

struct MutableRows {
  float* data;
  std::int64_t row_stride;
  std::int64_t head_stride;
};

// Everything about one call that the kernels read.
struct Problem {
  Rows q;
  Rows k;
  Rows v;
  std::int64_t attn_dim;    // padded width of q and k (a multiple of kDimAlign)
  std::int64_t hidden_dim;  // padded width of v
  const std::int64_t* seq_offsets;  // B + 1 entries, host memory
  const std::int64_t* num_targets;  // B entries, or nullptr
  std::int64_t max_attn_len;        // 0: unbounded
  std::int64_t contextual_seq_len;
  bool causal;
  float alpha;
  float inv_max_seq_len;
};

struct BackwardOutputs {
  Rows dout;          // padded to hidden_dim
  MutableRows dq;     // each row is written once, by the item that owns it
  MutableRows dk;
  MutableRows dv;
};

// Entry points of one instruction set. Each call handles one work item; items never write the
// same output element, so they run in any order on any thread, and each item's arithmetic is
// fixed (the result is deterministic). `scratch` holds at least scratch_floats() floats, with
// sequence_rows the longest sequence for backward_sequence and 0 for the others.
struct KernelTable {
  const char* isa;
  // out rows of query block qb of (seq, head).
  void (*forward_query_block)(const Problem&, MutableRows out, std::int64_t seq,
                              std::int64_t head, std::int64_t qb, float* scratch);
  // dq, dk, dv of all rows of (seq, head), one pass over the tiles.
  void (*backward_sequence)(const Problem&, const BackwardOutputs&, std::int64_t seq,
                            std::int64_t head, float* scratch);
  // dk, dv of key block kb of (seq, head).
  void (*backward_key_block)(const Problem&, const BackwardOutputs&, std::int64_t seq,
                             std::int64_t head, std::int64_t kb, float* scratch);
  // dq of query block qb of (seq, head).
  void (*backward_query_block)(const Problem&, const BackwardOutputs&, std::int64_t seq,
                               std::int64_t head, std::int64_t qb, float* scratch);
};

// The instruction set of the kernels in use ("generic", "avx2" or "avx512"), chosen on first use.
const char* selected_isa();

// Switches to the kernels of instruction set `isa` (for tests and benchmarks: any set this build
// and CPU support, the best one by default) and returns the previous one. Throws
// std::invalid_argument for a set that cannot run here. Not to be called while kernels run.
const char* select_isa(const char* isa);

namespace generic {
KernelTable kernel_table();
}
namespace avx2 {
KernelTable kernel_table();
}
namespace avx512 {
KernelTable kernel_table();
}

namespace {

// Accumulators live in scratch with rows of width + kAccumulatorPad floats: a row stride that is
// a power of two (the common heads x 128 floats of the inputs) maps the rows of a tile onto a
// few L1 sets, and a GEMM accumulating there runs about a third slower.
constexpr std::int64_t kAccumulatorPad = 16;

// Scratch of one thread: two transposed operand panels, two score tiles, accumulators for a
// block's dq (or output) and dk, dv, and, for whole-sequence backward items, the dq of
// `sequence_rows` rows.
constexpr std::int64_t scratch_floats(std::int64_t attn_dim, std::int64_t hidden_dim,
                                      std::int64_t sequence_rows) {
  const std::int64_t block = kBlockM > kBlockN ? kBlockM : kBlockN;
  return (attn_dim + hidden_dim) * block + 2 * kBlockM * kBlockN +
         block * (attn_dim + kAccumulatorPad) + block * (hidden_dim + kAccumulatorPad) +
         sequence_rows * (attn_dim + kAccumulatorPad);
}

constexpr std::int64_t imin(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
constexpr std::int64_t imax(std::int64_t a, std::int64_t b) { return a > b ? a : b; }

// A union of at most four disjoint, sorted half-open intervals of positions.
struct Spans {
  std::int64_t lo[4];
  std::int64_t hi[4];
  int count = 0;

  void add(std::int64_t a, std::int64_t b) {
    if (a >= b) {
      return;
    }
    // Insertion keeps the intervals sorted by start; overlaps are merged by normalize().
    int at = count++;
    while (at > 0 && lo[at - 1] > a) {
      lo[at] = lo[at - 1];
      hi[at] = hi[at - 1];
      --at;
    }
    lo[at] = a;
    hi[at] = b;
  }

  void normalize() {
    int out = 0;
    for (int s = 0; s < count; ++s) {
      if (out > 0 && lo[s] <= hi[out - 1]) {
        hi[out - 1] = imax(hi[out - 1], hi[s]);
      } else {
        lo[out] = lo[s];
        hi[out] = hi[s];
        ++out;
      }
    }
    count = out;
  }

  std::int64_t first() const { return count ? lo[0] : 0; }
  std::int64_t end() const { return count ? hi[count - 1] : 0; }
};

enum class Cover { kNone, kAll, kSome };

// How spans cover the window [a, b).
inline Cover cover(const Spans& s, std::int64_t a, std::int64_t b) {
  bool any = false;
  for (int i = 0; i < s.count; ++i) {
    if (s.lo[i] <= a && b <= s.hi[i]) {
      return Cover::kAll;
    }
    any = any || (s.lo[i] < b && a < s.hi[i]);
  }
  return any ? Cover::kSome : Cover::kNone;
}

// The mask of one sequence, as position intervals. Ranks never decrease along a sequence, so
// "the positions whose rank lies in [a, b]" is always one interval; every rule of the mask is
// a rank interval around the query's (or key's) own rank.
struct SequenceMask {
  std::int64_t n;  // length
  std::int64_t c;  // contextual tokens
  std::int64_t h;  // rank shared by the targets (also bounds what contextual rows see)
  std::int64_t m;  // max_attn_len, 0 when it bounds nothing
  bool targets;
  bool causal;

  SequenceMask(const Problem& p, std::int64_t seq) {
    n = p.seq_offsets[seq + 1] - p.seq_offsets[seq];
    c = p.contextual_seq_len;
    const std::int64_t t = p.num_targets ? p.num_targets[seq] : 0;
    h = c > 0 ? n - t - c + 1 : n - t;
    // A bound at least as long as the sequence bounds nothing (and this keeps r + m small).
    m = p.max_attn_len > 0 && p.max_attn_len < n ? p.max_attn_len : 0;
    targets = p.num_targets != nullptr;
    causal = p.causal;
  }

  std::int64_t rank(std::int64_t pos) const {
    const std::int64_t r = c > 0 ? imax(pos - c + 1, 0) : pos;
    return targets ? imin(r, h) : r;
  }

  // The first position whose rank is >= r (n if none).
  std::int64_t first_rank_ge(std::int64_t r) const {
    if (targets && r > h) {
      return n;
    }
    if (r <= 0) {
      return 0;
    }
    return imin(c > 0 ? r + c - 1 : r, n);
  }

  // Positions whose rank lies in [a, b].
  void add_ranks(Spans& s, std::int64_t a, std::int64_t b) const {
    s.add(first_rank_ge(a), first_rank_ge(b + 1));
  }

  // The keys query i attends.
  Spans keys_of_query(std::int64_t i) const {
    Spans s;
    const std::int64_t r = rank(i);
    s.add(i, i + 1);
    // Lower ranks (d = r - r_key > 0), within m of r.
    s.add(m > 0 ? first_rank_ge(r - m) : 0, first_rank_ge(r));
    if (!causal) {
      s.add(first_rank_ge(r + 1), m > 0 ? first_rank_ge(r + m + 1) : n);
    }
    if (c > 0 && r == 0) {
      s.add(0, first_rank_ge(h));  // contextual rows see every non-target key
    }
    s.normalize();
    return s;
  }

  // The queries that attend key j (the transpose of keys_of_query).
  Spans queries_of_key(std::int64_t j) const {
    Spans s;
    const std::int64_t r = rank(j);
    s.add(j, j + 1);
    s.add(first_rank_ge(r + 1), m > 0 ? first_rank_ge(r + m + 1) : n);
    if (!causal) {
      s.add(m > 0 ? first_rank_ge(r - m) : 0, first_rank_ge(r));
    }
    if (c > 0 && r < h) {
      add_ranks(s, 0, 0);  // the contextual rows
    }
    s.normalize();
    return s;
  }

  // [lo, hi): the keys some query of [i0, i1) attends.
  void key_range(std::int64_t i0, std::int64_t i1, std::int64_t& lo, std::int64_t& hi) const {
    lo = n;
    hi = 0;
    for (std::int64_t i = i0; i < i1; ++i) {
      const Spans s = keys_of_query(i);
      lo = imin(lo, s.first());
      hi = imax(hi, s.end());
    }
  }

  // [lo, hi): the queries that attend some key of [j0, j1).
  void query_range(std::int64_t j0, std::int64_t j1, std::int64_t& lo, std::int64_t& hi) const {
    lo = n;
    hi = 0;
    for (std::int64_t j = j0; j < j1; ++j) {
      const Spans s = queries_of_key(j);
      lo = imin(lo, s.first());
      hi = imax(hi, s.end());
    }
  }
};

}  // namespace
}  // namespace hstu_ops::attn_cpu
