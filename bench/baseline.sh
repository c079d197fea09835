#!/usr/bin/env bash
# Nacre against the local disk it runs on, in one run:
#   fio sequential write and read (1 MiB blocks, 2 jobs, direct=1), and
#   create/stat/unlink of 10,000 files from 2 processes in their own directories.
# Prints each figure and the Nacre/local ratio. Not a test: it asserts nothing.
#   bench/baseline.sh [WORK_DIR] [SIZE_PER_JOB]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${1:-/var/tmp/nacre-bench}"
SIZE="${2:-2g}"
FILES="${FILES:-10000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
./scripts/install-deps.sh >/dev/null
command -v python3 >/dev/null || { apt-get install -y -qq python3 >/dev/null; }
cargo build --release -p nacre-cli -q
NACRE="$CARGO_TARGET_DIR/release/nacre"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/mnt"
"$NACRE" up "$WORK/data" --mount "$WORK/mnt" --osts "${OSTS:-4}" >/dev/null
trap '"$NACRE" down "$WORK/mnt" >/dev/null 2>&1 || true' EXIT
mkdir -p "$WORK/mnt/fio"

fio_bw() { # dir rw -> MiB/s
  fio --name=seq --directory="$1" --rw="$2" --bs=1m --size="$SIZE" --numjobs=2 --direct=1 \
      --ioengine=psync --group_reporting --output-format=json 2>/dev/null \
    | python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(round(j['$2' if '$2'=='read' else 'write']['bw']/1024))"
}
ratio() { python3 -c "print(f'{$1/$2*100:.0f}%')"; }

echo "# Nacre vs local disk ($(date -u +%F), $(nproc) cores, fio $SIZE per job x 2 jobs, $FILES files)"
lw=$(fio_bw "$WORK/local" write); nw=$(fio_bw "$WORK/mnt/fio" write)
lr=$(fio_bw "$WORK/local" read);  nr=$(fio_bw "$WORK/mnt/fio" read)
printf "%-26s %12s %12s %8s\n" "measure" "local" "nacre" "ratio"
printf "%-26s %12s %12s %8s\n" "seq write MiB/s" "$lw" "$nw" "$(ratio $nw $lw)"
printf "%-26s %12s %12s %8s\n" "seq read MiB/s" "$lr" "$nr" "$(ratio $nr $lr)"
rm -rf "$WORK/local"/* "$WORK/mnt/fio"
mkdir -p "$WORK/local/md" "$WORK/mnt/md"
# Metadata phases are noisy on a shared VM: alternate local and Nacre runs, report medians.
ROUNDS="${ROUNDS:-3}"
for r in $(seq "$ROUNDS"); do
  python3 bench/mdops.py "$WORK/local/md" "$FILES" 2 | sed 's/^/local /' >> "$WORK/md.txt"
  python3 bench/mdops.py "$WORK/mnt/md" "$FILES" 2 | sed 's/^/nacre /' >> "$WORK/md.txt"
done
median() { grep "^$1 $2 " "$WORK/md.txt" | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for p in create stat unlink; do
  l=$(median local $p); n=$(median nacre $p)
  printf "%-26s %12s %12s %8s\n" "$p ops/s (2 procs)" "$l" "$n" "$(ratio $n $l)"
done
echo "(metadata: median of $ROUNDS alternating rounds; all runs: $WORK/md.txt)"
