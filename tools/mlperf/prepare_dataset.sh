#!/usr/bin/env bash
# Preprocess a Yambda download and build the sample store, ahead of the timed runs.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--prepared DIR] [--min-history N] [DATA_DIR] [SIZE]

Runs the reference's preprocessing (temporal split, sessions, item popularity) and builds the
memory-mapped sample store, exactly as tools/train.py would on its first run, into PREPARED
(PREPARED/preprocessed and PREPARED/store). Both steps are skipped while their inputs are
unchanged, so running it again does nothing. run_and_time.sh --data DATA_DIR uses them.

  DATA_DIR        dataset root of download_dataset.sh (default: $DEFAULT_DATA_DIR)
  SIZE            one of: $YAMBDA_SIZES (default: $DEFAULT_SIZE)
  --prepared DIR  where the outputs go (default: DATA_DIR/prepared/SIZE)
  --min-history N earlier events a listen needs to become a sample: train.py's --min-history
                  of the runs that will use the store (default: train.py's; a closed run
                  needs the reference's 4086)
  -h, --help      this message

Exit status: 0 prepared, 2 a usage or input error (a bad argument, a DATA_DIR without the
download, a PREPARED in the way), else that of the step that failed (named on stderr).
USAGE
}

prepared="" min_history=""
positional=()
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --prepared | --min-history)
      (($# >= 2)) || usage_error "$1 needs a value"
      [[ -n $2 ]] || usage_error "$1 must not be empty"
      if [[ $1 == --prepared ]]; then prepared=$2; else min_history=$2; fi
      shift 2 ;;
    -*) usage_error "unknown option $1" ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} <= 2)) || usage_error "too many arguments: ${positional[*]}"
if [[ -n $min_history && ! $min_history =~ ^[1-9][0-9]*$ ]]; then
  usage_error "--min-history must be a positive integer, got '$min_history'"
fi
data_dir=${positional[0]-$DEFAULT_DATA_DIR}
size=${positional[1]-$DEFAULT_SIZE}
check_size "$size"
check_dir DATA_DIR "$data_dir"
prepared=${prepared:-$data_dir/prepared/$size}
check_creatable --prepared "$prepared"

raw=$(raw_files "$data_dir" "$size" | head -n 1)
[[ -f $raw ]] || input_error "$raw: no such file; run download_dataset.sh $data_dir $size first"
# (data_steps.py checks the raw file before it creates PREPARED or anything in it)
in_workspace python "$MLPERF_DIR/data_steps.py" prepare "$data_dir" "$size" "$prepared" \
  ${min_history:+"$min_history"}
echo "done: next, tools/mlperf/verify_dataset.sh $data_dir $size"
