// Torch-facing glue for the GPU kernels in kernels/jagged_kernels.cu.
//
// Compiled by nvcc for CUDA and by hipcc for HIP. ROCm builds of torch present AMD GPUs under
// the CUDA dispatch key, so both register under TORCH_LIBRARY_IMPL(hstu_ops, CUDA, m).
//
// Validation copies the (batch + 1)-element offsets (or the lengths) to the host and runs the
// same checks as the CPU path, so errors read the same on every backend. That costs one
// device synchronisation per call.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#if defined(HSTU_OPS_WITH_HIP)
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>
#else
#include <c10/cuda/CUDAStream.h>
#endif

#include "jagged_common.h"
#include "kernels/jagged_kernels.h"

namespace hstu_ops {
namespace {

void* current_stream(const at::Tensor& t) {
#if defined(HSTU_OPS_WITH_HIP)
  return c10::hip::getCurrentHIPStreamMasqueradingAsCUDA(t.device().index()).stream();
#else
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
}

void check_launch(const char* op, const char* err) {
  TORCH_CHECK(err == nullptr, op, ": GPU kernel launch failed: ", err);
}

// Calls fn.template operator()<Word>() with the widest copy word that suits `word_bytes`.
template <typename Fn>
void dispatch_word(int word_bytes, Fn&& fn) {
  switch (word_bytes) {
    case 16:
      fn(gpu::Word16{});
      break;
    case 8:
      fn(std::uint64_t{});
      break;
    case 4:
      fn(std::uint32_t{});
      break;
    case 2:
      fn(std::uint16_t{});
      break;
    default:
      fn(std::uint8_t{});
      break;
  }
}

at::Tensor complete_cumsum_gpu(const at::Tensor& lengths_in) {
  check_index_tensor("complete_cumsum", "lengths", lengths_in);
  const c10::DeviceGuard guard(lengths_in.device());
  const at::Tensor lengths = lengths_in.contiguous();
  const std::int64_t n = lengths.numel();
  at::Tensor offsets = at::empty({n + 1}, lengths.options());
  const at::Tensor host = lengths.cpu();
  AT_DISPATCH_INDEX_TYPES(lengths.scalar_type(), "complete_cumsum_gpu", [&] {
    check_lengths_data<index_t>(host.data_ptr<index_t>(), n);
    check_launch("complete_cumsum",
                 gpu::launch_complete_cumsum<index_t>(lengths.data_ptr<index_t>(),
                                                      offsets.data_ptr<index_t>(), n,
                                                      current_stream(lengths)));
  });
  return offsets;
}

std::tuple<at::Tensor, at::Tensor> concat_1d_jagged_gpu(const at::Tensor& values_a_in,
                                                        const at::Tensor& offsets_a_in,
                                                        const at::Tensor& values_b_in,
                                                        const at::Tensor& offsets_b_in) {
  constexpr const char* op = "concat_1d_jagged";
  check_concat_args(values_a_in, offsets_a_in, values_b_in, offsets_b_in);
  const c10::DeviceGuard guard(values_a_in.device());
  const at::Tensor offsets_a = offsets_a_in.contiguous();
  const at::Tensor offsets_b = offsets_b_in.contiguous();
  const std::int64_t n = offsets_a.numel();
  const std::int64_t rows_a = values_a_in.size(0);
  const std::int64_t rows_b = values_b_in.size(0);
  const std::int64_t row_bytes = row_numel(values_a_in) * values_a_in.element_size();

  at::Tensor out;
  at::Tensor out_offsets = at::empty({n}, offsets_a.options());
  const at::Tensor host_a = offsets_a.cpu();
  const at::Tensor host_b = offsets_b.cpu();
  AT_DISPATCH_INDEX_TYPES(offsets_a.scalar_type(), "concat_1d_jagged_gpu", [&] {
    check_offsets_data<index_t>(op, "offsets_a", host_a.data_ptr<index_t>(), n, rows_a,
                                "values_a");
    check_offsets_data<index_t>(op, "offsets_b", host_b.data_ptr<index_t>(), n, rows_b,
                                "values_b");
    check_fits<index_t>(op, rows_a + rows_b, "the concatenated number of rows");
    const at::Tensor values_a = values_a_in.contiguous();
    const at::Tensor values_b = values_b_in.contiguous();
    out = at::empty(with_rows(values_a, rows_a + rows_b), values_a.options());
    const int word = copy_word_bytes(
        row_bytes, {values_a.data_ptr(), values_b.data_ptr(), out.data_ptr()});
    dispatch_word(word, [&](auto tag) {
      using Word = decltype(tag);
      check_launch(op, gpu::launch_concat_1d_jagged<Word, index_t>(
                           static_cast<const Word*>(values_a.data_ptr()),
                           offsets_a.data_ptr<index_t>(),
                           static_cast<const Word*>(values_b.data_ptr()),
                           offsets_b.data_ptr<index_t>(), static_cast<Word*>(out.data_ptr()),
                           out_offsets.data_ptr<index_t>(), n - 1,
                           row_bytes / static_cast<std::int64_t>(sizeof(Word)),
                           current_stream(values_a)));
    });
  });
  return {out, out_offsets};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> split_1d_jagged_gpu(
    const at::Tensor& values_in, const at::Tensor& offsets_in, const at::Tensor& offsets_a_in) {
  constexpr const char* op = "split_1d_jagged";
  check_split_args(values_in, offsets_in, offsets_a_in);
  const c10::DeviceGuard guard(values_in.device());
  const at::Tensor offsets = offsets_in.contiguous();
  const at::Tensor offsets_a = offsets_a_in.contiguous();
  const std::int64_t n = offsets.numel();
  const std::int64_t rows = values_in.size(0);
  const std::int64_t row_bytes = row_numel(values_in) * values_in.element_size();

  at::Tensor a;
  at::Tensor b;
  at::Tensor offsets_b = at::empty({n}, offsets.options());
  const at::Tensor host = offsets.cpu();
  const at::Tensor host_a = offsets_a.cpu();
  AT_DISPATCH_INDEX_TYPES(offsets.scalar_type(), "split_1d_jagged_gpu", [&] {
    const std::int64_t rows_a = check_split_offsets<index_t>(
        host.data_ptr<index_t>(), host_a.data_ptr<index_t>(), n, rows);
    const at::Tensor values = values_in.contiguous();
    a = at::empty(with_rows(values, rows_a), values.options());
    b = at::empty(with_rows(values, rows - rows_a), values.options());
    const int word =
        copy_word_bytes(row_bytes, {values.data_ptr(), a.data_ptr(), b.data_ptr()});
    dispatch_word(word, [&](auto tag) {
      using Word = decltype(tag);
      check_launch(op, gpu::launch_split_1d_jagged<Word, index_t>(
                           static_cast<const Word*>(values.data_ptr()),
                           offsets.data_ptr<index_t>(), offsets_a.data_ptr<index_t>(),
                           static_cast<Word*>(a.data_ptr()), static_cast<Word*>(b.data_ptr()),
                           offsets_b.data_ptr<index_t>(), n - 1,
                           row_bytes / static_cast<std::int64_t>(sizeof(Word)),
                           current_stream(values)));
    });
  });
  return {a, b, offsets_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(hstu_ops, CUDA, m) {
  m.impl("complete_cumsum", &complete_cumsum_gpu);
  m.impl("concat_1d_jagged", &concat_1d_jagged_gpu);
  m.impl("split_1d_jagged", &split_1d_jagged_gpu);
}

}  // namespace hstu_ops
