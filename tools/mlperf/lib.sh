# Shared by the scripts of tools/mlperf (sourced, not run); they use its variables.
# shellcheck shell=bash disable=SC2034

MLPERF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$MLPERF_DIR/../.." && pwd)
YAMBDA_SIZES="50m 500m 5b"
DEFAULT_DATA_DIR="data/yambda"
DEFAULT_SIZE="5b"

# Exit status of every script here: 0 success, 1 a FAIL verdict or a failed step (named on
# stderr), 2 a usage or input error: a bad argument, a missing or unusable input. Errors are
# one line on stderr.

# usage_error MESSAGE: one line on stderr (the message, and where the usage is), exit status 2.
usage_error() {
  echo "$(basename "$0"): $1 (see $(basename "$0") --help)" >&2
  exit 2
}

# input_error MESSAGE: one line on stderr, exit status 2 (a missing or unusable input).
input_error() {
  echo "$(basename "$0"): $1" >&2
  exit 2
}

# check_dir WHAT PATH: PATH must be an existing directory (WHAT names the argument).
check_dir() {
  [[ -n $2 ]] || usage_error "$1 must not be empty"
  [[ -e $2 ]] || input_error "$1 $2: no such directory"
  [[ -d $2 ]] || input_error "$1 $2: not a directory"
}

# check_creatable WHAT PATH: PATH is a directory or can be made one (no file in the way).
check_creatable() {
  [[ -n $2 ]] || usage_error "$1 must not be empty"
  local path=$2
  while [[ ! -e $path && $path != "$(dirname "$path")" ]]; do
    path=$(dirname "$path")
  done
  [[ ! -e $path || -d $path ]] || input_error "$1 $2: not a directory ($path is a file)"
}

# check_size SIZE: refuse a size that Yambda does not publish.
check_size() {
  case " $YAMBDA_SIZES " in
    *" $1 "*) ;;
    *) usage_error "unknown size '$1' (one of: $YAMBDA_SIZES)" ;;
  esac
}

# in_workspace CMD ARGS...: run a command of the workspace environment through uv (which
# installs it on first use; UV_NO_SYNC=1 skips uv's check of an environment in place), or,
# with MLPERF_NO_UV=1, from the current environment (a container into which the workspace
# packages were installed, e.g. by .ci/install-into-existing-env.sh). Relative paths stay
# relative to the caller's directory.
in_workspace() {
  if [[ ${MLPERF_NO_UV:-0} == 1 ]]; then
    "$@"
    return
  fi
  check_workspace_runner
  uv run --project "$REPO_ROOT" "$@"
}

# check_workspace_runner: refuse (status 2) when in_workspace could not run a tool; a script
# asks before it creates anything.
check_workspace_runner() {
  if [[ ${MLPERF_NO_UV:-0} != 1 ]] && ! command -v uv >/dev/null 2>&1; then
    echo "$(basename "$0"): needs uv (pip install uv) to run the workspace's tools, or" \
      "MLPERF_NO_UV=1 to use those of the current environment" >&2
    exit 2
  fi
}

# raw_files DATA_DIR SIZE: the dataset files the reference reads, one per line.
raw_files() {
  printf '%s\n' "$1/flat/$2/multi_event.parquet" "$1/artist_item_mapping.parquet" \
    "$1/album_item_mapping.parquet"
}
