// Argument checks shared by the CPU and GPU implementations of the jagged ops.
//
// Data checks run on host memory: the GPU glue copies the (batch + 1)-element offsets to the
// host first, so both backends report the same errors with the same wording. Errors name the
// argument and the offending value; value errors surface in Python as ValueError, dtype errors
// as TypeError.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

namespace hstu_ops {

// Python's spelling of a dtype (float32, int64, ...), so messages read the same as the
// PyTorch reference's.
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(t);
  }
}

template <typename Index>
std::string index_dtype_name() {
  return dtype_name(c10::CppTypeToScalarType<Index>::value);
}

inline std::string shape_str(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

inline void check_index_tensor(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.dim() == 1, op, ": ", name, " must be a 1-D tensor, got shape ",
                    shape_str(t));
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, op, ": ", name,
                   " must have dtype int32 or int64, got ", dtype_name(t.scalar_type()));
}

inline void check_offsets_tensor(const char* op, const char* name, const at::Tensor& t) {
  check_index_tensor(op, name, t);
  TORCH_CHECK_VALUE(t.numel() >= 1, op, ": ", name,
                    " must have at least one entry (a batch of B sequences has B + 1 offsets)");
}

inline void check_values_tensor(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.dim() >= 1, op, ": ", name,
                    " must have at least one dimension (the jagged one), got a 0-d tensor");
}

inline void check_same_device(const char* op, const char* name, const at::Tensor& t,
                              const char* ref_name, const at::Tensor& ref) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " is on ", t.device(),
                    " but ", ref_name, " is on ", ref.device(), "; all tensors must share a device");
}

// Checks that `o` (n entries, host memory) is a valid offsets vector over `rows` rows:
// o[0] == 0, non-decreasing, o[n-1] == rows.
template <typename Index>
void check_offsets_data(const char* op, const char* name, const Index* o, std::int64_t n,
                        std::int64_t rows, const char* values_name) {
  TORCH_CHECK_VALUE(o[0] == 0, op, ": ", name, "[0] = ", o[0], ", expected 0");
  for (std::int64_t i = 1; i < n; ++i) {
    TORCH_CHECK_VALUE(o[i] >= o[i - 1], op, ": ", name, " is not monotone: ", name, "[", i,
                      "] = ", o[i], " < ", name, "[", i - 1, "] = ", o[i - 1]);
  }
  TORCH_CHECK_VALUE(static_cast<std::int64_t>(o[n - 1]) == rows, op, ": ", name, "[-1] = ",
                    o[n - 1], " does not match ", values_name, ".shape[0] = ", rows);
}

// Checks for split: every sequence of `offsets` holds at least the rows `offsets_a` takes.
template <typename Index>
void check_split_data(const char* op, const Index* offsets, const Index* offsets_a,
                      std::int64_t n) {
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    const std::int64_t len = static_cast<std::int64_t>(offsets[i + 1]) - offsets[i];
    const std::int64_t len_a = static_cast<std::int64_t>(offsets_a[i + 1]) - offsets_a[i];
    TORCH_CHECK_VALUE(len_a <= len, op, ": offsets_a takes ", len_a, " rows from sequence ", i,
                      " but offsets gives it only ", len, " rows");
  }
}

template <typename Index>
void check_fits(const char* op, std::int64_t total, const char* what) {
  TORCH_CHECK_VALUE(total <= static_cast<std::int64_t>(std::numeric_limits<Index>::max()), op,
                    ": ", what, " = ", total, " does not fit the offsets dtype (",
                    index_dtype_name<Index>(), "); use int64 offsets");
}

// The widest copy word (in bytes, a power of two up to 16) that divides the row size and the
// alignment of every base address, so rows can be moved as whole words.
inline int copy_word_bytes(std::int64_t row_bytes, std::initializer_list<const void*> ptrs) {
  std::uint64_t bits = static_cast<std::uint64_t>(row_bytes) | 16u;
  for (const void* p : ptrs) {
    bits |= static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  }
  // Lowest set bit: the largest power of two dividing every term (at most 16).
  return static_cast<int>(bits & (~bits + 1));
}

inline std::int64_t row_numel(const at::Tensor& values) {
  std::int64_t n = 1;
  for (std::int64_t d = 1; d < values.dim(); ++d) {
    n *= values.size(d);
  }
  return n;
}

inline std::vector<std::int64_t> with_rows(const at::Tensor& values, std::int64_t rows) {
  std::vector<std::int64_t> shape(values.sizes().begin(), values.sizes().end());
  shape[0] = rows;
  return shape;
}

