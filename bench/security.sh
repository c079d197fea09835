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
#   IOR small:   the same with 64 KiB transfers (16 times the RPCs: what each request's
#                checks cost, capabilities on the OSTs included)
# with each figure's ratio to no key. With BEFORE=/path/to/an/older/nacre, one more file
# system runs that binary (servers, mount and tools) at level BEFORE_LEVEL (integrity), its
# row "before", and the same level's row of this binary is compared with it: the cost of
# what changed between them (e.g. capabilities on every OST request). Not a test: it
# asserts nothing.
#   bench/security.sh [WORK_DIR]     (ROUNDS=3 FILES=4000 SIZE=256m LEVELS="off none ...")
set -euo pipefail
WORK="${1:-/var/tmp/nacre-security}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-4000}"
SIZE="${SIZE:-256m}"
LEVELS="${LEVELS:-off none integrity bulk privacy}"
BEFORE_LEVEL="${BEFORE_LEVEL:-integrity}"
[ -z "${BEFORE:-}" ] || LEVELS="$LEVELS before"
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
declare -A R MNT MGSOF KEYOF BIN
THIS="$NACRE"
i=0
for level in $LEVELS; do
  d="$WORK/$level"; mkdir -p "$d/mnt"
  unset NACRE_KEY
  keylevel="$level"; BIN[$level]="$THIS"
  if [ "$level" = before ]; then keylevel="$BEFORE_LEVEL"; BIN[$level]="$BEFORE"; fi
  NACRE="${BIN[$level]}"
  if [ "$level" != off ]; then
    "$NACRE" keygen "secb$i" -o "$d/key" --level "$keylevel" >/dev/null
    export NACRE_KEY="$d/key"
  fi
  net_up "$d/fs" "secb$i"
  "$NACRE" mount "$MGS@tcp:/secb$i" "$d/mnt" >/dev/null
  MNT[$level]="$d/mnt"
  MGSOF[$level]="$MGS"
  KEYOF[$level]="${NACRE_KEY:-}"
  i=$((i + 1))
done
NACRE="$THIS"
unset NACRE_KEY
for _ in $(seq "$ROUNDS"); do
  for level in $LEVELS; do
    m="${MNT[$level]}"
    NACRE="${BIN[$level]}"
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
    ior() { # transfer -> "write read" MiB/s
      "$NACRE" bench ior -w -r -t "$1" -b "$SIZE" -N 2 -F -e --direct -q --json -o "$m/ior" \
        | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))"
      rm -rf "$m"/*
    }
    R[$level,ior]+="$(ior 1m) $(ior 64k)"$'\n'
  done
done
NACRE="$THIS"
med() { printf '%s' "${R[$1,$2]}" | awk -v f="$3" 'NF {print $f}' | median; }
echo "| level | creates/s | removes/s | IOR write MiB/s | IOR read MiB/s | IOR 64k write | IOR 64k read | RPCs/s | bulk write MiB/s | bulk read MiB/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for level in $LEVELS; do
  row="| $level"
  # Each row against no key; with BEFORE, the older binary's row against this one's
  # at the same level.
  base=off
  [ "$level" != before ] || base="$BEFORE_LEVEL"
  for k in "md 1" "md 2" "ior 1" "ior 2" "ior 3" "ior 4" "st 1" "st 2" "st 3"; do
    set -- $k
    v=$(med "$level" "$1" "$2"); b=$(med "$base" "$1" "$2")
    if [ "$level" = off ]; then row+=" | $v"; else row+=" | $v ($(pct "$v" "$b"))"; fi
  done
  echo "$row |"
done
