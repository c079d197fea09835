#!/usr/bin/env bash
# The MDT durability choice, measured: create/stat/unlink of FILES files from 2 processes with
# replies after the journal write (default) and with --mdt-sync-on-reply, alternating, medians.
#   bench/md-sync-compare.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${1:-/var/tmp/nacre-mdsync}"
FILES="${FILES:-10000}"
ROUNDS="${ROUNDS:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
cargo build --release -p nacre-cli -q
NACRE="$CARGO_TARGET_DIR/release/nacre"
rm -rf "$WORK"; mkdir -p "$WORK"
run() { # name, extra args...
  local name=$1; shift
  mkdir -p "$WORK/$name/mnt"
  "$NACRE" up "$WORK/$name/data" --mount "$WORK/$name/mnt" --osts 4 "$@" >/dev/null
  mkdir -p "$WORK/$name/mnt/md"
  python3 bench/mdops.py "$WORK/$name/mnt/md" "$FILES" 2 | sed "s/^/$name /" >> "$WORK/md.txt"
  "$NACRE" down "$WORK/$name/mnt"
  rm -rf "$WORK/$name"
}
for r in $(seq "$ROUNDS"); do
  run journal
  run sync --mdt-sync-on-reply
done
median() { grep "^$1 $2 " "$WORK/md.txt" | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-12s %16s %16s %8s\n" "phase" "sync-on-reply" "journal+fsync" "ratio"
for p in create stat unlink; do
  s=$(median sync $p); j=$(median journal $p)
  printf "%-12s %16s %16s %8s\n" "$p ops/s" "$s" "$j" "$(python3 -c "print(f'{$j/$s:.2f}x')")"
done
