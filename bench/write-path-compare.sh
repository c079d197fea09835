#!/usr/bin/env bash
# Buffered writes through the FUSE mount with two nacre binaries (e.g. before and after a
# change), alternating, medians: dd of COUNT blocks of BS to a new file (conv=fsync), and the
# MDS getxattr requests that cost (the kernel's security.capability check before each write).
#   bench/write-path-compare.sh BASE_NACRE NEW_NACRE [WORK_DIR]
set -euo pipefail
BASE="$1"; NEW="$2"
WORK="${3:-/var/tmp/nacre-writepath}"
BS="${BS:-64k}"; COUNT="${COUNT:-4000}"; ROUNDS="${ROUNDS:-3}"
rm -rf "$WORK"; mkdir -p "$WORK"
run() { # name, binary
  local name=$1 bin=$2 d="$WORK/$1"
  mkdir -p "$d/mnt"
  "$bin" up "$d/data" --mount "$d/mnt" >/dev/null
  local out
  out=$(dd if=/dev/zero of="$d/mnt/f" bs="$BS" count="$COUNT" conv=fsync 2>&1 | tail -1)
  local bytes secs
  bytes=$(echo "$out" | awk '{print $1}'); secs=$(echo "$out" | awk '{print $(NF-3)}')
  local gx
  gx=$("$bin" ctl get_param -n 'mdt.*.md_stats' | awk '$1=="getxattr" {print $2}')
  echo "$name $(python3 -c "print(f'{$bytes/$secs/1048576:.1f}')") ${gx:-0}" >> "$WORK/w.txt"
  "$bin" down "$d/mnt"
  rm -rf "$d"
}
for _ in $(seq "$ROUNDS"); do run base "$BASE"; run new "$NEW"; done
median() { grep "^$1 " "$WORK/w.txt" | awk -v c="$2" '{print $c}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "runs (name MiB/s mds_getxattr):"; cat "$WORK/w.txt"
printf "%-6s %10s %14s\n" "binary" "MiB/s" "MDS getxattr"
for n in base new; do printf "%-6s %10s %14s\n" "$n" "$(median $n 2)" "$(median $n 3)"; done
