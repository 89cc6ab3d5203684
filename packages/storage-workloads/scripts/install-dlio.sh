#!/usr/bin/env bash
# install-dlio.sh VENV_DIR: the DLIO engine (dlio-benchmark 2.0.0) in its own virtual environment.
#
# dlio-benchmark 2.0.0 on PyPI requires an NVIDIA DALI wheel (nvidia-dali-cuda110) that cannot be
# installed, plus torch; it runs without them. So it is installed with --no-deps, followed by its
# real runtime needs pinned in dlio-requirements.txt beside this script, resolved with the
# workspace's exclude-newer date. mpirun comes from Debian's openmpi-bin (and mpi4py builds
# against libopenmpi-dev where no wheel fits); both are installed with apt-get when this runs as
# root and they are missing. Never install this into the workspace's own .venv.
#
# The DLIO extensions of storage-workloads (src/storage_workloads/dlio_ext: parquet, tfrecord
# without DALI, jpeg of the declared size, checkpointing) are not installed: each run puts them
# on DLIO's PYTHONPATH. Their one extra need, pyarrow, is in dlio-requirements.txt, and the last
# step checks that they import here.
#
# Environment: DLIO_PYTHON (default python3) is the interpreter of the new environment;
# DLIO_WITH_TORCH=1 also installs torch (needed by the pytorch framework workloads; large).
#
# Then: storage-workloads datagen|run ... --dlio-venv VENV_DIR (or STORAGE_WORKLOADS_DLIO_VENV).
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1:0:1}" = "-" ]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
venv=$1
here=$(cd "$(dirname "$0")" && pwd)
exclude_newer="2026-11-20T00:00:00Z"
python=${DLIO_PYTHON:-python3}

if ! command -v uv >/dev/null 2>&1; then
  echo "install-dlio.sh: uv is needed (pip install uv)" >&2
  exit 2
fi

# Open MPI: mpirun for multi-process runs, the headers for an mpi4py source build.
need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
if command -v dpkg >/dev/null 2>&1 && ! dpkg -s libopenmpi-dev >/dev/null 2>&1; then
  need_apt+=(libopenmpi-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-dlio.sh: apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  elif ! command -v mpirun >/dev/null 2>&1; then
    echo "install-dlio.sh: mpirun not found and not root: install Open MPI (Debian: openmpi-bin" \
      "libopenmpi-dev); single-process runs (--no-mpi) work without it" >&2
  fi
fi

export UV_PYTHON_DOWNLOADS=never
uv venv --quiet --allow-existing --python "$python" "$venv"
vpython="$venv/bin/python"
uv pip install --quiet --python "$vpython" --exclude-newer "$exclude_newer" \
  --no-deps "dlio-benchmark==2.0.0"
uv pip install --quiet --python "$vpython" --exclude-newer "$exclude_newer" \
  -r "$here/dlio-requirements.txt"
if [ "${DLIO_WITH_TORCH:-0}" = 1 ]; then
  uv pip install --quiet --python "$vpython" --exclude-newer "$exclude_newer" "torch==2.14.1"
fi

# Verify: DLIO's entry module imports with everything it loads at start (hydra, omegaconf,
# mpi4py, pandas, psutil, dftracer), the extensions import and install into it, and the console
# script is there.
PYTHONPATH="$here/../src/storage_workloads/dlio_ext${PYTHONPATH:+:$PYTHONPATH}" "$vpython" - <<'EOF'
import importlib.metadata as metadata

import dlio_benchmark.main  # noqa: F401
from mpi4py import MPI
from sw_dlio_ext import checkpoint, jpeg, launch, parquet, tfrecord  # noqa: F401

launch.install()
print(
    f"install-dlio.sh: dlio-benchmark {metadata.version('dlio-benchmark')}, "
    f"tensorflow-cpu {metadata.version('tensorflow-cpu')}, pyarrow {metadata.version('pyarrow')}, "
    f"mpi4py {metadata.version('mpi4py')} ({MPI.Get_library_version().splitlines()[0].strip()}); "
    "storage-workloads DLIO extensions load"
)
EOF
test -x "$venv/bin/dlio_benchmark"
echo "install-dlio.sh: ready: $venv/bin/dlio_benchmark"
