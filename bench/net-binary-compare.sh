#!/usr/bin/env bash
# The networked form with two nacre binaries (e.g. before and after a change), alternating,
# medians: an MGS+MDT server process on 127.0.0.1, an OSS process with two OSTs on
# 127.0.0.2, a separate `nacre mount` process, all over TCP. Per round: metadata
# create/stat/unlink of FILES files from 2 processes (bench/mdops.py), then fio with JOBS
# writers and readers, O_DIRECT, 1 MiB blocks, file per process.
#   bench/net-binary-compare.sh BASE_NACRE NEW_NACRE [WORK_DIR]     (ROUNDS=3 FILES=4000 JOBS=4)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="$1"; NEW="$2"
WORK="${3:-/var/tmp/nacre-netcompare}"
FILES="${FILES:-4000}"; ROUNDS="${ROUNDS:-3}"; JOBS="${JOBS:-4}"
rm -rf "$WORK"; mkdir -p "$WORK"
# Keyless file systems (`mkfs --no-key`, servers `--insecure`), as older binaries ran them.
export NACRE_INSECURE="${NACRE_INSECURE-1}"
pids=()
# A failed run must not leave a file system mounted or a server running.
cleanup() {
  for m in "$WORK"/*/mnt; do
    mountpoint -q "$m" && { "$NEW" umount -f "$m" || fusermount3 -uz "$m"; }
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('$1', 0)); print(s.getsockname()[1])"; }
wait_serving() { # log file
  for _ in $(seq 200); do grep -q serving "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "server did not start: $(cat "$1")" >&2; return 1
}
run() { # name, binary
  local name=$1 bin=$2 d="$WORK/$1"
  mkdir -p "$d/mnt"
  local mgs="127.0.0.1:$(free_port 127.0.0.1)" oss="127.0.0.2:$(free_port 127.0.0.2)"
  "$bin" mkfs --mgs --fsname cmp "$d/mgs" >/dev/null
  "$bin" mkfs --mdt --index 0 --fsname cmp --mgsnode "$mgs@tcp" "$d/mdt0" >/dev/null
  for i in 0 1; do "$bin" mkfs --ost --index $i --fsname cmp --mgsnode "$mgs@tcp" "$d/ost$i" >/dev/null; done
  "$bin" server --listen "$mgs" --target "$d/mgs" --target "$d/mdt0" > "$d/mds.log" 2>&1 &
  pids+=($!); wait_serving "$d/mds.log"
  "$bin" server --listen "$oss" --target "$d/ost0" --target "$d/ost1" > "$d/oss.log" 2>&1 &
  pids+=($!); wait_serving "$d/oss.log"
  "$bin" mount "$mgs@tcp:/cmp" "$d/mnt" >/dev/null
  mkdir -p "$d/mnt/md"
  python3 bench/mdops.py "$d/mnt/md" "$FILES" 2 | sed "s/^/$name /" >> "$WORK/results.txt"
  for rw in write read; do
    fio --name=io --directory="$d/mnt" --rw="$rw" --bs=1m --size=256m --numjobs="$JOBS" \
        --direct=1 --ioengine=psync --group_reporting --output-format=json > "$d/fio.json"
    python3 -c "import json,sys; j=json.load(open('$d/fio.json'))['jobs'][0]['$rw']; print('$name', '$rw', 0, 0, round(j['bw']/1024))" >> "$WORK/results.txt"
  done
  "$bin" umount "$d/mnt"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$d"
}
for _ in $(seq "$ROUNDS"); do run base "$BASE"; run new "$NEW"; done
median() { grep "^$1 $2 " "$WORK/results.txt" | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-8s %12s %12s %8s\n" "phase" "base" "new" "new/base"
for p in create stat unlink write read; do
  b=$(median base $p); n=$(median new $p)
  unit=$([ "$p" = write ] || [ "$p" = read ] && echo "MiB/s" || echo "ops/s")
  printf "%-8s %12s %12s %8s  %s\n" "$p" "$b" "$n" "$(python3 -c "print(f'{$n/$b:.2f}')")" "$unit"
done
