// Portability layer that lets one kernel source compile with nvcc (CUDA) and hipcc (HIP).
//
// Only what the kernels in this directory use is mapped. No torch headers here: the raw kernels
// must stay compilable by a bare hipcc/nvcc, without a GPU build of torch.
#pragma once

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__) || defined(HSTU_OPS_WITH_HIP)
#include <hip/hip_runtime.h>
#define HSTU_GPU_HIP 1
namespace hstu_ops::gpu {
using Stream = hipStream_t;
using Error = hipError_t;
inline constexpr Error kSuccess = hipSuccess;
inline Error last_error() { return hipGetLastError(); }
inline const char* error_string(Error e) { return hipGetErrorString(e); }
}  // namespace hstu_ops::gpu
#else
#include <cuda_runtime.h>
#define HSTU_GPU_CUDA 1
namespace hstu_ops::gpu {
using Stream = cudaStream_t;
using Error = cudaError_t;
inline constexpr Error kSuccess = cudaSuccess;
inline Error last_error() { return cudaGetLastError(); }
inline const char* error_string(Error e) { return cudaGetErrorString(e); }
}  // namespace hstu_ops::gpu
#endif

// Both compilers accept the triple-chevron launch syntax and the __global__/__device__/
// __shared__ keywords, so those need no mapping.
#define HSTU_DEVICE __device__ __forceinline__
