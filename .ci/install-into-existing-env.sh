#!/usr/bin/env bash
# Installs the workspace packages into the Python environment that runs this script, keeping
# its torch, fbgemm and torchrec (a ROCm or NVIDIA PyTorch container, say). hstu-ops is compiled
# against that torch: without build isolation, with the GPU backend given as the argument.
#
#   bash .ci/install-into-existing-env.sh cpu|cuda|hip
#
# INSTALL_OFFLINE=1: a machine without network (tools/gpu/check.sh): nothing is downloaded,
# torchrec may be missing, each package is installed only when its build backend is already
# importable (the others are named and skipped), and their requirements are left as they are.
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
offline=${INSTALL_OFFLINE:-0}
if [ "$offline" = 1 ] && ! "$python" -c 'import torchrec' >/dev/null 2>&1; then
  echo "torchrec is not importable by $python: installing without it (hstu-model's model and" \
    "trainer will not run)"
elif ! "$python" -c 'import torchrec' >/dev/null 2>&1; then
  echo "torchrec (with a loadable fbgemm) is not importable by $python: install your platform's" \
    "fbgemm-gpu and torchrec builds first (a CPU machine: fbgemm-gpu-cpu and torchrec)" >&2
  exit 2
fi
# Pinning the installed torch makes pip fail rather than replace it.
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
"$python" -c 'from importlib.metadata import version; print("torch==" + version("torch"))' >"$pins"

packages=(dlrmv4-cli hstu-ops hstu-model yambda-data mlperf-compliance storage-workloads dlrmv4-train)
if [ "$offline" = 1 ]; then
  # pybind11's CMake files wherever that Python finds pybind11 (not only in its site-packages).
  if cmake_dir=$("$python" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null); then
    export CMAKE_ARGS="${CMAKE_ARGS:-} -Dpybind11_DIR=$cmake_dir"
  fi
  installed=()
  for name in "${packages[@]}"; do
    backend=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["build-backend"].split(".")[0])' \
      "$root/packages/$name/pyproject.toml")
    if ! "$python" -c "import $backend" >/dev/null 2>&1; then
      echo "skipped $name: its build backend ($backend) is not installed here"
      continue
    fi
    echo "installing $name (hstu-ops compiles its native ops: minutes)"
    "$python" -m pip install --quiet --no-index --no-build-isolation --no-deps \
      --constraint "$pins" "$root/packages/$name"
    installed+=("$name")
  done
  echo "installed without network: ${installed[*]:-nothing}"
else
  "$python" -m pip install --quiet --constraint "$pins" "scikit-build-core>=0.10" "pybind11>=2.13" "hatchling>=1.25" ninja cmake
  # The environment's framework stack (torch, torchrec, fbgemm, triton) is left alone: pip would
  # otherwise pull torchrec's declared CUDA fbgemm-gpu into a CPU or ROCm environment. Every other
  # requirement of the packages (and of their `torch` extra and dev group) is installed normally.
  requirements=$("$python" - "$root" "${packages[@]}" <<'PY'
import re, sys, tomllib
from pathlib import Path

root, names = Path(sys.argv[1]), sys.argv[2:]
framework = {"torch", "torchrec", "triton", "fbgemm-gpu", "fbgemm-gpu-cpu"}
ours = set()
found = []
for name in names:
    project = tomllib.loads((root / "packages" / name / "pyproject.toml").read_text())
    ours.add(project["project"]["name"])
    found += project["project"].get("dependencies", [])
    for extra in project["project"].get("optional-dependencies", {}).values():
        found += extra
    found += project.get("dependency-groups", {}).get("dev", [])
for requirement in dict.fromkeys(found):
    base = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
    if base not in framework and base not in ours:
        print(requirement)
PY
  )
  # shellcheck disable=SC2086
  "$python" -m pip install --constraint "$pins" $requirements
  for name in "${packages[@]}"; do
    "$python" -m pip install --no-build-isolation --no-deps "$root/packages/$name"
  done
fi

torch_after=$("$python" -c 'import torch; print(torch.__version__, torch.__file__)')
if [ "$torch_before" != "$torch_after" ]; then
  echo "torch changed: '$torch_before' -> '$torch_after'" >&2
  exit 1
fi
if [ "$offline" = 1 ]; then
  "$python" -c 'import hstu_ops; print("native ops:", hstu_ops.native_build_info())'
else
  "$python" -c 'import dlrmv4_cli, hstu_ops, hstu_model, yambda_data, mlperf_compliance, storage_workloads, dlrmv4_train; print("native ops:", hstu_ops.native_build_info())'
fi
echo "installed into the existing environment; torch kept: $torch_after"
