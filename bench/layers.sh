#!/usr/bin/env bash
# The layer-by-layer study on one machine, as the seed sites found bottlenecks:
#   data:     raw disk (fio) -> OSTs alone (nacre bench survey) -> network alone (nacre selftest)
#             -> end to end through the native library (ior -a NACRE) and through a FUSE mount
#                in its own client process (ior), both over TCP loopback; and through the
#                embedded mount of `nacre up` (client in the server process, no TCP)
#   metadata: local file system (mdtest) -> MDT alone (nacre bench mds-survey)
#             -> native library (mdtest -a NACRE) -> FUSE client process -> embedded FUSE
# Every figure is measured in this run; ratios are against the layer below and the raw disk.
# Not a test: it asserts nothing.
#   bench/layers.sh [WORK_DIR] [SIZE_PER_TASK]      (TASKS=2 FILES=5000 ROUNDS=3 OSTS=2)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-layers}"
SIZE="${2:-1g}"
TASKS="${TASKS:-2}"
FILES="${FILES:-5000}"
ROUNDS="${ROUNDS:-3}"
OSTS="${OSTS:-2}"
source "$(dirname "$0")/common.sh"
PORT="${PORT:-19988}"
NID="127.0.0.1:$PORT@tcp"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/mnt" "$WORK/tcp"
"$NACRE" up "$WORK/data" --mount "$WORK/mnt" --osts "$OSTS" --fsname layers \
  --listen "127.0.0.1:$PORT" >/dev/null
