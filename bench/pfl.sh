#!/usr/bin/env bash
# What a progressive (composite) default layout costs creates (issue 44, step S2): the real
# mdtest (github hpc/ior, built outside this repository) creating empty files, 2 ranks on
# one networked mount (an MGS+MDT0 process, two OSS processes with two OSTs each), in a
# directory with a plain default and in one with `-E 1M -c 1 -E -1 -c -1` (a new file gets
# objects for its first component only), alternating ROUNDS times; medians, and the number
# of OST objects the MDT allocated per file in each. Not a test: it asserts nothing.
#   MDTEST=/path/mdtest bench/pfl.sh [WORK]     (MPIRUN=mpirun FILES=5000 ROUNDS=3)
set -euo pipefail
: "${MDTEST:?set MDTEST to the path of an mdtest binary (github hpc/ior)}"
WORK="${1:-/var/tmp/nacre-pfl}"
MPIRUN="${MPIRUN:-mpirun}"
FILES="${FILES:-5000}"
ROUNDS="${ROUNDS:-3}"
source "$(dirname "$0")/common.sh"
WORK="$(realpath -m "$WORK")"
rm -rf "$WORK"; mkdir -p "$WORK/net/mnt"
pids=()
cleanup() {
  mountpoint -q "$WORK/net/mnt" 2>/dev/null \
    && { "$NACRE" umount "$WORK/net/mnt" || "$NACRE" umount -f "$WORK/net/mnt"; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
OSTS_PER_OSS=2 net_up "$WORK/net" pfl
M="$WORK/net/mnt"
"$NACRE" mount "$MGS@tcp:/pfl" "$M" >/dev/null
mkdir "$M/plain" "$M/pfl"
"$NACRE" setstripe -E 1M -c 1 -E -1 -c -1 "$M/pfl"
# objects DIR: OST objects of the first file mdtest made in DIR.
objects() {
  local f
  f=$(find "$1" -type f -print -quit)
  "$NACRE" getstripe --json "$f" | json "len(d['objects'])"
}
declare -A rates
for round in $(seq "$ROUNDS"); do
  for kind in plain pfl; do
    d="$M/$kind/r$round"
    rate=$("$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$MDTEST" -F -u -n "$FILES" \
      -d "$d" -C -Y | awk '$1 == "File" && $2 == "creation" {print $(NF-1)}')
    rates[$kind]+="$rate "
    [ "$round" = 1 ] && echo "$kind: $(objects "$d") OST objects per file" >&2
  done
done
for kind in plain pfl; do
  echo "$kind: creates/s $(tr ' ' '\n' <<<"${rates[$kind]}" | grep . | median) (median of $ROUNDS: ${rates[$kind]})"
done
