#!/usr/bin/env bash
# Compile checks of the GPU backends of hstu-ops, runnable on a machine without a GPU.
#
#   (a) CUDA: where nvcc and a CUDA build of torch are present, configure and build the whole
#       extension with -DHSTU_OPS_CUDA=ON in a temporary directory, then load the module into
#       torch to prove it links (and, if a GPU is visible, run the ops once on it).
#   (b) HIP: where hipcc is present, compile the raw, torch-free kernels for AMD targets
#       (gfx90a, and gfx942 when the compiler knows it). Where a ROCm build of torch is present
#       too, also build the whole extension with -DHSTU_OPS_HIP=ON.
#
# A missing tool prints "SKIPPED: <check> (<reason>)" and the script goes on; a compile or link
# failure of our sources makes it exit non-zero.
#
# Usage, from the workspace root:  uv run --package hstu-ops bash packages/hstu-ops/ci/check_gpu_builds.sh
# Environment: PYTHON (the interpreter whose torch to build against; default: python3 on PATH),
#   HSTU_CUDA_ARCHS (default 90), HSTU_HIP_ARCHS (default "gfx90a gfx942"), KEEP_BUILD=1 to keep
#   the temporary build directories.
set -u -o pipefail

PKG_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CUDA_ARCHS="${HSTU_CUDA_ARCHS:-90}"
HIP_ARCHS="${HSTU_HIP_ARCHS:-gfx90a gfx942}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

failures=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hstu-ops-gpu-check.XXXXXX")"
cleanup() {
  if [ "${KEEP_BUILD:-0}" = "1" ]; then
    echo "build directories kept in $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

skip() { echo "SKIPPED: $1 ($2)"; }
pass() { echo "PASSED: $1"; }
fail() {
  echo "FAILED: $1"
  failures=$((failures + 1))
}
section() { printf '\n== %s ==\n' "$1"; }

# Prints the last lines of a log, indented, after a failure.
show_log() { tail -n "${2:-40}" "$1" | sed 's/^/    /'; }

torch_field() {
  # torch_field <python expression on torch>: prints it, or nothing when torch is missing.
  "$PYTHON" -c "import torch; print($1)" 2>/dev/null
}

# pybind11's CMake package, from the pybind11 installed for $PYTHON (the workspace's dev group).
pybind11_cmake_dir() {
  "$PYTHON" -m pybind11 --cmakedir 2>/dev/null || echo "pybind11-not-installed-for-$PYTHON"
}

cmake_generator_args() {
  if command -v ninja >/dev/null 2>&1; then echo "-G Ninja"; fi
}

# --------------------------------------------------------------------------------------------
section "CUDA: build and link the extension with HSTU_OPS_CUDA=ON"
# --------------------------------------------------------------------------------------------
check_cuda() {
  local name="cuda extension build (archs ${CUDA_ARCHS})"
  if ! command -v nvcc >/dev/null 2>&1; then
    skip "$name" "nvcc not found"
    return
  fi
  if ! command -v cmake >/dev/null 2>&1; then
    skip "$name" "cmake not found"
    return
  fi
  local torch_cuda
  torch_cuda="$(torch_field 'torch.version.cuda')"
  if [ -z "$torch_cuda" ]; then
    skip "$name" "torch is not importable by $PYTHON"
    return
  fi
  if [ "$torch_cuda" = "None" ]; then
    skip "$name" "the torch of $PYTHON is not a CUDA build"
    return
  fi
  echo "nvcc: $(nvcc --version | tail -n 2 | head -n 1)"
  echo "torch: $(torch_field 'torch.__version__') (CUDA $torch_cuda) from $PYTHON"

  # The CUDA torch wheels ship the CUDA library headers (cuSPARSE, cuBLAS, ...) that torch's
  # CUDA headers include and a bare toolkit may lack, in the include folders of the `nvidia`
  # packages. They are searched last (-idirafter), after the toolkit's own headers.
  local extra_includes
  extra_includes="$("$PYTHON" - <<'PY'
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = []
for base in nvidia.__path__:
    for name in sorted(os.listdir(base)):
        inc = os.path.join(base, name, "include")
        if os.path.isdir(inc):
            dirs.append(inc)
print(";".join(dirs), end="")
PY
)"
  if [ -n "$extra_includes" ]; then
    echo "extra include dirs from the nvidia wheels: ${extra_includes//;/ }"
  else
    echo "no nvidia wheel include dirs found (fine if the toolkit is complete)"
  fi

  local build="$WORK/cuda"
  local log="$WORK/cuda.log"
  # shellcheck disable=SC2046
  if ! cmake $(cmake_generator_args) -S "$PKG_DIR" -B "$build" \
      -DCMAKE_BUILD_TYPE=Release \
      -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
      -Dpybind11_DIR="$(pybind11_cmake_dir)" \
      -DHSTU_OPS_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" \
      -DHSTU_OPS_EXTRA_GPU_INCLUDE_DIRS="$extra_includes" >"$log" 2>&1; then
    fail "$name: cmake configure"
    show_log "$log"
    return
  fi
  local start=$SECONDS
  if ! cmake --build "$build" -j "$JOBS" >>"$log" 2>&1; then
    fail "$name: compile/link"
    show_log "$log"
    return
  fi
  local so
  so="$(find "$build" -maxdepth 1 -name '_C*.so' | head -n 1)"
  if [ -z "$so" ]; then
    fail "$name: no _C*.so produced"
    return
  fi
  pass "$name in $((SECONDS - start)) s: $(basename "$so")"

  # Load the module into a fresh interpreter that has not imported hstu_ops (which would
  # register the same operators from the installed build).
  if "$PYTHON" - "$so" <<'PY'
import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("_C", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
assert mod.with_cuda and not mod.with_hip, "module does not report a CUDA build"
for op in ("complete_cumsum", "concat_1d_jagged", "split_1d_jagged"):
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"hstu_ops::{op}", key), (op, key)
print(f"    loaded into torch {torch.__version__}: CPU and CUDA kernels registered")
if torch.cuda.is_available():
    lengths = torch.tensor([3, 0, 2], device="cuda")
    offsets = torch.ops.hstu_ops.complete_cumsum(lengths)
    assert offsets.tolist() == [0, 3, 3, 5], offsets
    a = torch.arange(5.0, device="cuda")[:, None]
    b = torch.arange(10.0, 14.0, device="cuda")[:, None]
    ob = torch.tensor([0, 1, 1, 4], device="cuda")
    values, out_offsets = torch.ops.hstu_ops.concat_1d_jagged(a, offsets, b, ob)
    assert values[:, 0].tolist() == [0, 1, 2, 10, 3, 4, 11, 12, 13], values
    print("    ran on", torch.cuda.get_device_name())
else:
    print("    no GPU visible: kernels compiled and linked, not run")
PY
  then
    pass "cuda extension import"
  else
    fail "cuda extension import"
  fi
}
check_cuda

