#!/usr/bin/env bash
# The GPU check of hstu-ops: install, build, GPU tests, correctness per op family, benchmarks.
# Needs no network; writes gpu-check.json, gpu-check.md and gpu-check.log into OUT_DIR.
#
#   bash tools/gpu/check.sh OUT_DIR [--cpu-smoke] [--budget SECONDS]
#
# PYTHON picks the interpreter (default: python3); CHECK_COMMIT names the commit where the tree
# has no git folder; see tools/gpu/check.py for the stages.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/check.py" "$@"