trap '"$NACRE" umount "$WORK/tcp" >/dev/null 2>&1 || true; "$NACRE" down "$WORK/mnt" >/dev/null 2>&1 || true' EXIT
"$NACRE" mount "$NID:/layers" "$WORK/tcp" >/dev/null
SIZE_BYTES=$(python3 -c "import sys; s='$SIZE'.lower(); m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
SIZE_MB=$((SIZE_BYTES >> 20))
# Runs "$@" ROUNDS times (each prints one number) and prints the median.
med() { for _ in $(seq "$ROUNDS"); do "$@"; done | median; }
# Runs "$@" ROUNDS times (each prints a line of numbers) and prints each column's median.
medcols() {
  local out; out=$(for _ in $(seq "$ROUNDS"); do "$@"; done)
  local n; n=$(head -1 <<<"$out" | wc -w)
  for c in $(seq "$n"); do awk -v c="$c" '{print $c}' <<<"$out" | median; done | xargs
}

survey() { # op -> MiB/s over all OSTs
  local args=()
  for i in $(seq 0 $((OSTS - 1))); do args+=(--ost "$WORK/data/ost$i"); done
  "$NACRE" bench survey "${args[@]}" -o "$TASKS" -t "$TASKS" -r 1M -s "$SIZE" --json \
    | json "round([p for p in d if p['op']=='$1'][0]['total_mib'])"
}
selftest() { # test field concurrency -> MiB/s or RPC/s
  "$NACRE" selftest --to "$NID" --test "$1" --size 1M --concurrency "$3" --duration 5 --json \
    | json "round(d[0]['$2'])"
}
ior() { # extra... -> "write read" MiB/s
  "$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N "$TASKS" -F -e -q --json "$@" \
    | json "' '.join(str(round([p for p in d['phases'] if p['op']==o][0]['bw_mib'])) for o in ('write','read'))"
}
mdtest() { # dir extra... -> "create stat remove" ops/s
  local dir=$1; shift
  "$NACRE" bench mdtest -n "$((FILES / TASKS))" -N "$TASKS" -u -F -q --json -d "$dir" "$@" \
    | json "' '.join(str(round(dict(d['summary'])[p]['mean'])) for p in ('File creation','File stat','File removal'))"
}
mds_survey() { # -> "create getattr destroy" ops/s
  rm -rf "$WORK/local/mds"
  "$NACRE" bench mds-survey "$WORK/local/mds" --files "$FILES" --threads "$TASKS" --dirs "$TASKS" --json \
    | json "' '.join(str(round([t for t in d if t['test']==n][0]['rate'])) for n in ('create','md_getattr','destroy'))"
}
row() { printf "| %-44s | %10s | %8s | %8s |\n" "$1" "$2" "$3" "$4"; }

echo "# Layer by layer ($(date -u +%F), $(nproc) cores, $TASKS tasks, ${SIZE} per task, 1 MiB I/O, $FILES files, medians of $ROUNDS)"
echo
echo "## Data"
row "layer" "MiB/s" "vs below" "vs disk"; row "---" "---:" "---:" "---:"
dw=$(med fio_bw "$WORK/local" write "$SIZE" "$TASKS"); dr=$(med fio_bw "$WORK/local" read "$SIZE" "$TASKS")
rm -rf "$WORK/local"/*
sw=$(med survey write); sr=$(med survey read)
nw=$(med selftest brw_write mib_per_s 8); nr=$(med selftest brw_read mib_per_s 8)
nw1=$(med selftest brw_write mib_per_s "$TASKS"); nr1=$(med selftest brw_read mib_per_s "$TASKS")
np=$(med selftest ping rpc_per_s 8); np1=$(med selftest ping rpc_per_s 1)
read -r aw ar <<<"$(medcols ior -a NACRE --mgs "$NID" --fsname layers -o /ior-native)"
read -r tw tr <<<"$(medcols ior --direct -o "$WORK/tcp/ior")"
read -r fw fr <<<"$(medcols ior --direct -o "$WORK/mnt/ior")"
for op in write read; do
  if [ $op = write ]; then d=$dw s=$sw n=$nw n1=$nw1 a=$aw t=$tw f=$fw; else d=$dr s=$sr n=$nr n1=$nr1 a=$ar t=$tr f=$fr; fi
  row "$op: raw disk (fio, direct)" "$d" "" "100%"
  row "$op: OSTs alone (survey)" "$s" "$(pct "$s" "$d")" "$(pct "$s" "$d")"
  row "$op: network alone (selftest, 8 in flight)" "$n" "" ""
  row "$op: network alone (selftest, $TASKS in flight)" "$n1" "" ""
  row "$op: native library over TCP (ior)" "$a" "$(pct "$a" "$n1")" "$(pct "$a" "$d")"
  row "$op: FUSE client process over TCP (ior)" "$t" "$(pct "$t" "$a")" "$(pct "$t" "$d")"
  row "$op: embedded FUSE, in-process (ior)" "$f" "$(pct "$f" "$t")" "$(pct "$f" "$d")"
done
echo
echo "Network alone, small RPCs: $np pings/s with 8 in flight, $np1 with 1 (one connection)."
echo
echo "## Metadata (files, ${TASKS} tasks in unique directories)"
printf "| %-44s | %10s | %10s | %10s |\n" "layer" "create/s" "stat/s" "remove/s"
printf "| %-44s | %10s | %10s | %10s |\n" "---" "---:" "---:" "---:"
mkdir -p "$WORK/local/md"
read -r lc ls_ lu <<<"$(medcols mdtest "$WORK/local/md")"
read -r mc ms mu <<<"$(medcols mds_survey)"
read -r ac as au <<<"$(medcols mdtest /md-native -a NACRE --mgs "$NID" --fsname layers)"
mkdir -p "$WORK/tcp/md" "$WORK/mnt/md"
read -r tc ts tu <<<"$(medcols mdtest "$WORK/tcp/md")"
read -r fc fs fu <<<"$(medcols mdtest "$WORK/mnt/md")"
mrow() { printf "| %-44s | %10s | %10s | %10s |\n" "$@"; }
mrow "local file system (mdtest)" "$lc" "$ls_" "$lu"
mrow "MDT alone (mds-survey create/getattr/destroy)" "$mc" "$ms" "$mu"
mrow "native library over TCP (mdtest -a NACRE)" "$ac" "$as" "$au"
mrow "FUSE client process over TCP (mdtest)" "$tc" "$ts" "$tu"
mrow "embedded FUSE, in-process (mdtest)" "$fc" "$fs" "$fu"
mrow "native / MDT alone" "$(pct "$ac" "$mc")" "$(pct "$as" "$ms")" "$(pct "$au" "$mu")"
mrow "FUSE process / native" "$(pct "$tc" "$ac")" "$(pct "$ts" "$as")" "$(pct "$tu" "$au")"
mrow "FUSE process / local" "$(pct "$tc" "$lc")" "$(pct "$ts" "$ls_")" "$(pct "$tu" "$lu")"
