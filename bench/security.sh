#!/usr/bin/env bash
# What shared-key security costs (issue 21): the networked form (MGS+MDT0 process, two OSS
# processes with one OST each, one `nacre mount` process, TCP) without a key, then with a
# key at each level (none: the handshake only; integrity: a MAC on every message; bulk: on
# bulk data too; privacy: AES-256-GCM on body and bulk). Per level, the median of ROUNDS
# runs of
#   mdtest easy: 2 tasks, -n FILES/2 each, a directory per task: creates, stats, removes /s
#   IOR easy:    2 tasks, file per process, 1 MiB transfers, O_DIRECT, SIZE each: MiB/s
# with each figure's ratio to no key. Not a test: it asserts nothing.
#   bench/security.sh [WORK_DIR]     (ROUNDS=3 FILES=4000 SIZE=256m LEVELS="off none ...")
set -euo pipefail
WORK="${1:-/var/tmp/nacre-security}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-4000}"
SIZE="${SIZE:-256m}"
LEVELS="${LEVELS:-off none integrity bulk privacy}"
source "$(dirname "$0")/common.sh"
pids=()
down() {
  mountpoint -q "$WORK/mnt" 2>/dev/null && { "$NACRE" umount "$WORK/mnt" || "$NACRE" umount -f "$WORK/mnt"; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap down EXIT

declare -A R
for level in $LEVELS; do
  rm -rf "$WORK"; mkdir -p "$WORK/mnt"
  unset NACRE_KEY
  if [ "$level" != off ]; then
    "$NACRE" keygen secb -o "$WORK/key" --level "$level" >/dev/null
    export NACRE_KEY="$WORK/key"
  fi
  net_up "$WORK/fs" secb
  "$NACRE" mount "$MGS@tcp:/secb" "$WORK/mnt" >/dev/null
  md=(); ior=()
  for _ in $(seq "$ROUNDS"); do
    rm -rf "$WORK/mnt"/*
    md+=("$("$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -q --json -d "$WORK/mnt/md" \
      | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File stat','File removal'))")")
    rm -rf "$WORK/mnt"/*
    ior+=("$("$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N 2 -F -e --direct -q --json -o "$WORK/mnt/ior" \
      | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))")")
  done
  for i in 1 2 3; do
    R[$level,md$i]=$(printf '%s\n' "${md[@]}" | awk -v f=$i '{print $f}' | median)
  done
  for i in 1 2; do
    R[$level,ior$i]=$(printf '%s\n' "${ior[@]}" | awk -v f=$i '{print $f}' | median)
  done
  echo "$level: mdtest create/stat/remove ${md[*]} | ior write/read ${ior[*]}" >&2
  down
done
unset NACRE_KEY

echo "| level | creates/s | stats/s | removes/s | IOR write MiB/s | IOR read MiB/s |"
echo "|---|---:|---:|---:|---:|---:|"
for level in $LEVELS; do
  row="| $level"
  for k in md1 md2 md3 ior1 ior2; do
    v=${R[$level,$k]}; b=${R[off,$k]:-0}
    if [ "$level" = off ]; then row+=" | $v"; else row+=" | $v ($(pct "$v" "$b"))"; fi
  done
  echo "$row |"
done
