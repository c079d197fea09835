#!/usr/bin/env bash
# What quota enforcement costs (issue 21, step 2; docs/quota.md): two networked file systems
# up at once (MGS+MDT0 process, two OSS processes with one OST each, one `nacre mount`
# process, TCP), the benchmark's tree in project 7 on both — "off" with no limit, "on" with
# limits on project 7 (root's user and group are never limited: every create and every
# write is checked against the project's grants, far from its limits, as a project with
# quotas is most of the time) — and per
# file system the median of ROUNDS runs of
#   mdtest easy: 2 tasks, -n FILES/2 each, a directory per task: creates, removes /s
#   IOR easy:    2 tasks, file per process, 1 MiB transfers, O_DIRECT, SIZE each: MiB/s
# with "on"'s ratio to "off". Rounds alternate the two. Not a test: it asserts nothing.
#   bench/quota.sh [WORK_DIR]     (ROUNDS=3 FILES=4000 SIZE=256m)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-quota}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-4000}"
SIZE="${SIZE:-256m}"
source "$(dirname "$0")/common.sh"
rm -rf "$WORK"; mkdir -p "$WORK"
pids=()
down() {
  for m in "$WORK"/*/mnt; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap down EXIT
declare -A R MNT
for q in off on; do
  d="$WORK/$q"; mkdir -p "$d/mnt"
  net_up "$d/fs" "qb$q"
  "$NACRE" mount "$MGS@tcp:/qb$q" "$d/mnt" >/dev/null
  MNT[$q]="$d/mnt"
  "$NACRE" project -p 7 -s "$d/mnt"
  if [ "$q" = on ]; then
    "$NACRE" setquota -p 7 -b 900T -B 1000T -i 900000000 -I 1000000000 "$MGS@tcp:/qb$q"
  fi
done
for _ in $(seq "$ROUNDS"); do
  for q in off on; do
    m="${MNT[$q]}"
    rm -rf "$m"/*
    R[$q,md]+="$("$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -q --json -d "$m/md" \
      | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File removal'))")"$'\n'
    rm -rf "$m"/*
    R[$q,ior]+="$("$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N 2 -F -e --direct -q --json -o "$m/ior" \
      | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))")"$'\n'
  done
done
med() { printf '%s' "${R[$1,$2]}" | awk -v f="$3" 'NF {print $f}' | median; }
echo "| quotas | creates/s | removes/s | IOR write MiB/s | IOR read MiB/s |"
echo "|---|---:|---:|---:|---:|"
for q in off on; do
  row="| $q"
  for k in "md 1" "md 2" "ior 1" "ior 2"; do
    set -- $k
    v=$(med "$q" "$1" "$2"); b=$(med off "$1" "$2")
    if [ "$q" = off ]; then row+=" | $v"; else row+=" | $v ($(pct "$v" "$b"))"; fi
  done
  echo "$row |"
done
