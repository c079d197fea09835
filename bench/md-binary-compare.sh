#!/usr/bin/env bash
# Metadata rates of two nacre binaries (e.g. before and after a change), alternating, medians:
# create/stat/unlink of FILES files from 2 processes through a `nacre up` mount.
#   bench/md-binary-compare.sh BASE_NACRE NEW_NACRE [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="$1"; NEW="$2"
WORK="${3:-/var/tmp/nacre-mdcompare}"
FILES="${FILES:-10000}"
ROUNDS="${ROUNDS:-3}"
rm -rf "$WORK"; mkdir -p "$WORK"
# A failed run must not leave a file system mounted and its server running.
cleanup() {
  for m in "$WORK"/*/mnt; do
    mountpoint -q "$m" && { "$NEW" down "$m" || fusermount3 -uz "$m"; }
  done
  return 0
}
trap cleanup EXIT
run() { # name, binary
  local name=$1 bin=$2
  mkdir -p "$WORK/$name/mnt"
  "$bin" up "$WORK/$name/data" --mount "$WORK/$name/mnt" --osts 4 >/dev/null
  mkdir -p "$WORK/$name/mnt/md"
  python3 bench/mdops.py "$WORK/$name/mnt/md" "$FILES" 2 | sed "s/^/$name /" >> "$WORK/md.txt"
  "$bin" down "$WORK/$name/mnt"
  rm -rf "$WORK/$name"
}
for _ in $(seq "$ROUNDS"); do run base "$BASE"; run new "$NEW"; done
median() { grep "^$1 $2 " "$WORK/md.txt" | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-8s %12s %12s %8s\n" "phase" "base ops/s" "new ops/s" "new/base"
for p in create stat unlink; do
  b=$(median base $p); n=$(median new $p)
  printf "%-8s %12s %12s %8s\n" "$p" "$b" "$n" "$(python3 -c "print(f'{$n/$b:.2f}')")"
done
