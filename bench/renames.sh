#!/usr/bin/env bash
# Renames through a FUSE mount of the networked form with two MDTs (not a test; it asserts
# nothing): MGS+MDT0 in one server process on 127.0.0.1, MDT1 and an OST in another on
# 127.0.0.2, a separate `nacre mount` process. Directory x lives on MDT0, y on MDT1. Rates
# of one process, per second, median of ROUNDS:
#   file x->y     FILES files renamed from x to y (a rename across MDTs)
#   file y->y     the same files renamed within y (their inodes stay on MDT0)
#   dir x<->y     a directory moved from x to y and back, DIRS times each way
#   file x->x     FILES files renamed within x (one MDT, the baseline)
# With them, the mount's `entry_waits_cut` (callbacks that waited 250 ms for this mount's
# own rename) and `entries_deferred` (llite.FS.lock_cache).
#   bench/renames.sh [WORK_DIR]     (FILES=500 DIRS=50 ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-renames}"
FILES="${FILES:-500}"
DIRS="${DIRS:-50}"
ROUNDS="${ROUNDS:-3}"
rm -rf "$WORK"; mkdir -p "$WORK/mnt"
pids=()
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$NACRE" umount "$WORK/mnt" || "$NACRE" umount -f "$WORK/mnt"; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
MGS="127.0.0.1:$(free_port 127.0.0.1)"
"$NACRE" mkfs --mgs --fsname ren "$WORK/mgs" >/dev/null
for i in 0 1; do
  "$NACRE" mkfs --mdt --index $i --fsname ren --mgsnode "$MGS@tcp" "$WORK/mdt$i" >/dev/null
done
"$NACRE" mkfs --ost --index 0 --fsname ren --mgsnode "$MGS@tcp" "$WORK/ost0" >/dev/null
"$NACRE" server --listen "$MGS" --target "$WORK/mgs" --target "$WORK/mdt0" \
  > "$WORK/s0.log" 2>&1 &
pids+=($!); wait_serving "$WORK/s0.log"
"$NACRE" server --listen "127.0.0.2:$(free_port 127.0.0.2)" --target "$WORK/mdt1" \
  --target "$WORK/ost0" > "$WORK/s1.log" 2>&1 &
pids+=($!); wait_serving "$WORK/s1.log"
"$NACRE" mount "$MGS@tcp:/ren" "$WORK/mnt" >/dev/null
M="$WORK/mnt"

round() { # -> "x->y y->y dir x->x" renames per second
  rm -rf "$M/x" "$M/y"
  mkdir "$M/x"; "$NACRE" mkdir -i 1 "$M/y"; mkdir "$M/x/d"
  python3 - "$M" "$FILES" "$DIRS" <<'EOF'
import os, sys, time
m, files, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(files):
    os.close(os.open(f"{m}/x/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
def rate(pairs):
    t = time.perf_counter()
    for a, b in pairs:
        os.rename(a, b)
    return len(pairs) / (time.perf_counter() - t)
out = [rate([(f"{m}/x/f{i}", f"{m}/y/f{i}") for i in range(files)]),
       rate([(f"{m}/y/f{i}", f"{m}/y/g{i}") for i in range(files)]),
       rate([p for _ in range(dirs) for p in ((f"{m}/x/d", f"{m}/y/d"), (f"{m}/y/d", f"{m}/x/d"))])]
for i in range(files):
    os.close(os.open(f"{m}/x/h{i}", os.O_CREAT | os.O_WRONLY, 0o644))
out.append(rate([(f"{m}/x/h{i}", f"{m}/x/k{i}") for i in range(files)]))
print(" ".join(str(round(r)) for r in out))
EOF
}
out=$(for _ in $(seq "$ROUNDS"); do round; done)
col() { awk -v c="$1" '{print $c}' <<<"$out" | median; }
stat() { "$NACRE" ctl get_param -n llite.ren.lock_cache | awk -v k="$1" '$1 == k {print $2}'; }
echo "ROUNDS=$ROUNDS FILES=$FILES DIRS=$DIRS (medians, renames per second)"
echo
echo "| rename | per second |"
echo "|---|---:|"
echo "| file, x (MDT0) -> y (MDT1) | $(col 1) |"
echo "| file of MDT0 within y (MDT1) | $(col 2) |"
echo "| directory, x <-> y | $(col 3) |"
echo "| file within x (one MDT) | $(col 4) |"
echo
echo "mount: entry_waits_cut $(stat entry_waits_cut), entries_deferred $(stat entries_deferred)"
