#!/usr/bin/env bash
# One timed DLRMv4 run: tools/train.py, then the compliance check of its MLPerf log.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--data DIR [--size SIZE] [--prepared DIR]] [--out DIR] [--seed N]
                       [--ruleset RULESET] [-- TRAIN_ARGS...]

Runs tools/train.py to its quality target and times it. Its :::MLLOG records go to
OUT/mlperf.log, its summary (one JSON line) to OUT/summary.json. Then the log goes through
'mlperf-compliance check'. When the run reached its target and the log passes, the last line
is the result, as MLPerf reference scripts print it:
  RESULT,DLRMV4,,<seconds>,<user>,<start date>
Exit status: train.py's when it fails, 1 when the run missed its target or the log fails the
check, 2 for a usage or input error (a bad argument, a --data without the download, an --out
or --prepared in the way) or a log the check could not read. Errors are one line on stderr.

  --data DIR         a Yambda download (download_dataset.sh); without it, train.py
                     synthesizes a small dataset in the Yambda schema under OUT
  --size SIZE        with --data: one of $YAMBDA_SIZES (default: $DEFAULT_SIZE)
  --prepared DIR     with --data: the outputs of prepare_dataset.sh, used through the link
                     OUT/prepared (default: DIR/prepared/SIZE)
  --out DIR          run folder (default: runs/mlperf)
  --seed N           seed of the data order and initialization (default: train.py's)
  --ruleset RULESET  compliance ruleset (default: 6.1.0, the official rules, with --data;
                     dev, the rules for synthetic data, without)
  -- TRAIN_ARGS      passed on to tools/train.py (see: uv run tools/train.py --help)
  -h, --help         this message

Environment: MLPERF_LAUNCHER, the command that runs train.py (default: python; several GPUs:
'torchrun --standalone --nproc-per-node 8'), run through uv like the other tools unless
MLPERF_NO_UV=1.
USAGE
}

data="" size="" prepared="" out="runs/mlperf" seed="" ruleset=""
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --data | --size | --prepared | --out | --seed | --ruleset)
      (($# >= 2)) || usage_error "$1 needs a value"
      [[ -n $2 ]] || usage_error "$1 must not be empty"
      case "$1" in
        --data) data=$2 ;;
        --size) size=$2 ;;
        --prepared) prepared=$2 ;;
        --out) out=$2 ;;
        --seed) seed=$2 ;;
        --ruleset) ruleset=$2 ;;
      esac
      shift 2 ;;
    --) shift; break ;;
    *) usage_error "unknown argument $1 (arguments for train.py go after --)" ;;
  esac
done
train_args=("$@")
for arg in "${train_args[@]}"; do
  case "$arg" in
    --data | --data=* | --size | --size=* | --out | --out=* | --seed | --seed=*)
      usage_error "give ${arg%%=*} to $(basename "$0") itself, before --" ;;
  esac
done
if [[ -n $seed && ! $seed =~ ^[0-9]+$ ]]; then
  usage_error "--seed must be a non-negative integer, got '$seed'"
fi
if [[ -n $ruleset && ! $ruleset =~ ^(dev|[0-9]+\.[0-9]+\.[0-9]+)$ ]]; then
  usage_error "--ruleset must be dev or a version such as 6.1.0, got '$ruleset'"
fi
[[ -n $out ]] || usage_error "--out must not be empty"
check_creatable --out "$out"
check_workspace_runner

