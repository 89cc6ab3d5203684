#!/usr/bin/env bash
# Installs the workspace packages into the Python environment that runs this script, keeping
# its torch, fbgemm and torchrec (a ROCm or NVIDIA PyTorch container, say). hstu-ops is compiled
# against that torch: without build isolation, with the GPU backend given as the argument.
#
#   bash .ci/install-into-existing-env.sh cpu|cuda|hip
set -euo pipefail
backend=${1:-cpu}
python=${PYTHON:-python}
root=$(cd "$(dirname "$0")/.." && pwd)

case "$backend" in
  cpu) ;;
  cuda) export HSTU_OPS_CUDA=ON ;;
  hip) export HSTU_OPS_HIP=ON ;;
  *) echo "unknown backend '$backend' (expected cpu, cuda or hip)" >&2; exit 2 ;;
esac

if ! torch_before=$("$python" -c 'import torch; print(torch.__version__, torch.__file__)'); then
  echo "torch is not importable by $python: install your platform's torch first" >&2
  exit 2
fi
# Pinning the installed torch makes pip fail rather than replace it.
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
"$python" -c 'import torch; print(f"torch=={torch.__version__}")' >"$pins"

"$python" -m pip install --quiet --constraint "$pins" "scikit-build-core>=0.10" "pybind11>=2.13" ninja cmake
"$python" -m pip install --no-build-isolation --constraint "$pins" \
  "$root/packages/hstu-ops" \
  "$root/packages/hstu-model" \
  "$root/packages/yambda-data[torch]" \
  "$root/packages/mlperf-compliance" \
  "$root/packages/storage-workloads" \
  "pytest>=8" "hypothesis>=6"

torch_after=$("$python" -c 'import torch; print(torch.__version__, torch.__file__)')
if [ "$torch_before" != "$torch_after" ]; then
  echo "torch changed: '$torch_before' -> '$torch_after'" >&2
  exit 1
fi
"$python" -c 'import hstu_ops, hstu_model, yambda_data, mlperf_compliance, storage_workloads; print("native ops:", hstu_ops.native_build_info())'
echo "installed into the existing environment; torch kept: $torch_after"
