#!/usr/bin/env bash
# Parallel I/O through the FUSE mount with two nacre binaries (e.g. before and after a
# change), alternating, medians: fio with JOBS writers then JOBS readers, O_DIRECT, BS
# blocks, file per process, on a `nacre up` file system with 4 OSTs. JOBS above the
# client's FUSE threads (4) exercises requests handed to helper threads.
#   bench/io-binary-compare.sh BASE_NACRE NEW_NACRE [WORK_DIR]
set -euo pipefail
BASE="$1"; NEW="$2"
WORK="${3:-/var/tmp/nacre-iocompare}"
BS="${BS:-1m}"; SIZE="${SIZE:-256m}"; JOBS="${JOBS:-8}"; ROUNDS="${ROUNDS:-3}"
rm -rf "$WORK"; mkdir -p "$WORK"
# A failed fio must not leave a file system mounted and its server running.
cleanup() {
  for m in "$WORK"/*/mnt; do
    mountpoint -q "$m" && { "$NEW" down "$m" || fusermount3 -uz "$m"; }
  done
  return 0
}
trap cleanup EXIT
run() { # name, binary
  local name=$1 bin=$2 d="$WORK/$1"
  mkdir -p "$d/mnt"
  "$bin" up "$d/data" --mount "$d/mnt" --osts 4 >/dev/null
  for rw in write read; do
    local bw
    bw=$(fio --name=io --directory="$d/mnt" --rw="$rw" --bs="$BS" --size="$SIZE" \
      --numjobs="$JOBS" --direct=1 --ioengine=psync --group_reporting \
      --output-format=json | python3 -c \
      "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(f\"{j['$rw']['bw_bytes']/1048576:.1f}\")")
    echo "$name $rw $bw" >> "$WORK/io.txt"
  done
  "$bin" down "$d/mnt"
  rm -rf "$d"
}
for _ in $(seq "$ROUNDS"); do run base "$BASE"; run new "$NEW"; done
median() { grep "^$1 $2 " "$WORK/io.txt" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "runs (name rw MiB/s):"; cat "$WORK/io.txt"
printf "%-6s %12s %12s %8s\n" "rw" "base MiB/s" "new MiB/s" "new/base"
for rw in write read; do
  b=$(median base $rw); n=$(median new $rw)
  printf "%-6s %12s %12s %8s\n" "$rw" "$b" "$n" "$(python3 -c "print(f'{$n/$b:.2f}')")"
done
