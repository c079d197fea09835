#!/usr/bin/env bash
# What shared-key security costs (issue 21): the networked form (MGS+MDT0 process, two OSS
# processes with one OST each, one `nacre mount` process, TCP) without a key, then with a
# key at each level (none: the handshake only; integrity: a MAC on every message; bulk: on
# bulk data too; privacy: AES-256-GCM on body and bulk). Per level, the median of ROUNDS
# runs of
#   mdtest easy: 2 tasks, -n FILES/2 each, a directory per task: creates, removes /s
#   IOR easy:    2 tasks, file per process, 1 MiB transfers, O_DIRECT, SIZE each: MiB/s
#   selftest:    the network layer alone against the MGS+MDT0 process (`nacre selftest`,
#                8 RPCs in flight, 5 s): empty RPCs/s, 1 MiB bulk writes and reads MiB/s
# with each figure's ratio to no key. Not a test: it asserts nothing.
#   bench/security.sh [WORK_DIR]     (ROUNDS=3 FILES=4000 SIZE=256m LEVELS="off none ...")
set -euo pipefail
WORK="${1:-/var/tmp/nacre-security}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-4000}"
SIZE="${SIZE:-256m}"
LEVELS="${LEVELS:-off none integrity bulk privacy}"
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

# Every level's file system is up at once and the rounds go level after level, so a drift
# of the machine (other load, the host's caches) falls on all of them alike.
declare -A R MNT MGSOF KEYOF
i=0
for level in $LEVELS; do
  d="$WORK/$level"; mkdir -p "$d/mnt"
  unset NACRE_KEY
  if [ "$level" != off ]; then
    "$NACRE" keygen "secb$i" -o "$d/key" --level "$level" >/dev/null
    export NACRE_KEY="$d/key"
  fi
  net_up "$d/fs" "secb$i"
  "$NACRE" mount "$MGS@tcp:/secb$i" "$d/mnt" >/dev/null
  MNT[$level]="$d/mnt"
  MGSOF[$level]="$MGS"
  KEYOF[$level]="${NACRE_KEY:-}"
  i=$((i + 1))
done
unset NACRE_KEY
for _ in $(seq "$ROUNDS"); do
  for level in $LEVELS; do
    m="${MNT[$level]}"
    rm -rf "$m"/*
    R[$level,md]+="$("$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -q --json -d "$m/md" \
      | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File removal'))")"$'\n'
    rm -rf "$m"/*
    st() { # test field -> figure, with this level's key
      local key=()
      [ -z "${KEYOF[$level]}" ] || key=(--key "${KEYOF[$level]}")
      "$NACRE" selftest "${key[@]}" --to "${MGSOF[$level]}@tcp" --test "$1" --size 1M \
        --concurrency 8 --duration 5 --json | json "round(d[0]['$2'])"
    }
    R[$level,st]+="$(st ping rpc_per_s) $(st brw_write mib_per_s) $(st brw_read mib_per_s)"$'\n'
    R[$level,ior]+="$("$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N 2 -F -e --direct -q --json -o "$m/ior" \
      | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))")"$'\n'
  done
done
med() { printf '%s' "${R[$1,$2]}" | awk -v f="$3" 'NF {print $f}' | median; }
echo "| level | creates/s | removes/s | IOR write MiB/s | IOR read MiB/s | RPCs/s | bulk write MiB/s | bulk read MiB/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for level in $LEVELS; do
  row="| $level"
  for k in "md 1" "md 2" "ior 1" "ior 2" "st 1" "st 2" "st 3"; do
    set -- $k
    v=$(med "$level" "$1" "$2"); b=$(med off "$1" "$2")
    if [ "$level" = off ]; then row+=" | $v"; else row+=" | $v ($(pct "$v" "$b"))"; fi
  done
  echo "$row |"
done
