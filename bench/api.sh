#!/usr/bin/env bash
# The node API's rings against FUSE and the OSTs alone (issue 22; docs/api.md), on both
# forms in one run: the embedded form (`nacre up`, 2 OSTs) and the networked form (an
# MGS+MDT0 server process, two OSS processes, a separate `nacre mount`, TCP).
#   FUSE   fio on the mount, O_DIRECT: psync at queue depth 1, libaio at 32
#   rings  examples/c/ringbench.c (libnacre.so): a ring per thread, QD requests in flight
#   LD_PRELOAD  the same fio runs with libnacre_preload.so (psync and libaio through rings)
#   OSTs   `nacre bench survey` on the networked OST directories (sequential 1 MiB, as
#          many requests in flight as each run keeps: 1 on one OST, 4 as 2 streams per
#          OST, 32 and more as 16 per OST), the ceiling of the data path, measured right
#          before and right after each networked sequential row and the better taken (this
#          virtual disk's speed drifts by up to 2x within minutes)
#   network  `nacre selftest` bulk RPCs of 1 MiB (brw_read, brw_write) from this machine to
#          the OSS processes, as many in flight as the row keeps (1 to one OSS, else half
#          to each), right after the row: the network path alone, with no disk and no file
#          system, which every networked row's data also crosses (on a small machine it
#          can be below the OSTs alone)
# Sequential 1 MiB and random 4 KiB reads and writes, queue depth 1 and 32, 1 and 4
# threads, SECS seconds each, on a file of SIZE_MIB striped over both OSTs.
# Not a test: it asserts nothing.
#   bench/api.sh [WORK_DIR]     (SECS=5 SIZE_MIB=1024)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-api}"
SECS="${SECS:-5}"
SIZE_MIB="${SIZE_MIB:-1024}"
source "$(dirname "$0")/common.sh"
command -v fio >/dev/null || { echo "fio is needed (scripts/install-deps.sh)" >&2; exit 1; }
forms_up "$WORK" apie apin
RB="$WORK/ringbench"
build_ringbench "$RB"

PRELOAD="$CARGO_TARGET_DIR/release/libnacre_preload.so"
[ -f "$PRELOAD" ] || { echo "$PRELOAD is not built (cargo build --release)" >&2; exit 1; }
# fuse MNT RW BS QD THREADS: "ops/s MiB/s" of fio on MNT/fio.dat (LD_PRELOAD as given).
fuse() {
  local engine=psync
  [ "$4" -gt 1 ] && engine=libaio
  fio --name=f --filename="$1/fio.dat" --rw="$2" --bs="$3" --direct=1 --ioengine="$engine" \
      --iodepth="$4" --numjobs="$5" --size="${SIZE_MIB}M" --time_based --runtime="$SECS" \
      --group_reporting --output-format=json 2>/dev/null \
    | json "' '.join(str(round(v)) for v in ((lambda j: (j['read']['iops'] + j['write']['iops'], (j['read']['bw'] + j['write']['bw']) / 1024))(d['jobs'][0])))"
}
# ring MNT RW BS QD THREADS: "ops/s MiB/s" of ringbench on MNT/ring.dat.
ring() {
  "$RB" "$1" ring.dat "$2" "$3" "$4" "$5" "$SIZE_MIB" "$SECS" \
    | json "f\"{round(d['ops_s'])} {round(d['mib_s'])}\""
}
# ceiling RW IN_FLIGHT BEST: the better of BEST and the OSTs alone now (MiB/s of RW).
ceiling() {
  local w r
  read -r w r <<<"$(survey_osts "$WORK/net" "$2")"
  python3 -c "print(max($3, $([ "$1" = write ] && echo "$w" || echo "$r")))"
}

rows=()
for form in emb net; do
  M="$WORK/$form/mnt"
  "$NACRE" setstripe -c 2 -S 1M "$M/ring.dat"
  "$NACRE" setstripe -c 2 -S 1M "$M/fio.dat"
  # The files written whole first (reads then read data, not holes).
  "$RB" "$M" ring.dat write 1048576 32 1 "$SIZE_MIB" "$SECS" >/dev/null
  fio --name=p --filename="$M/fio.dat" --rw=write --bs=1M --direct=1 --size="${SIZE_MIB}M" \
      --output-format=json >/dev/null 2>&1
  for spec in "write 1048576" "read 1048576" "randwrite 4096" "randread 4096"; do
    read -r rw bs <<<"$spec"
    for qd in 1 32; do
      for th in 1 4; do
        base=0 wire=0
        paired=$([ "$form" = net ] && [ "$bs" = 1048576 ] && echo 1 || true)
        [ -n "$paired" ] && base=$(ceiling "$rw" $(( qd * th )) "$base")
        read -r fo fm <<<"$(fuse "$M" "$rw" "$bs" "$qd" "$th")"
        read -r ro rm <<<"$(ring "$M" "$rw" "$bs" "$qd" "$th")"
        read -r po pm <<<"$(LD_PRELOAD="$PRELOAD" fuse "$M" "$rw" "$bs" "$qd" "$th")"
        if [ -n "$paired" ]; then
          base=$(ceiling "$rw" $(( qd * th )) "$base")
          wire=$(network_alone "$rw" $(( qd * th )))
        fi
        rows+=("$form $rw $bs $qd $th $fo $fm $ro $rm $po $pm $base $wire")
      done
    done
  done
done
echo "| form | op | bs | QD | threads | FUSE ops/s | FUSE MiB/s | rings ops/s | rings MiB/s | LD_PRELOAD ops/s | LD_PRELOAD MiB/s | OSTs alone MiB/s | network alone MiB/s | rings/FUSE | LD_PRELOAD/FUSE | rings/OSTs | LD_PRELOAD/OSTs | rings/network |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
ratio() { python3 -c "print(f'{$1/$2:.2f}x' if $2 else '-')"; }
for r in "${rows[@]}"; do
  read -r form rw bs qd th fo fm ro rm po pm base wire <<<"$r"
  ost="-" post="-" shown="-" net="-" wired="-"
  if [ "$base" != 0 ]; then
    ost=$(pct "$rm" "$base") post=$(pct "$pm" "$base") shown=$base
  fi
  if [ "$wire" != 0 ]; then
    net=$(pct "$rm" "$wire") wired=$wire
  fi
  echo "| $form | $rw | $bs | $qd | $th | $fo | $fm | $ro | $rm | $po | $pm | $shown | $wired | $(ratio "$ro" "$fo") | $(ratio "$po" "$fo") | $ost | $post | $net |"
done
