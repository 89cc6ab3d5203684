#!/usr/bin/env bash
# The GPU check of hstu-ops: install, build, GPU tests, correctness per op family, benchmarks.
# Needs no network; writes gpu-check.json, gpu-check.md and gpu-check.log into OUT_DIR.
#
#   bash tools/gpu/check.sh OUT_DIR [--cpu-smoke] [--budget SECONDS] [--stages STAGE...]
#
# PYTHON picks the interpreter (default: python3); CHECK_COMMIT names the commit (it wins over
# any git repository around the tree); see tools/gpu/check.py for the stages.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/check.py" "$@"
