#!/usr/bin/env bash
# Download the Yambda files the DLRMv4 reference reads, at the dataset revision it pins.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--source DIR] [--revision SHA] [--force] [DATA_DIR] [SIZE]

Fetches flat/SIZE/multi_event.parquet and the artist and album item mappings of the Yambda
dataset (yandex/yambda on the Hugging Face Hub) into DATA_DIR with the repository's paths, at
the revision the MLPerf reference pins, through 'yambda-data download'. Files already in
place are kept, so running it again does nothing.

  DATA_DIR        dataset root to fill (default: $DEFAULT_DATA_DIR)
  SIZE            one of: $YAMBDA_SIZES (default: $DEFAULT_SIZE)
  --source DIR    copy from a local mirror in the same layout instead of the Hub
  --revision SHA  another dataset revision (default: the reference's)
  --force         fetch even when the files are in place (the Hub client skips unchanged files)
  -h, --help      this message

Exit status: 0 the files are in place, 2 a usage or input error (a bad argument, a --source
that is not a directory, a DATA_DIR in the way) or a failed download (one line on stderr).
USAGE
}

source_dir="" revision="" force=0 revision_given=0
positional=()
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --source | --revision)
      (($# >= 2)) || usage_error "$1 needs a value"
      if [[ $1 == --source ]]; then
        [[ -n $2 ]] || usage_error "--source must not be empty"
        source_dir=$2
      else
        revision=$2 revision_given=1
      fi
      shift 2 ;;
    --force) force=1; shift ;;
    -*) usage_error "unknown option $1" ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} <= 2)) || usage_error "too many arguments: ${positional[*]}"
data_dir=${positional[0]-$DEFAULT_DATA_DIR}
size=${positional[1]-$DEFAULT_SIZE}
check_size "$size"
check_creatable DATA_DIR "$data_dir"
[[ -z $source_dir ]] || check_dir --source "$source_dir"
if ((revision_given)) && [[ -z $revision ]]; then
  usage_error "--revision must not be empty"
fi

missing=0
while IFS= read -r file; do
  [[ -s $file ]] || missing=1
done < <(raw_files "$data_dir" "$size")
if ((missing == 0 && force == 0)); then
  echo "Yambda $size is already in $data_dir (--force fetches it again):"
  raw_files "$data_dir" "$size" | sed 's/^/  /'
  exit 0
fi

args=(download --size "$size" --dest "$data_dir")
[[ -n $revision ]] && args+=(--revision "$revision")
[[ -n $source_dir ]] && args+=(--source "$source_dir")
echo "downloading Yambda $size into $data_dir"
in_workspace yambda-data "${args[@]}"
echo "done: next, tools/mlperf/prepare_dataset.sh $data_dir $size"