# MLPERF_LAUNCHER runs train.py: python by default, torchrun for several GPUs.
read -r -a launcher <<<"${MLPERF_LAUNCHER:-python}"
((${#launcher[@]})) || usage_error "MLPERF_LAUNCHER is empty"
train=("${launcher[@]}" "$REPO_ROOT/tools/train.py" --out "$out")
if [[ -n $data ]]; then
  size=${size:-$DEFAULT_SIZE}
  check_size "$size"
  check_dir --data "$data"
  prepared=${prepared:-$data/prepared/$size}
  check_creatable --prepared "$prepared"
  raw=$(raw_files "$data" "$size" | head -n 1)
  [[ -f $raw ]] || input_error "$raw: no such file; run download_dataset.sh $data $size"
  # OUT/prepared must be free, a link or the prepared outputs themselves: checked before
  # anything is created.
  if [[ -e $out/prepared && ! -L $out/prepared ]] &&
    { [[ ! -d $prepared ]] ||
      [[ $(cd "$out/prepared" && pwd -P) != "$(cd "$prepared" && pwd -P)" ]]; }; then
    input_error "$out/prepared exists and is not a link to $prepared; remove it or use another --out"
  fi
  train+=(--data "$data" --size "$size")
  ruleset=${ruleset:-6.1.0}
  # train.py prepares its data in OUT/prepared: point it at the prepared outputs, which it
  # reuses while they match the download (or builds there on a first run).
  mkdir -p "$out" "$prepared"
  target=$(cd "$prepared" && pwd -P)
  if [[ -L $out/prepared || ! -e $out/prepared ]]; then
    ln -sfn "$target" "$out/prepared"
  fi
else
  [[ -z $prepared ]] || usage_error "--prepared goes with --data"
  [[ -z $size ]] || train+=(--size "$size")
  ruleset=${ruleset:-dev}
fi
[[ -z $seed ]] || train+=(--seed "$seed")
train+=("${train_args[@]}")
mkdir -p "$out"
log="$out/mlperf.log"
summary="$out/summary.json"

start=$(date +%s)
start_fmt=$(LC_ALL=C date '+%Y-%m-%d %r')
echo "STARTING TIMING RUN AT $start_fmt"
echo "running: ${train[*]}"
# train.py's JSON line goes to a temporary file first: summary.json is replaced only once
# train.py has accepted its inputs (a refusal, status 2, leaves an earlier run's as it was).
captured=$(mktemp -t run_and_time.XXXXXX)
trap 'rm -f "$captured"' EXIT
set +e
in_workspace "${train[@]}" | tee "$captured"
train_status=${PIPESTATUS[0]}
set -e
end=$(date +%s)
end_fmt=$(LC_ALL=C date '+%Y-%m-%d %r')
echo "ENDING TIMING RUN AT $end_fmt"
if ((train_status != 2)); then
  staged="$out/.summary.json.tmp-$$"
  cp "$captured" "$staged" && mv -f "$staged" "$summary"
fi
if ((train_status == 2)); then
  echo "$(basename "$0"): ERROR: tools/train.py refused the run (exit status 2, its error" \
    "is above); $summary is left as it was" >&2
  exit 2
elif ((train_status != 0)); then
  echo "$(basename "$0"): ERROR: tools/train.py failed with exit status $train_status" >&2
  exit "$train_status"
fi

status=$(tail -n 1 "$summary" | sed -n 's/.*"status": "\([a-z]*\)".*/\1/p')
echo "MLPerf log: $log ($(grep -c ':::MLLOG' "$log" || true) :::MLLOG records), run status: ${status:-unknown}"
echo "compliance check, $ruleset ruleset:"
set +e
in_workspace mlperf-compliance check --ruleset "$ruleset" "$log"
check_status=$?
set -e
if ((check_status == 1)); then
  echo "$(basename "$0"): ERROR: $log fails the $ruleset ruleset" >&2
  exit 1
elif ((check_status != 0)); then
  # 2 from mlperf-compliance: no verdict (the log is missing or unreadable, say)
  echo "$(basename "$0"): ERROR: $log could not be checked" \
    "(mlperf-compliance exit status $check_status; its error is above)" >&2
  exit 2
fi
if [[ $status != success ]]; then
  echo "$(basename "$0"): ERROR: the run stopped without reaching its target" \
    "(status ${status:-unknown}): no result" >&2
  exit 1
fi
echo "RESULT,DLRMV4,,$((end - start)),${USER:-$(id -un)},$start_fmt"
