#!/usr/bin/env bash
# What data on the MDT does to small files (issue 44, step S3): the real mdtest (github
# hpc/ior, built outside this repository) in its "hard" shape — files of 3,901 bytes
# written at create and read back, one shared directory — 2 ranks on one networked mount
# (an MGS+MDT0 process, two OSS processes with two OSTs each), in a directory with a plain
# default and in one with `-E 64K -L mdt -E -1 -c 1`, and in such a directory through a
# second mount with `--async-dirops true` (`dom-async`: each small file's bytes go with its
# create, many per request), alternating ROUNDS times; each phase its own run with -Y (a
# sync inside its timing). Medians, and the OST objects per file in each. Not a test: it
# asserts nothing.
#   MDTEST=/path/mdtest bench/dom.sh [WORK]     (MPIRUN=mpirun FILES=2500 ROUNDS=3)
set -euo pipefail
: "${MDTEST:?set MDTEST to the path of an mdtest binary (github hpc/ior)}"
WORK="${1:-/var/tmp/nacre-dom}"
MPIRUN="${MPIRUN:-mpirun}"
FILES="${FILES:-2500}"
ROUNDS="${ROUNDS:-3}"
source "$(dirname "$0")/common.sh"
WORK="$(realpath -m "$WORK")"
rm -rf "$WORK"; mkdir -p "$WORK/net/mnt" "$WORK/net/amnt"
pids=()
cleanup() {
  local m
  for m in "$WORK/net/mnt" "$WORK/net/amnt"; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
OSTS_PER_OSS=2 net_up "$WORK/net" dom
M="$WORK/net/mnt"
"$NACRE" mount "$MGS@tcp:/dom" "$M" >/dev/null
A="$WORK/net/amnt"
"$NACRE" mount "$MGS@tcp:/dom" "$A" --async-dirops true >/dev/null
mkdir "$M/plain" "$M/dom" "$A/dom-async"
"$NACRE" setstripe -E 64K -L mdt -E -1 -c 1 "$M/dom"
"$NACRE" setstripe -E 64K -L mdt -E -1 -c 1 "$A/dom-async"
# objects DIR: OST objects of the first file mdtest made in DIR.
objects() {
  local f
  f=$(find "$1" -type f -print -quit)
  "$NACRE" getstripe --json "$f" | json "len(d['objects'])"
}
# phase DIR FLAG LABEL: one mdtest phase's rate.
phase() {
  "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MDTEST" -F -n "$FILES" -w 3901 \
    -e 3901 -d "$1" -Y "$2" | awk -v l="$3" '$1 " " $2 == l {print $(NF-1)}'
}
declare -A rates
for round in $(seq "$ROUNDS"); do
  for kind in plain dom dom-async; do
    d="$M/$kind/r$round"
    [ "$kind" = dom-async ] && d="$A/$kind/r$round"
    rates[$kind-create]+="$(phase "$d" -C "File creation") "
    [ "$round" = 1 ] && echo "$kind: $(objects "$d") OST objects per file" >&2
    rates[$kind-read]+="$(phase "$d" -E "File read") "
    rates[$kind-remove]+="$(phase "$d" -r "File removal") "
  done
done
for p in create read remove; do
  for kind in plain dom dom-async; do
    echo "$kind $p/s: $(tr ' ' '\n' <<<"${rates[$kind-$p]}" | grep . | median) (median of $ROUNDS: ${rates[$kind-$p]})"
  done
done
