#!/usr/bin/env bash
# Issue 44's yardstick with the real tools: IOR and mdtest (github hpc/ior, built by the user
# outside this repository) run by mpirun with 2 ranks on one mount, at the issue's sizes, on
#   local      ext4 under WORK
#   embedded   `nacre up` (one process, 4 OSTs)
#   networked  an MGS+MDT0 process, two OSS processes with two OSTs each, one separate
#              `nacre mount` process, all over TCP on loopback
#   async      the same servers through a second `nacre mount` process with
#              `--async-dirops true` (creates and unlinks answered by the mount in
#              directories delegated to it)
#   async-dom  the async mount, mdtest hard's directory laid out for small files
#              (`setstripe -E 64K -L mdt -E -1 -c 1`: its files' first 64 KiB on the MDT,
#              as sites set for small files; not in the default list)
# in IO500's phase order (so stats run long after the creates). Each mdtest phase is its own
# run (-C, -T, -E, -r) with -Y: a sync after the phase, inside its timing, so buffered work
# counts once durable. Beside each rate: CPU-µs per operation (or per MiB) of the Nacre
# processes (servers and mount; `nacre up` alone for the embedded form) and of the whole
# machine (mdtest, the kernel's FUSE and TCP included): on loopback, round trips are CPU.
# Not a test: it asserts nothing.
#   MDTEST=/path/mdtest IOR=/path/ior bench/real.sh [WORK]
#   (MPIRUN=mpirun ONLY="local embedded networked async" EASY=10000 HARD=5000 IOR_SIZE=1g
#    SEGMENTS=5000)
set -euo pipefail
: "${MDTEST:?set MDTEST to the path of an mdtest binary (github hpc/ior)}"
: "${IOR:?set IOR to the path of an ior binary (github hpc/ior)}"
WORK="${1:-/var/tmp/nacre-real}"
MPIRUN="${MPIRUN:-mpirun}"
ONLY="${ONLY:-local embedded networked async}"
EASY="${EASY:-10000}"
HARD="${HARD:-5000}"
IOR_SIZE="${IOR_SIZE:-1g}"
SEGMENTS="${SEGMENTS:-5000}"
source "$(dirname "$0")/common.sh"
WORK="$(realpath -m "$WORK")"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/emb/mnt" "$WORK/net/mnt" "$WORK/net/amnt"
pids=()
cleanup() {
  local m
  for m in "$WORK/net/mnt" "$WORK/net/amnt"; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  "$NACRE" down "$WORK/emb/mnt" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
mpi() { "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$@"; }
TCK=$(getconf CLK_TCK)

# --- the file systems -----------------------------------------------------------------
"$NACRE" up "$WORK/emb/data" --mount "$WORK/emb/mnt" --osts 4 --fsname emb \
  --listen "127.0.0.1:$(free_port 127.0.0.1)" >/dev/null
EMB_PIDS=("$(pgrep -f "nacre up $WORK/emb/data" | head -1)")
OSTS_PER_OSS=2 net_up "$WORK/net" real
"$NACRE" mount "$MGS@tcp:/real" "$WORK/net/mnt" >/dev/null
NET_PIDS=("${pids[@]}" "$(pgrep -f "nacre mount $MGS@tcp:/real $WORK/net/mnt" | head -1)")
"$NACRE" mount "$MGS@tcp:/real" "$WORK/net/amnt" --async-dirops true >/dev/null
ASYNC_PIDS=("${pids[@]}" "$(pgrep -f "nacre mount $MGS@tcp:/real $WORK/net/amnt" | head -1)")

# measure FORM OPS LABEL CMD...: runs CMD; prints "LABEL rate nacre-µs/op machine-µs/op"
# where rate is what the command printed (its last line), OPS the operations (or MiB).
measure() {
  local form="$1" ops="$2" label="$3"; shift 3
  local p0 m0 out p1 m1 procs=()
  case "$form" in
    embedded) procs=("${EMB_PIDS[@]}") ;;
    networked) procs=("${NET_PIDS[@]}") ;;
    async|async-dom) procs=("${ASYNC_PIDS[@]}") ;;
  esac
  p0=$(proc_ticks "${procs[@]}"); m0=$(cpu_ticks)
  out=$("$@" | tail -1)
  p1=$(proc_ticks "${procs[@]}"); m1=$(cpu_ticks)
  python3 -c "
