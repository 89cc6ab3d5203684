// CPU implementations of the jagged primitives.
//
// Rows of one sequence are contiguous, so concat/split move each part of a sequence with one
// memcpy; sequences are spread over OpenMP threads when there is enough data to pay for it.
// OpenMP here shares the runtime that torch loads (same libgomp soname), and therefore its
// thread count (torch.set_num_threads).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "jagged_common.h"

namespace hstu_ops {
namespace {

// Below this many bytes moved (or elements scanned) a single thread is faster.
constexpr std::int64_t kParallelBytes = 1 << 18;
constexpr std::int64_t kParallelScan = 1 << 16;

template <typename Index>
void cumsum_cpu(const Index* lengths, Index* offsets, std::int64_t n) {
  offsets[0] = 0;
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
  if (n >= kParallelScan && threads > 1) {
    // Two passes: per-chunk totals, then each chunk scans from its exclusive prefix. The
    // chunks follow the team that actually runs (OpenMP may start fewer threads than asked).
    std::vector<Index> chunk_start(threads + 1, 0);
#pragma omp parallel num_threads(threads)
    {
      const int team = omp_get_num_threads();
      const int t = omp_get_thread_num();
      const std::int64_t chunk = (n + team - 1) / team;
      const std::int64_t lo = std::min<std::int64_t>(n, t * chunk);
      const std::int64_t hi = std::min<std::int64_t>(n, lo + chunk);
      Index s = 0;
      for (std::int64_t i = lo; i < hi; ++i) {
        s += lengths[i];
      }
      chunk_start[t + 1] = s;
#pragma omp barrier
#pragma omp single
      for (int c = 0; c < team; ++c) {
        chunk_start[c + 1] += chunk_start[c];
      }
      Index run = chunk_start[t];
      for (std::int64_t i = lo; i < hi; ++i) {
        run += lengths[i];
        offsets[i + 1] = run;
      }
    }
    return;
  }
#endif
  Index run = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    run += lengths[i];
    offsets[i + 1] = run;
  }
}

at::Tensor complete_cumsum_cpu(const at::Tensor& lengths_in) {
  check_index_tensor("complete_cumsum", "lengths", lengths_in);
  const at::Tensor lengths = lengths_in.contiguous();
  const std::int64_t n = lengths.numel();
  at::Tensor offsets = at::empty({n + 1}, lengths.options());
  AT_DISPATCH_INDEX_TYPES(lengths.scalar_type(), "complete_cumsum_cpu", [&] {
    const index_t* len = lengths.data_ptr<index_t>();
    check_lengths_data<index_t>(len, n);
    cumsum_cpu<index_t>(len, offsets.data_ptr<index_t>(), n);
  });
  return offsets;
}

// Moves `rows` rows of `row_bytes` bytes.
inline void copy_rows(const char* src, char* dst, std::int64_t rows, std::int64_t row_bytes) {
  if (rows > 0) {
    std::memcpy(dst, src, static_cast<size_t>(rows * row_bytes));
  }
}

inline bool parallel_worthwhile(std::int64_t bytes, std::int64_t batch) {
  return bytes >= kParallelBytes && batch > 1;
}

template <typename Index>
void concat_rows(const char* pa, const Index* oa, const char* pb, const Index* ob, char* po,
                 const Index* oo, std::int64_t batch, std::int64_t row_bytes, bool parallel) {
#pragma omp parallel for schedule(dynamic, 16) if (parallel)
  for (std::int64_t s = 0; s < batch; ++s) {
    const std::int64_t len_a = oa[s + 1] - oa[s];
    const std::int64_t len_b = ob[s + 1] - ob[s];
    char* dst = po + static_cast<std::int64_t>(oo[s]) * row_bytes;
    copy_rows(pa + static_cast<std::int64_t>(oa[s]) * row_bytes, dst, len_a, row_bytes);
    copy_rows(pb + static_cast<std::int64_t>(ob[s]) * row_bytes, dst + len_a * row_bytes, len_b,
              row_bytes);
  }
}

template <typename Index>
void split_rows(const char* pv, const Index* o, const Index* oa, const Index* ob, char* pa,
                char* pb, std::int64_t batch, std::int64_t row_bytes, bool parallel) {
#pragma omp parallel for schedule(dynamic, 16) if (parallel)
  for (std::int64_t s = 0; s < batch; ++s) {
    const std::int64_t len_a = oa[s + 1] - oa[s];
    const std::int64_t len_b = ob[s + 1] - ob[s];
    const char* src = pv + static_cast<std::int64_t>(o[s]) * row_bytes;
    copy_rows(src, pa + static_cast<std::int64_t>(oa[s]) * row_bytes, len_a, row_bytes);
    copy_rows(src + len_a * row_bytes, pb + static_cast<std::int64_t>(ob[s]) * row_bytes, len_b,
              row_bytes);
  }
}

std::tuple<at::Tensor, at::Tensor> concat_1d_jagged_cpu(const at::Tensor& values_a_in,
                                                        const at::Tensor& offsets_a_in,
                                                        const at::Tensor& values_b_in,
                                                        const at::Tensor& offsets_b_in) {
  constexpr const char* op = "concat_1d_jagged";
  check_concat_args(values_a_in, offsets_a_in, values_b_in, offsets_b_in);
  const at::Tensor offsets_a = offsets_a_in.contiguous();
  const at::Tensor offsets_b = offsets_b_in.contiguous();
  const std::int64_t n = offsets_a.numel();
  const std::int64_t rows_a = values_a_in.size(0);
  const std::int64_t rows_b = values_b_in.size(0);
  const std::int64_t row_bytes = row_numel(values_a_in) * values_a_in.element_size();

  at::Tensor out;
  at::Tensor out_offsets = at::empty({n}, offsets_a.options());
  AT_DISPATCH_INDEX_TYPES(offsets_a.scalar_type(), "concat_1d_jagged_cpu", [&] {
    const index_t* oa = offsets_a.data_ptr<index_t>();
    const index_t* ob = offsets_b.data_ptr<index_t>();
    check_offsets_data<index_t>(op, "offsets_a", oa, n, rows_a, "values_a");
    check_offsets_data<index_t>(op, "offsets_b", ob, n, rows_b, "values_b");
    check_fits<index_t>(op, rows_a + rows_b, "the concatenated number of rows");
    // Only now, with the arguments known to be consistent, touch the values.
    const at::Tensor values_a = values_a_in.contiguous();
    const at::Tensor values_b = values_b_in.contiguous();
    out = at::empty(with_rows(values_a, rows_a + rows_b), values_a.options());
    index_t* oo = out_offsets.data_ptr<index_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      oo[i] = oa[i] + ob[i];
    }
    concat_rows<index_t>(static_cast<const char*>(values_a.data_ptr()), oa,
                         static_cast<const char*>(values_b.data_ptr()), ob,
                         static_cast<char*>(out.data_ptr()), oo, n - 1, row_bytes,
                         parallel_worthwhile((rows_a + rows_b) * row_bytes, n - 1));
  });
  return {out, out_offsets};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> split_1d_jagged_cpu(
    const at::Tensor& values_in, const at::Tensor& offsets_in, const at::Tensor& offsets_a_in) {
  check_split_args(values_in, offsets_in, offsets_a_in);
  const at::Tensor offsets = offsets_in.contiguous();
  const at::Tensor offsets_a = offsets_a_in.contiguous();
  const std::int64_t n = offsets.numel();
  const std::int64_t rows = values_in.size(0);
  const std::int64_t row_bytes = row_numel(values_in) * values_in.element_size();

  at::Tensor a;
  at::Tensor b;
  at::Tensor offsets_b = at::empty({n}, offsets.options());
  AT_DISPATCH_INDEX_TYPES(offsets.scalar_type(), "split_1d_jagged_cpu", [&] {
    const index_t* o = offsets.data_ptr<index_t>();
    const index_t* oa = offsets_a.data_ptr<index_t>();
    const std::int64_t rows_a = check_split_offsets<index_t>(o, oa, n, rows);
    const at::Tensor values = values_in.contiguous();
    index_t* ob = offsets_b.data_ptr<index_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      ob[i] = o[i] - oa[i];
    }
    a = at::empty(with_rows(values, rows_a), values.options());
    b = at::empty(with_rows(values, rows - rows_a), values.options());
    split_rows<index_t>(static_cast<const char*>(values.data_ptr()), o, oa, ob,
                        static_cast<char*>(a.data_ptr()), static_cast<char*>(b.data_ptr()),
                        n - 1, row_bytes, parallel_worthwhile(rows * row_bytes, n - 1));
  });
  return {a, b, offsets_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(hstu_ops, CPU, m) {
  m.impl("complete_cumsum", &complete_cumsum_cpu);
  m.impl("concat_1d_jagged", &concat_1d_jagged_cpu);
  m.impl("split_1d_jagged", &split_1d_jagged_cpu);
}

}  // namespace hstu_ops