# --------------------------------------------------------------------------------------------
section "HIP: compile the raw kernels (and the extension where a ROCm torch exists)"
# --------------------------------------------------------------------------------------------
check_hip() {
  if ! command -v hipcc >/dev/null 2>&1; then
    skip "hip kernel compile" "hipcc not found (Debian/Ubuntu: apt-get install hipcc)"
    skip "hip extension build" "hipcc not found"
    return
  fi
  # hipcc picks the NVIDIA platform when it sees nvcc; the point here is AMD code.
  export HIP_PLATFORM=amd
  local hip_version
  hip_version="$(hipcc --version 2>/dev/null | grep -m1 -i 'HIP version')"
  echo "hipcc: ${hip_version:-version unknown}"
  local probe="$WORK/probe.hip"
  printf '#include <hip/hip_runtime.h>\n__global__ void k(int* p) { p[threadIdx.x] = 1; }\n' >"$probe"

  local arch
  for arch in $HIP_ARCHS; do
    local name="hip kernel compile (--offload-arch=$arch)"
    local log="$WORK/hip-$arch.log"
    # A trivial kernel first: tells a toolchain that cannot target $arch from a bug of ours.
    if ! hipcc -x hip --offload-arch="$arch" -c "$probe" -o "$WORK/probe-$arch.o" >"$log" 2>&1; then
      if grep -qi "invalid target\|unsupported.*arch\|unknown target" "$log"; then
        skip "$name" "this hipcc does not know $arch"
      else
        skip "$name" "hipcc cannot compile a trivial kernel for $arch: $(head -n 1 "$log")"
      fi
      continue
    fi
    local start=$SECONDS
    if hipcc -x hip -std=c++20 --offload-arch="$arch" -Wall -Werror \
        -I"$PKG_DIR/csrc/kernels" -c "$PKG_DIR/csrc/kernels/jagged_kernels.cu" \
        -o "$WORK/jagged_kernels-$arch.o" >>"$log" 2>&1; then
      pass "$name in $((SECONDS - start)) s"
    else
      fail "$name"
      show_log "$log"
    fi
  done

  local torch_hip
  torch_hip="$(torch_field 'torch.version.hip')"
  if [ -z "$torch_hip" ] || [ "$torch_hip" = "None" ]; then
    skip "hip extension build" "no ROCm build of torch for $PYTHON"
    return
  fi
  local build="$WORK/hip"
  local log="$WORK/hip-ext.log"
  local archs="${HIP_ARCHS// /;}"
  # shellcheck disable=SC2046
  if cmake $(cmake_generator_args) -S "$PKG_DIR" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DPython_EXECUTABLE="$(command -v "$PYTHON")" -Dpybind11_DIR="$(pybind11_cmake_dir)" \
      -DHSTU_OPS_HIP=ON \
      -DCMAKE_HIP_ARCHITECTURES="$archs" >"$log" 2>&1 &&
    cmake --build "$build" -j "$JOBS" >>"$log" 2>&1; then
    pass "hip extension build (torch HIP $torch_hip)"
  else
    fail "hip extension build"
    show_log "$log"
  fi
}
check_hip

echo
if [ "$failures" -gt 0 ]; then
  echo "check_gpu_builds: $failures check(s) FAILED"
  exit 1
fi
echo "check_gpu_builds: no failures"
