#!/usr/bin/env bash
# Reads served together by the OSS (`ost.OSS.ost_io.batch_max`, docs/tuning.md) against reads
# served one by one, on the same servers: random 4 KiB reads through the node API's rings
# (examples/c/ringbench.c), THREADS threads at queue depth QD, on a file striped over both
# OSTs of the networked form (two OSS processes, a separate `nacre mount`, TCP). Rounds
# alternate batch_max 16 and 1 (or another `ost.OSS.ost_io` parameter PARAM over VALUES,
# e.g. PARAM=batch_threads_max VALUES="2 512"; RW and BS: another ringbench load, e.g.
# RW=read BS=1048576). For each run: reads/s, and per read the CPU time of the whole
# machine (busy time of every CPU in /proc/stat) and its context switches (`ctxt`), which is
# what batching saves. The embedded form serves its mount's requests inline, in the caller's
# thread (no queue, so no batch): its figure is printed once for reference.
# Not a test: it asserts nothing.
#   bench/batch.sh [WORK_DIR]    (ROUNDS=3 SECS=5 SIZE_MIB=512 QD=32 THREADS=4
#                                 PARAM=batch_max VALUES="16 1" RW=randread BS=4096)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-batch}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-5}"
SIZE_MIB="${SIZE_MIB:-512}"
QD="${QD:-32}"
THREADS="${THREADS:-4}"
PARAM="${PARAM:-batch_max}"
VALUES="${VALUES:-16 1}"
RW="${RW:-randread}"
BS="${BS:-4096}"
source "$(dirname "$0")/common.sh"
forms_up "$WORK" bate batn
RB="$WORK/ringbench"
build_ringbench "$RB"

# cpu_ctxt: "busy_ticks context_switches" of the whole machine so far.
cpu_ctxt() {
  awk '/^cpu / {b = $2 + $3 + $4 + $7 + $8 + $9} /^ctxt/ {c = $2} END {print b, c}' /proc/stat
}
# run FORM: "reads/s cpu_us_per_read switches_per_read" of one ringbench run on FORM's mount.
run() {
  local b0 c0 b1 c1 ops
  read -r b0 c0 <<<"$(cpu_ctxt)"
  ops=$("$RB" "$WORK/$1/mnt" ring.dat "$RW" "$BS" "$QD" "$THREADS" "$SIZE_MIB" "$SECS" | json "d['ops_s']")
  read -r b1 c1 <<<"$(cpu_ctxt)"
  python3 -c "
ops, secs, hz = $ops, $SECS, $(getconf CLK_TCK)
n = ops * secs
print(f'{ops:.0f} {($b1 - $b0) / hz * 1e6 / n:.1f} {($c1 - $c0) / n:.2f}')"
}

for form in emb net; do
  "$NACRE" setstripe -c 2 -S 1M "$WORK/$form/mnt/ring.dat"
  "$RB" "$WORK/$form/mnt" ring.dat write 1048576 32 1 "$SIZE_MIB" 2 >/dev/null
done
echo "$RW of $BS bytes through the rings, QD $QD x $THREADS threads, ${SECS}s a run"
printf "%-9s %-17s %7s  %11s  %13s\n" form "$PARAM" ops/s cpu_us/op switches/op
read -r o c s <<<"$(run emb)"
printf "%-9s %-17s %7s  %11s  %13s\n" embedded "(inline)" "$o" "$c" "$s"
for r in $(seq "$ROUNDS"); do
  for b in $VALUES; do
    for p in "${pids[1]}" "${pids[2]}"; do  # the two OSS processes
      "$NACRE" ctl --pid "$p" set_param "ost.OSS.ost_io.$PARAM=$b" >/dev/null
    done
    read -r o c s <<<"$(run net)"
    printf "%-9s %-17s %7s  %11s  %13s\n" networked "$b" "$o" "$c" "$s"
  done
done
