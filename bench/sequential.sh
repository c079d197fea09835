#!/usr/bin/env bash
# Sequential 1 MiB reads and writes through the node API's rings against the OSTs alone
# (issue 22's goal: rings >= 0.9x `nacre bench survey`), networked form, in two layouts:
#   shared  the servers, the mount and the application share every CPU (as api.sh runs)
#   split   the server processes on CPU 1 (`taskset -c 1`, cpu_pattern "0[1]"), the mount
#           and the application on CPU 0: two hosts' CPUs, as a deployment has them (the
#           loopback's TCP work still runs on the sending side's CPU, and a wake-up across
#           CPUs costs what this virtual machine's interrupts cost); the OSTs alone then run
#           on CPU 1 too, the server host's CPU
# Each row is one ringbench run (examples/c/ringbench.c, one thread, QD requests in flight,
# SECS seconds on a file of SIZE_MIB striped over both OSTs) between two surveys of the
# OSTs alone at the same depth (one stream on one OST for 1, else QD/2 per OST), its ratio
# against their mean: this virtual disk's speed drifts by 2x within minutes, so only a
# baseline measured around the run compares. CPU: the machine's busy time per MiB moved,
# and each CPU's busy share during the run (in the split layout: CPU 0 the client host's,
# CPU 1 the servers').
# Read rows also read the file's own objects on the OSTs with fio right after (O_DIRECT,
# same depth): the same bytes the rings read, a baseline the survey's freshly written
# objects are not. Each row also runs the network alone at its depth (`nacre selftest`
# bulk RPCs of 1 MiB). A write with nothing else in flight crosses the network, then the
# disk: "one after the other" is the rate of the two paid in turn (1 / (1/OSTs + 1/network)),
# the bound of any client and server that store a write's data before writing it.
# Rounds alternate the rows; the summary gives each row's median ratio.
# Not a test: it asserts nothing.
#   bench/sequential.sh [WORK_DIR]     (ROUNDS=3 SECS=5 SIZE_MIB=1024 LAYOUTS="shared split")
set -euo pipefail
WORK="${1:-/var/tmp/nacre-seq}"
SECS="${SECS:-5}"
SIZE_MIB="${SIZE_MIB:-1024}"
ROUNDS="${ROUNDS:-3}"
LAYOUTS="${LAYOUTS:-shared split}"
source "$(dirname "$0")/common.sh"
[ "$(nproc)" -ge 2 ] || { echo "the split layout needs 2 CPUs" >&2; exit 1; }
mkdir -p "$WORK"
RB="$WORK/ringbench.bin"
build_ringbench "$RB"

