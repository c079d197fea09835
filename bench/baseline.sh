#!/usr/bin/env bash
# Nacre against the local disk it runs on, in one run:
#   fio sequential write and read (1 MiB blocks, 2 jobs, direct=1), and
#   create/stat/unlink of 10,000 files from 2 processes in their own directories.
# Prints each figure and the Nacre/local ratio. Not a test: it asserts nothing.
#   bench/baseline.sh [WORK_DIR] [SIZE_PER_JOB]
set -euo pipefail
WORK="${1:-/var/tmp/nacre-bench}"
SIZE="${2:-2g}"
FILES="${FILES:-10000}"
source "$(dirname "$0")/common.sh"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/mnt"
"$NACRE" up "$WORK/data" --mount "$WORK/mnt" --osts "${OSTS:-4}" >/dev/null
trap '"$NACRE" down "$WORK/mnt" >/dev/null 2>&1 || true' EXIT
mkdir -p "$WORK/mnt/fio"


echo "# Nacre vs local disk ($(date -u +%F), $(nproc) cores, fio $SIZE per job x 2 jobs, $FILES files)"
lw=$(fio_bw "$WORK/local" write "$SIZE" 2); nw=$(fio_bw "$WORK/mnt/fio" write "$SIZE" 2)
lr=$(fio_bw "$WORK/local" read "$SIZE" 2);  nr=$(fio_bw "$WORK/mnt/fio" read "$SIZE" 2)
printf "%-26s %12s %12s %8s\n" "measure" "local" "nacre" "ratio"
printf "%-26s %12s %12s %8s\n" "seq write MiB/s" "$lw" "$nw" "$(pct $nw $lw)"
printf "%-26s %12s %12s %8s\n" "seq read MiB/s" "$lr" "$nr" "$(pct $nr $lr)"
rm -rf "$WORK/local"/* "$WORK/mnt/fio"
mkdir -p "$WORK/local/md" "$WORK/mnt/md"
# Metadata phases are noisy on a shared VM: alternate local and Nacre runs, report medians.
ROUNDS="${ROUNDS:-3}"
for r in $(seq "$ROUNDS"); do
  python3 bench/mdops.py "$WORK/local/md" "$FILES" 2 | sed 's/^/local /' >> "$WORK/md.txt"
  python3 bench/mdops.py "$WORK/mnt/md" "$FILES" 2 | sed 's/^/nacre /' >> "$WORK/md.txt"
done
phase_median() { grep "^$1 $2 " "$WORK/md.txt" | awk '{print $5}' | median; }
for p in create stat unlink; do
  l=$(phase_median local $p); n=$(phase_median nacre $p)
  printf "%-26s %12s %12s %8s\n" "$p ops/s (2 procs)" "$l" "$n" "$(pct $n $l)"
done
echo "(metadata: median of $ROUNDS alternating rounds; all runs: $WORK/md.txt)"
