// The `hstu_ops._C` Python extension module (pybind11).
//
// Importing it runs the static TORCH_LIBRARY registrations of the other translation units
// (torch.ops.hstu_ops.*); the module's own attributes say how it was built.
#include <pybind11/pybind11.h>
#include <torch/version.h>

#include "hstu_attention_cpu.h"

#define HSTU_STR_(x) #x
#define HSTU_STR(x) HSTU_STR_(x)

namespace {

#if defined(HSTU_OPS_WITH_CUDA)
constexpr bool kWithCuda = true;
#else
constexpr bool kWithCuda = false;
#endif
#if defined(HSTU_OPS_WITH_HIP)
constexpr bool kWithHip = true;
#else
constexpr bool kWithHip = false;
#endif
#if defined(_OPENMP)
constexpr bool kWithOpenMP = true;
#else
constexpr bool kWithOpenMP = false;
#endif

// The torch the extension was compiled against; another runtime torch may fail to load it.
constexpr const char* kTorchVersion =
    HSTU_STR(TORCH_VERSION_MAJOR) "." HSTU_STR(TORCH_VERSION_MINOR) "." HSTU_STR(
        TORCH_VERSION_PATCH);

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "hstu_ops native kernels (the operators live under torch.ops.hstu_ops)";
  m.attr("with_cpu") = true;
  m.attr("with_cuda") = kWithCuda;
  m.attr("with_hip") = kWithHip;
  m.attr("with_openmp") = kWithOpenMP;
  m.attr("torch_version") = kTorchVersion;
  m.def("cpu_attention_isa", &hstu_ops::attn_cpu::selected_isa,
        "Instruction set of the CPU attention kernels in use: generic, avx2 or avx512 (the best "
        "that the CPU and ATen's capability, ATEN_CPU_CAPABILITY, allow)");
  m.def("_select_cpu_attention_isa", &hstu_ops::attn_cpu::select_isa, pybind11::arg("isa"),
        "For tests and benchmarks: use the CPU attention kernels of another instruction set "
        "(one this build and CPU support); returns the previous one");
}