# per_cpu: "busy,total" clock ticks of CPU 0 and of CPU 1 so far.
per_cpu() { awk '/^cpu[01] /{printf "%d,%d ", $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
# busy_pct BEFORE AFTER: each CPU's busy share between two per_cpu readings ("47% 95%").
busy_pct() {
  python3 -c "
a = [tuple(map(int, x.split(','))) for x in '$1'.split()]
b = [tuple(map(int, x.split(','))) for x in '$2'.split()]
print(' '.join(f'{(q[0] - p[0]) * 100 / max(q[1] - p[1], 1):.0f}%' for p, q in zip(a, b)))"
}

# objects_read DIR QD: MiB/s of fio reading the file's own objects on the OSTs under DIR
# directly (O_DIRECT, 1 MiB, under SERVER_PREFIX): QD/2 deep on each of the two objects,
# or one at a time on ost0's for 1. The same bytes on the same disk as the rings read,
# where the survey reads objects it has just written.
objects_read() {
  local objs args=() o
  mapfile -t objs < <(find "$1/ost0/O" "$1/ost1/O" -type f -size +64M | sort)
  [ "$2" -eq 1 ] && objs=("${objs[0]}")
  for o in "${objs[@]}"; do args+=(--name="$(basename "$o")" --filename="$o"); done
  ${SERVER_PREFIX:-} fio --rw=read --bs=1M --direct=1 --ioengine=libaio --iodepth=$(( $2 > 1 ? $2 / 2 : 1 )) \
      --time_based --runtime="$SECS" --output-format=json "${args[@]}" 2>/dev/null \
    | json "round(sum(j['read']['bw'] for j in d['jobs']) / 1024)"
}

rows=()
for layout in $LAYOUTS; do
  case $layout in
    shared) SERVER_PREFIX="" CLIENT_PREFIX="" OSS_ARGS="" ;;
    split) SERVER_PREFIX="taskset -c 1" CLIENT_PREFIX="taskset -c 0" OSS_ARGS="--cpu-pattern 0[1]" ;;
    *) echo "unknown layout $layout" >&2; exit 1 ;;
  esac
  net_form_up "$WORK/$layout" "seq$layout"
  M="$WORK/$layout/net/mnt"
  "$NACRE" setstripe -c 2 -S 1M "$M/ring.dat"
  $CLIENT_PREFIX "$RB" "$M" ring.dat write 1048576 32 1 "$SIZE_MIB" "$SECS" >/dev/null
  for round in $(seq "$ROUNDS"); do
    for rw in write read; do
      for qd in 1 32; do
        col=$([ "$rw" = write ] && echo 1 || echo 2)
        before=$(survey_osts "$WORK/$layout/net" "$qd" | cut -d' ' -f"$col")
        t0=$(cpu_ticks) c0=$(per_cpu)
        mib=$($CLIENT_PREFIX "$RB" "$M" ring.dat "$rw" 1048576 "$qd" 1 "$SIZE_MIB" "$SECS" \
          | json "round(d['mib_s'])")
        t1=$(cpu_ticks) c1=$(per_cpu)
        after=$(survey_osts "$WORK/$layout/net" "$qd" | cut -d' ' -f"$col")
        same=0
        [ "$rw" = read ] && same=$(objects_read "$WORK/$layout/net" "$qd")
        wire=$(network_alone "$rw" "$qd")
        line="$layout $rw $qd $round $before $after $mib $(python3 -c "
print(f'{$mib / (($before + $after) / 2):.2f}', round(($t1 - $t0) * 1e4 / max($mib * $SECS, 1)))
") $(busy_pct "$c0" "$c1") $same $wire"
        echo "$line" >&2
        rows+=("$line")
      done
    done
  done
  forms_down
  trap - EXIT
done

echo "| layout | op | QD | round | OSTs before MiB/s | OSTs after MiB/s | rings MiB/s | rings/OSTs | CPU µs per MiB | CPU 0 busy | CPU 1 busy | its objects by fio MiB/s | rings/objects | network alone MiB/s | one after the other MiB/s | rings/one after the other |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for r in "${rows[@]}"; do
  read -r layout rw qd round before after mib ratio cpu b0 b1 same wire <<<"$r"
  shown="-" vs="-" serial="-" vserial="-"
  if [ "$same" != 0 ]; then shown=$same vs=$(python3 -c "print(f'{$mib / $same:.2f}x')"); fi
  if [ "$rw $qd" = "write 1" ]; then
    read -r serial vserial <<<"$(python3 -c "
s = 1 / (2 / ($before + $after) + 1 / $wire)
print(round(s), f'{$mib / s:.2f}x')")"
  fi
  echo "| $layout | $rw | $qd | $round | $before | $after | $mib | ${ratio}x | $cpu | $b0 | $b1 | $shown | $vs | $wire | $serial | $vserial |"
done
echo
echo "| layout | op | QD | median rings/OSTs | range |"
echo "|---|---|---:|---:|---|"
for layout in $LAYOUTS; do
  for rw in write read; do
    for qd in 1 32; do
      ratios=$(for r in "${rows[@]}"; do
        read -r l o q _ _ _ _ ratio _ <<<"$r"
        if [ "$l $o $q" = "$layout $rw $qd" ]; then echo "$ratio"; fi
      done)
      echo "| $layout | $rw | $qd | $(median <<<"$ratios")x | $(sort -n <<<"$ratios" | head -1)-$(sort -n <<<"$ratios" | tail -1)x |"
    done
  done
done