// Tensor-level checks (no data access) shared by the CPU and GPU entry points.
inline void check_concat_args(const at::Tensor& values_a, const at::Tensor& offsets_a,
                              const at::Tensor& values_b, const at::Tensor& offsets_b) {
  constexpr const char* op = "concat_1d_jagged";
  check_values_tensor(op, "values_a", values_a);
  check_values_tensor(op, "values_b", values_b);
  check_offsets_tensor(op, "offsets_a", offsets_a);
  check_offsets_tensor(op, "offsets_b", offsets_b);
  TORCH_CHECK_TYPE(values_a.scalar_type() == values_b.scalar_type(), op,
                   ": values_a and values_b must have the same dtype, got ",
                   dtype_name(values_a.scalar_type()), " and ", dtype_name(values_b.scalar_type()));
  TORCH_CHECK_VALUE(values_a.sizes().slice(1) == values_b.sizes().slice(1), op,
                    ": values_a and values_b must agree beyond the jagged dimension, got shapes ",
                    shape_str(values_a), " and ", shape_str(values_b));
  TORCH_CHECK_TYPE(offsets_a.scalar_type() == offsets_b.scalar_type(), op,
                   ": offsets_a and offsets_b must have the same dtype, got ",
                   dtype_name(offsets_a.scalar_type()), " and ", dtype_name(offsets_b.scalar_type()));
  TORCH_CHECK_VALUE(offsets_a.numel() == offsets_b.numel(), op,
                    ": offsets_a and offsets_b must have the same length (batch size + 1), got ",
                    offsets_a.numel(), " and ", offsets_b.numel());
  check_same_device(op, "values_b", values_b, "values_a", values_a);
  check_same_device(op, "offsets_a", offsets_a, "values_a", values_a);
  check_same_device(op, "offsets_b", offsets_b, "values_a", values_a);
}

inline void check_split_args(const at::Tensor& values, const at::Tensor& offsets,
                             const at::Tensor& offsets_a) {
  constexpr const char* op = "split_1d_jagged";
  check_values_tensor(op, "values", values);
  check_offsets_tensor(op, "offsets", offsets);
  check_offsets_tensor(op, "offsets_a", offsets_a);
  TORCH_CHECK_TYPE(offsets.scalar_type() == offsets_a.scalar_type(), op,
                   ": offsets and offsets_a must have the same dtype, got ",
                   dtype_name(offsets.scalar_type()), " and ", dtype_name(offsets_a.scalar_type()));
  TORCH_CHECK_VALUE(offsets.numel() == offsets_a.numel(), op,
                    ": offsets and offsets_a must have the same length (batch size + 1), got ",
                    offsets.numel(), " and ", offsets_a.numel());
  check_same_device(op, "offsets", offsets, "values", values);
  check_same_device(op, "offsets_a", offsets_a, "values", values);
}

// Data checks for split on host offsets; returns the number of rows that go to `a`.
template <typename Index>
std::int64_t check_split_offsets(const Index* offsets, const Index* offsets_a, std::int64_t n,
                                 std::int64_t rows) {
  constexpr const char* op = "split_1d_jagged";
  check_offsets_data(op, "offsets", offsets, n, rows, "values");
  TORCH_CHECK_VALUE(offsets_a[0] == 0, op, ": offsets_a[0] = ", offsets_a[0], ", expected 0");
  for (std::int64_t i = 1; i < n; ++i) {
    TORCH_CHECK_VALUE(offsets_a[i] >= offsets_a[i - 1], op,
                      ": offsets_a is not monotone: offsets_a[", i, "] = ", offsets_a[i],
                      " < offsets_a[", i - 1, "] = ", offsets_a[i - 1]);
  }
  check_split_data(op, offsets, offsets_a, n);
  return offsets_a[n - 1];
}

// Data checks for complete_cumsum on host lengths; returns the total.
template <typename Index>
std::int64_t check_lengths_data(const Index* lengths, std::int64_t n) {
  constexpr const char* op = "complete_cumsum";
  // Branch-free pass (it vectorizes); the index of a bad entry is looked for only on failure.
  Index smallest = 0;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    smallest = std::min(smallest, lengths[i]);
    total += static_cast<std::int64_t>(lengths[i]);
  }
  if (smallest < 0) {
    for (std::int64_t i = 0; i < n; ++i) {
      TORCH_CHECK_VALUE(lengths[i] >= 0, op, ": lengths[", i, "] = ", lengths[i],
                        " is negative");
    }
  }
  // With no negative length the running sum only grows: it overflows iff the total does.
  constexpr auto limit = static_cast<std::int64_t>(std::numeric_limits<Index>::max());
  if (total > limit) {
    std::int64_t running = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      running += lengths[i];
      TORCH_CHECK_VALUE(running <= limit, op, ": the running sum of lengths overflows ",
                        index_dtype_name<Index>(), " at lengths[", i, "] (sum ", running,
                        "); use int64 lengths");
    }
  }
  return total;
}

}  // namespace hstu_ops
