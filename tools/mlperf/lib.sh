# Shared by the scripts of tools/mlperf (sourced, not run); they use its variables.
# shellcheck shell=bash disable=SC2034

MLPERF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$MLPERF_DIR/../.." && pwd)
YAMBDA_SIZES="50m 500m 5b"
DEFAULT_DATA_DIR="data/yambda"
DEFAULT_SIZE="5b"

# usage_error MESSAGE: the message and the script's usage on stderr, exit status 2.
usage_error() {
  echo "$(basename "$0"): $1" >&2
  usage >&2
  exit 2
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
  if ! command -v uv >/dev/null 2>&1; then
    echo "$(basename "$0"): needs uv (pip install uv) to run the workspace's tools, or" \
      "MLPERF_NO_UV=1 to use those of the current environment" >&2
    exit 2
  fi
  uv run --project "$REPO_ROOT" "$@"
}

# raw_files DATA_DIR SIZE: the dataset files the reference reads, one per line.
raw_files() {
  printf '%s\n' "$1/flat/$2/multi_event.parquet" "$1/artist_item_mapping.parquet" \
    "$1/album_item_mapping.parquet"
}
