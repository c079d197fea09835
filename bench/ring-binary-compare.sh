#!/usr/bin/env bash
# Ring I/O (examples/c/ringbench.c, one thread) on the networked form with two nacre
# binaries (e.g. before and after a change), alternating, a fresh file system per run,
# medians of MiB/s and of the machine's CPU time per MiB. Each SPEC is "RW BLOCK_BYTES
# IN_FLIGHT"; the file is striped over both OSTs (STRIPE bytes per stripe) and written
# whole at 32 in flight first, so writes overwrite it. MOUNT_ARGS: options for `nacre
# mount` (e.g. "--max-rpc-size 256K"); SERVER_PREFIX, CLIENT_PREFIX, OSS_ARGS as in
# common.sh (e.g. the split layout of sequential.sh).
#   bench/ring-binary-compare.sh BASE_NACRE NEW_NACRE [WORK_DIR]
#   (SPECS="write 1048576 1|write 16777216 1" ROUNDS=3 SECS=5 SIZE_MIB=1024 STRIPE=1M)
set -euo pipefail
BASE="$1"; NEW="$2"
WORK="${3:-/var/tmp/nacre-ringcompare}"
source "$(dirname "$0")/common.sh"
SECS="${SECS:-5}"; ROUNDS="${ROUNDS:-3}"; SIZE_MIB="${SIZE_MIB:-1024}"; STRIPE="${STRIPE:-1M}"
IFS='|' read -ra specs <<<"${SPECS:-write 1048576 1|write 16777216 1}"
rm -rf "$WORK"; mkdir -p "$WORK"
RB="$WORK/ringbench.bin"
build_ringbench "$RB"
: > "$WORK/runs.txt"
run() { # name, binary
  local name=$1 spec rw bs qd mib t0 t1
  NACRE=$2
  net_form_up "$WORK/$name" "cmp$name"
  local m="$WORK/$name/net/mnt"
  "$NACRE" setstripe -c 2 -S "$STRIPE" "$m/ring.dat"
  ${CLIENT_PREFIX:-} "$RB" "$m" ring.dat write 1048576 32 1 "$SIZE_MIB" "$SECS" >/dev/null
  for spec in "${specs[@]}"; do
    read -r rw bs qd <<<"$spec"
    t0=$(cpu_ticks)
    mib=$(${CLIENT_PREFIX:-} "$RB" "$m" ring.dat "$rw" "$bs" "$qd" 1 "$SIZE_MIB" "$SECS" | json "round(d['mib_s'])")
    t1=$(cpu_ticks)
    # CPU µs per MiB (clock ticks of 10 ms).
    echo "$name $rw $bs $qd $mib $(( (t1 - t0) * 10000 / (mib * SECS > 0 ? mib * SECS : 1) ))" \
      | tee -a "$WORK/runs.txt" >&2
  done
  forms_down
  trap - EXIT
  rm -rf "${WORK:?}/$name"
}
for _ in $(seq "$ROUNDS"); do run base "$BASE"; run new "$NEW"; done
# med NAME RW BS QD COLUMN: the median of a column (5: MiB/s, 6: CPU µs per MiB).
med() { awk -v n="$1" -v r="$2" -v b="$3" -v q="$4" -v c="$5" \
  '$1==n && $2==r && $3==b && $4==q {print $c}' "$WORK/runs.txt" | median; }
echo "| op | block | in flight | base MiB/s (median of $ROUNDS) | new MiB/s | new/base | base CPU µs/MiB | new CPU µs/MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for spec in "${specs[@]}"; do
  read -r rw bs qd <<<"$spec"
  b=$(med base "$rw" "$bs" "$qd" 5); n=$(med new "$rw" "$bs" "$qd" 5)
  echo "| $rw | $((bs / 1024)) KiB | $qd | $b | $n | $(python3 -c "print(f'{$n/$b:.2f}x')") |" \
    "$(med base "$rw" "$bs" "$qd" 6) | $(med new "$rw" "$bs" "$qd" 6) |"
done
