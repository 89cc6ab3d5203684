#!/usr/bin/env bash
# Verify a Yambda download and its processed outputs (nothing is downloaded or built here).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--prepared DIR] [--expected FILE] [--record] [DATA_DIR] [SIZE]

Checks, without changing anything:
  1. the raw files of SIZE are in DATA_DIR;
  2. the preprocess output (PREPARED/preprocessed) agrees with its split_meta.json;
  3. the sample store (PREPARED/store): the sha256 of every array matches its manifest, and
     it was built from that preprocess output and DATA_DIR's mappings;
  4. the counts and checksums match the expected values of SIZE, when they were recorded.
Exit status 0 when everything holds, 1 when something does not (named on stderr), 2 for a
usage or input error (a bad argument, a DATA_DIR or --prepared DIR that does not exist).

  DATA_DIR         dataset root (default: $DEFAULT_DATA_DIR)
  SIZE             one of: $YAMBDA_SIZES (default: $DEFAULT_SIZE)
  --prepared DIR   the outputs of prepare_dataset.sh (default: DATA_DIR/prepared/SIZE)
  --expected FILE  expected values (default: tools/mlperf/expected/SIZE.json, if present)
  --record         after checks 1-3 pass, write what was found to the expected-values file
                   (for a maintainer, once, from a trusted download; then check it in)
  -h, --help       this message
USAGE
}

prepared="" expected="" record=0
positional=()
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --prepared | --expected)
      (($# >= 2)) || usage_error "$1 needs a value"
      [[ -n $2 ]] || usage_error "$1 must not be empty"
      if [[ $1 == --prepared ]]; then prepared=$2; else expected=$2; fi
      shift 2 ;;
    --record) record=1; shift ;;
    -*) usage_error "unknown option $1" ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} <= 2)) || usage_error "too many arguments: ${positional[*]}"
data_dir=${positional[0]-$DEFAULT_DATA_DIR}
size=${positional[1]-$DEFAULT_SIZE}
check_size "$size"
check_dir DATA_DIR "$data_dir"
# An explicit --prepared must exist; the default one missing is a verdict (not prepared yet).
[[ -z $prepared ]] || check_dir --prepared "$prepared"
prepared=${prepared:-$data_dir/prepared/$size}
[[ ! -e $expected || -f $expected ]] || input_error "--expected $expected: not a file"
expected=${expected:-$MLPERF_DIR/expected/$size.json}

fail() {
  echo "$(basename "$0"): FAILED: $*" >&2
  exit 1
}

echo "1. raw files of Yambda $size in $data_dir"
while IFS= read -r file; do
  [[ -s $file ]] || fail "$file: missing or empty; run download_dataset.sh $data_dir $size"
  echo "  $file: $(wc -c <"$file" | tr -d ' ') bytes"
done < <(raw_files "$data_dir" "$size")

for part in preprocessed store; do
  [[ -d $prepared/$part ]] ||
    fail "$prepared/$part: no such directory; run prepare_dataset.sh $data_dir $size"
done

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT

echo "2. preprocess output $prepared/preprocessed"
in_workspace yambda-data verify "$prepared/preprocessed" --format json >"$reports/preprocess.json" ||
  fail "preprocess output $prepared/preprocessed (see the error above)"
echo "  ok: parts agree with split_meta.json"

echo "3. sample store $prepared/store (sha256 of every array)"
in_workspace yambda-data verify "$prepared/store" --preprocessed "$prepared/preprocessed" \
  --raw "$data_dir" --format json >"$reports/store.json" ||
  fail "sample store $prepared/store (see the error above)"
echo "  ok: every array matches manifest.json; built from these inputs"

steps=(python "$MLPERF_DIR/data_steps.py")
observed=("$data_dir" "$size" "$reports/preprocess.json" "$reports/store.json")
if ((record)); then
  echo "4. recording the expected values"
  in_workspace "${steps[@]}" record "$expected" "${observed[@]}"
else
  echo "4. expected values $expected"
  in_workspace "${steps[@]}" check "$expected" "${observed[@]}" ||
    fail "the data differs from the expected values in $expected"
fi
echo "OK: Yambda $size in $data_dir and its processed outputs in $prepared"