ops = $ops
us = lambda t: round(t * 1e6 / $TCK / ops, 1)
print('$label', round(float('$out')), us($p1 - $p0), us($m1 - $m0))"
}
# mdtest_rate NAME ARGS...: one mdtest phase; prints the mean rate of operation NAME.
mdtest_rate() {
  local name="$1"; shift
  mpi "$MDTEST" "$@" | awk -v n="$name" '$0 ~ "^ *"n" " {print $(NF-1)}' | tail -1
}
# ior_rate OP ARGS...: one IOR run; prints its MiB/s for OP (write or read).
ior_rate() {
  local op="$1"; shift
  mpi "$IOR" "$@" | awk -v op="$op" '/^Summary of all tests/ {s = 1} s && $1 == op {print $2}'
}

for form in $ONLY; do
  case "$form" in
    local) P="$WORK/local" ;;
    embedded) P="$WORK/emb/mnt" ;;
    networked) P="$WORK/net/mnt" ;;
    async|async-dom) P="$WORK/net/amnt" ;;
  esac
  echo "measuring $form ..." >&2
  mkdir -p "$P/ior-easy" "$P/ior-hard" "$P/md-easy" "$P/md-hard"
  if [ "$form" = async-dom ]; then
    "$NACRE" setstripe -E 64K -L mdt -E -1 -c 1 "$P/md-hard"
  fi
  sync
  easy=(-F -u -n "$EASY" -d "$P/md-easy" -Y)
  hard=(-F -n "$HARD" -w 3901 -e 3901 -d "$P/md-hard" -Y)
  mib=$(( $(numfmt --from=iec "${IOR_SIZE^^}") * 2 / 1048576 ))
  hard_mib=$(python3 -c "print(round(47008 * $SEGMENTS * 2 / 1048576, 1))")
  {
    measure "$form" "$mib" "ior-easy-write" ior_rate write -a POSIX -F -t 1m -b "$IOR_SIZE" \
      --posix.odirect -e -w -k -o "$P/ior-easy/f"
    measure "$form" "$((EASY * 2))" "md-easy-create" mdtest_rate "File creation" "${easy[@]}" -C
    measure "$form" "$hard_mib" "ior-hard-write" ior_rate write -a POSIX -t 47008 -b 47008 \
      -s "$SEGMENTS" -e -w -k -o "$P/ior-hard/f"
    measure "$form" "$((HARD * 2))" "md-hard-create" mdtest_rate "File creation" "${hard[@]}" -C
    measure "$form" "$mib" "ior-easy-read" ior_rate read -a POSIX -F -t 1m -b "$IOR_SIZE" \
      --posix.odirect -r -C -k -o "$P/ior-easy/f"
    measure "$form" "$((EASY * 2))" "md-easy-stat" mdtest_rate "File stat" "${easy[@]}" -T
    measure "$form" "$hard_mib" "ior-hard-read" ior_rate read -a POSIX -t 47008 -b 47008 \
      -s "$SEGMENTS" -r -C -k -o "$P/ior-hard/f"
    measure "$form" "$((HARD * 2))" "md-hard-stat" mdtest_rate "File stat" "${hard[@]}" -T
    measure "$form" "$((EASY * 2))" "md-easy-remove" mdtest_rate "File removal" "${easy[@]}" -r
    measure "$form" "$((HARD * 2))" "md-hard-read" mdtest_rate "File read" "${hard[@]}" -E
    measure "$form" "$((HARD * 2))" "md-hard-remove" mdtest_rate "File removal" "${hard[@]}" -r
  } > "$WORK/$form.txt"
  rm -rf "${P:?}"/ior-easy "${P:?}"/ior-hard "${P:?}"/md-easy "${P:?}"/md-hard
done

echo
echo "EASY=$EASY HARD=$HARD IOR_SIZE=$IOR_SIZE SEGMENTS=$SEGMENTS, 2 ranks on one mount;"
echo "rate (ops/s or MiB/s) | CPU-µs per op or MiB: Nacre processes / whole machine"
echo
printf '| phase |'; for f in $ONLY; do printf ' %s |' "$f"; done; echo
printf '|---|'; for _ in $ONLY; do printf -- '---:|'; done; echo
for phase in ior-easy-write md-easy-create ior-hard-write md-hard-create ior-easy-read \
             md-easy-stat ior-hard-read md-hard-stat md-easy-remove md-hard-read \
             md-hard-remove; do
  printf '| %s |' "$phase"
  for f in $ONLY; do
    printf ' %s |' "$(awk -v p="$phase" '$1 == p {print $2" | "$3" / "$4}' "$WORK/$f.txt" \
      | sed 's/ | \(.*\)/ (\1)/')"
  done
  echo
done
