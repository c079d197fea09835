#!/usr/bin/env bash
# A/B of two nacre builds (e.g. before and after a change): each WORKLOAD run with OLD and
# with NEW in alternation, ROUNDS times, a fresh file system per run, then the median of
# every figure for each and NEW/OLD. Not a test: it asserts nothing.
#   bench/ab.sh OLD NEW WORKLOAD [WORKLOAD...]       (ROUNDS=3 WORK=/var/tmp/nacre-ab)
# OLD, NEW: a nacre binary (a path to an executable file), `.` for this work tree's build
#   (bench/common.sh builds it), or a git revision of this repository (built once into
#   AB_CACHE, default ~/.cache/nacre-ab, from `git archive` of it: nothing in the work tree
#   changes).
# WORKLOAD (each round runs every workload given, OLD then NEW):
#   io          parallel I/O through the FUSE mount of `nacre up` with 4 OSTs: fio, JOBS
#               writers then JOBS readers, O_DIRECT, psync, BS blocks, SIZE per job, file
#               per process; MiB/s. (JOBS=8 BS=1m SIZE=256m; JOBS above the mount's 4 FUSE
#               threads exercises requests handed to helper threads.)
#   md          metadata through the FUSE mount of `nacre up` with 4 OSTs: bench/mdops.py,
#               create, stat, unlink of FILES files from 2 processes; ops/s. (FILES=10000)
#   net         the networked form: an MGS+MDT0 server process on 127.0.0.1, ONE OSS process
#               with two OSTs on 127.0.0.2, a separate `nacre mount`, TCP; bench/mdops.py of
#               FILES files from 2 processes, then fio, JOBS writers then readers, 1 MiB
#               O_DIRECT, 256 MiB each, file per process. (FILES=4000 JOBS=4)
#   ring        ring I/O (examples/c/ringbench.c, one thread) on the networked form of
#               bench/common.sh (two OSS processes), a file striped over both OSTs (STRIPE per
#               stripe) written whole at 32 in flight first, so writes overwrite it; per SPEC
#               "RW BLOCK_BYTES IN_FLIGHT": MiB/s and the machine's CPU µs per MiB.
#               (SPECS="write 1048576 1|write 16777216 1" SECS=5 SIZE_MIB=1024 STRIPE=1M;
#               MOUNT_ARGS for `nacre mount`, e.g. "--max-rpc-size 256K"; SERVER_PREFIX,
#               CLIENT_PREFIX, OSS_ARGS as in bench/common.sh, e.g. the split layout of
#               bench/sequential.sh)
#   write-path  buffered writes through the FUSE mount of `nacre up`: dd of COUNT blocks of BS
#               to a new file, conv=fsync; MiB/s and the MDS getxattr requests it cost (the
#               kernel's security.capability check before each write). (BS=64k COUNT=4000)
#   md-sync     the MDT durability choice: `md` with OLD run with --mdt-sync-on-reply (sync
#               before every reply) and NEW with the default (reply after the journal write);
#               usually `bench/ab.sh . . md-sync`, NEW/OLD then being default/sync-on-reply.
#   mdtest      the networked form of bench/common.sh (two OSS processes, MOUNT_ARGS for the
#               mount), the real mdtest (MDTEST=/path/to/mdtest, github hpc/ior, built outside
#               this repository) with 2 MPI ranks on the one mount, each phase synced (-Y):
#               easy `-F -u -n N` then hard `-F -n N -w 3901 -e 3901` in one directory;
#               ops/s per phase. (N=5000)
#   ior-hard    the networked form of bench/common.sh, the real IOR (IOR=/path/to/ior, github
#               hpc/ior, built outside this repository) with 2 MPI ranks on the one mount:
#               IO500's ior-hard shape, 47,008-byte records interleaved in one file,
#               SEGMENTS per rank, written (`-w -e`) then read back by the other rank
#               (`-r -C`), each its own run; MiB/s. (SEGMENTS=5000)
#   ior-hard-2  ior-hard with one rank on each of two mounts of the file system (each rank
#               in a mount namespace of its own where one path is its mount): the read
#               phase reads what the other mount wrote. (SEGMENTS=5000)
#   ior-easy    the networked form of bench/common.sh with OSTS_PER_OSS=2 unless set, the
#               real IOR with 2 MPI ranks on the one mount: issue 44's IOR easy, file per
#               process, 1 MiB transfers, O_DIRECT, BLOCK per rank, written (`-w -e`) then
#               read back by the other rank (`-r -C`); MiB/s. (BLOCK=1g)
#   find        the networked form of bench/common.sh, the real mdtest (MDTEST) with 2 MPI
#               ranks making N files each (`-F -u -C`, mdtest easy's create) on the one mount,
#               then GNU find over them with IO500's find predicates, names first (as pfind
#               tests them: a stat only for the ~4% of names that match), on the same mount
#               and then on a second, fresh mount of the same servers; entries/s. (N=50000)
# BS serves io (1m) and write-path (64k), FILES md and md-sync (10000) and net (4000): set
# them per invocation when running those workloads together.
# Needs fio (io, net), a C compiler and pkg-config (ring), FUSE; bench/common.sh installs them.
# Every run's figures are printed as they come and kept in WORK/runs.tsv.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 3 ] || usage
OLD_SPEC="$1"; NEW_SPEC="$2"; shift 2
WORKLOADS=("$@")
for wl in "${WORKLOADS[@]}"; do
  case "$wl" in
    io | md | net | ring | write-path | md-sync | mdtest | ior-hard | ior-hard-2 | ior-easy | find) ;;
    *) echo "ab.sh: unknown workload '$wl'" >&2; usage ;;
  esac
done
# Paths given relative to where the script was started (common.sh moves to the repository).
WORK=$(realpath -m "${WORK:-/var/tmp/nacre-ab}")
abs() { if [ -f "$1" ] && [ -x "$1" ]; then realpath "$1"; else echo "$1"; fi; }
OLD_SPEC=$(abs "$OLD_SPEC"); NEW_SPEC=$(abs "$NEW_SPEC")
ROUNDS="${ROUNDS:-3}"
source "$(dirname "$0")/common.sh"
THIS="$NACRE"
AB_CACHE="${AB_CACHE:-$HOME/.cache/nacre-ab}"

# resolve SPEC: the path of the nacre binary SPEC names (a revision is built on first use).
resolve() {
  local spec=$1 rev src
  if [ "$spec" = . ]; then echo "$THIS"; return; fi
  if [ -f "$spec" ] && [ -x "$spec" ]; then echo "$spec"; return; fi
  rev=$(git rev-parse --verify --quiet "$spec^{commit}") \
    || { echo "ab.sh: '$spec' is neither an executable nor a git revision" >&2; return 1; }
  if [ ! -x "$AB_CACHE/nacre-$rev" ]; then
    echo "ab.sh: building $spec ($rev) ..." >&2
    # A directory of its own per revision: cargo's fingerprints are per path, and
    # `git archive` gives every file the commit's time, so a reused directory could keep
    # another revision's objects. The target directory is shared (dependencies build once).
    src="$AB_CACHE/src-$rev"
    rm -rf "$src"; mkdir -p "$src"
    git archive "$rev" | tar -x -C "$src"
    (cd "$src" && CARGO_TARGET_DIR="$AB_CACHE/target" cargo build --release -p nacre-cli -q) >&2
    cp "$AB_CACHE/target/release/nacre" "$AB_CACHE/nacre-$rev"
    rm -rf "$src"
  fi
  echo "$AB_CACHE/nacre-$rev"
}
OLD=$(resolve "$OLD_SPEC")
NEW=$(resolve "$NEW_SPEC")

rm -rf "$WORK"; mkdir -p "$WORK"
RUNS="$WORK/runs.tsv"
: > "$RUNS"
pids=()
CUR="$NEW"  # the binary of the run in progress (for the cleanup)
# A failed run must not leave a file system mounted or a server running.
cleanup() {
  local m p
  for m in "$WORK"/*/*/mnt "$WORK"/*/*/net/mnt; do
    mountpoint -q "$m" 2>/dev/null || continue
    "$CUR" down "$m" >/dev/null 2>&1 || "$CUR" umount -f "$m" >/dev/null 2>&1 \
      || fusermount3 -uz "$m" || true
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
# stop_servers: ends the server processes of the run that started them.
stop_servers() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
# record WORKLOAD SIDE MEASURE VALUE: one figure of one run.
record() { printf '%s\t%s\t%s\t%s\n' "$@" | tee -a "$RUNS" >&2; }
# mdops WORKLOAD SIDE DIR FILES: bench/mdops.py's create/stat/unlink ops/s, 2 processes.
mdops() {
  local phase _n _secs rate
  python3 bench/mdops.py "$3" "$4" 2 > "$WORK/mdops.out"
  while read -r phase _n _secs rate; do record "$1" "$2" "$phase ops/s" "$rate"; done < "$WORK/mdops.out"
}

# --- the workloads: each takes SIDE (old or new) and the binary ---------------------------

wl_io() {
  local side=$1 bin=$2 d="$WORK/io/$1" rw bw
  mkdir -p "$d/mnt"
  "$bin" up "$d/data" --mount "$d/mnt" --osts 4 >/dev/null
  for rw in write read; do
    bw=$(fio --name=io --directory="$d/mnt" --rw="$rw" --bs="${BS:-1m}" --size="${SIZE:-256m}" \
      --numjobs="${JOBS:-8}" --direct=1 --ioengine=psync --group_reporting \
      --output-format=json | json "f\"{d['jobs'][0]['$rw']['bw_bytes']/1048576:.1f}\"")
    record io "$side" "$rw MiB/s" "$bw"
  done
  "$bin" down "$d/mnt"
  rm -rf "$d"
}

# md_up WORKLOAD SIDE BIN [UP_ARGS...]: `md` and `md-sync`.
md_up() {
  local wl=$1 side=$2 bin=$3 d="$WORK/$1/$2"
  shift 3
  mkdir -p "$d/mnt"
  "$bin" up "$d/data" --mount "$d/mnt" --osts 4 "$@" >/dev/null
  mkdir -p "$d/mnt/md"
  mdops "$wl" "$side" "$d/mnt/md" "${FILES:-10000}"
  "$bin" down "$d/mnt"
  rm -rf "$d"
}
wl_md() { md_up md "$1" "$2"; }
wl_md_sync() {
  if [ "$1" = old ]; then md_up md-sync "$1" "$2" --mdt-sync-on-reply; else md_up md-sync "$1" "$2"; fi
}

wl_net() {
  local side=$1 bin=$2 d="$WORK/net/$1" mgs oss i rw
  mkdir -p "$d/mnt"
  mgs="127.0.0.1:$(free_port 127.0.0.1)"; oss="127.0.0.2:$(free_port 127.0.0.2)"
  "$bin" mkfs --mgs --fsname cmp "$d/mgs" >/dev/null
  "$bin" mkfs --mdt --index 0 --fsname cmp --mgsnode "$mgs@tcp" "$d/mdt0" >/dev/null
  for i in 0 1; do "$bin" mkfs --ost --index $i --fsname cmp --mgsnode "$mgs@tcp" "$d/ost$i" >/dev/null; done
  "$bin" server --listen "$mgs" --target "$d/mgs" --target "$d/mdt0" > "$d/mds.log" 2>&1 &
  pids+=($!); wait_serving "$d/mds.log"
  "$bin" server --listen "$oss" --target "$d/ost0" --target "$d/ost1" > "$d/oss.log" 2>&1 &
  pids+=($!); wait_serving "$d/oss.log"
  "$bin" mount "$mgs@tcp:/cmp" "$d/mnt" >/dev/null
  mkdir -p "$d/mnt/md"
  mdops net "$side" "$d/mnt/md" "${FILES:-4000}"
  for rw in write read; do
    fio --name=io --directory="$d/mnt" --rw="$rw" --bs=1m --size=256m --numjobs="${JOBS:-4}" \
        --direct=1 --ioengine=psync --group_reporting --output-format=json > "$d/fio.json"
    record net "$side" "$rw MiB/s" "$(json "round(d['jobs'][0]['$rw']['bw']/1024)" < "$d/fio.json")"
  done
  "$bin" umount "$d/mnt"
  stop_servers
  rm -rf "$d"
}

RB="$WORK/ringbench.bin"
ring_setup() {
  # libnacre.so and its pkg-config file for ringbench (this work tree's, for both sides).
  cargo build --release -q -p nacre-capi
  build_ringbench "$RB"
  IFS='|' read -ra SPEC_LIST <<<"${SPECS:-write 1048576 1|write 16777216 1}"
}
wl_ring() {
  local side=$1 spec rw bs qd mib t0 t1 m secs="${SECS:-5}" size="${SIZE_MIB:-1024}"
  NACRE=$2
  net_form_up "$WORK/ring/$side" "cmp$side"
  trap cleanup EXIT  # net_form_up sets its own
  m="$WORK/ring/$side/net/mnt"
  "$NACRE" setstripe -c 2 -S "${STRIPE:-1M}" "$m/ring.dat"
  ${CLIENT_PREFIX:-} "$RB" "$m" ring.dat write 1048576 32 1 "$size" "$secs" >/dev/null
  for spec in "${SPEC_LIST[@]}"; do
    read -r rw bs qd <<<"$spec"
    t0=$(cpu_ticks)
    mib=$(${CLIENT_PREFIX:-} "$RB" "$m" ring.dat "$rw" "$bs" "$qd" 1 "$size" "$secs" | json "round(d['mib_s'])")
    t1=$(cpu_ticks)
    record ring "$side" "$rw $((bs / 1024)) KiB, $qd in flight, MiB/s" "$mib"
    # CPU µs per MiB (clock ticks of 10 ms).
    record ring "$side" "$rw $((bs / 1024)) KiB, $qd in flight, CPU µs/MiB" \
      "$(( (t1 - t0) * 10000 / (mib * secs > 0 ? mib * secs : 1) ))"
  done
  forms_down
  pids=()
  NACRE="$THIS"
  rm -rf "${WORK:?}/ring/$side"
}

mdtest_setup() {
  [ -x "${MDTEST:-}" ] || { echo "ab.sh: mdtest needs MDTEST=/path/to/mdtest" >&2; exit 2; }
}
wl_mdtest() {
  local side=$1 m kind phase rate
  NACRE=$2
  net_form_up "$WORK/mdtest/$side" "cmp$side"
  trap cleanup EXIT  # net_form_up sets its own
  m="$WORK/mdtest/$side/net/mnt"
  for kind in easy hard; do
    mkdir -p "$m/$kind"
    local args=(-F -u -n "${N:-5000}")
    [ "$kind" = easy ] || args=(-F -n "${N:-5000}" -w 3901 -e 3901)
    mpirun --allow-run-as-root --oversubscribe -np 2 "$MDTEST" "${args[@]}" -Y -d "$m/$kind" \
      > "$WORK/mdtest.out" 2>&1
    # "   File creation     3545.123  3545.123  3545.123  0.000" (max min mean stddev).
    while read -r phase rate; do
      record mdtest "$side" "$kind $phase ops/s" "$rate"
    done < <(awk '/^ *File (creation|stat|read|removal) / {print $2, int($5)}' "$WORK/mdtest.out")
  done
  forms_down
  pids=()
  NACRE="$THIS"
  rm -rf "${WORK:?}/mdtest/$side"
}

ior_hard_setup() {
  [ -x "${IOR:-}" ] || { echo "ab.sh: ior-hard needs IOR=/path/to/ior" >&2; exit 2; }
}
# ior_run SIDE BIN WORKLOAD IOR_ARGS...: the networked form, IOR_ARGS written (`-w -e`)
# then read back by the other rank (`-r -C`), each its own run; MiB/s per phase. With
# IOR_MOUNTS=2 each rank is on its own mount of the file system (two `nacre mount`
# processes): it runs in a mount namespace of its own where one path, WORK/ior/SIDE/at, is
# its mount (rank 0 the first, rank 1 the second).
ior_run() {
  local side=$1 phase args rate wl=$3 w m launch=()
  NACRE=$2
  shift 3
  w="$WORK/ior/$side"
  net_form_up "$w" "cmp$side"
  trap cleanup EXIT  # net_form_up sets its own
  m="$w/net/mnt"
  if [ "${IOR_MOUNTS:-1}" = 2 ]; then
    mkdir -p "$w/net/mnt2" "$w/at"
    ${CLIENT_PREFIX:-} "$NACRE" mount "$MGS@tcp:/cmp$side" "$w/net/mnt2" ${MOUNT_ARGS:-} >/dev/null
    printf '%s\n' '#!/bin/sh' \
      "m=$w/net/mnt; [ \"\${OMPI_COMM_WORLD_RANK:-0}\" = 1 ] && m=$w/net/mnt2" \
      "exec unshare -m --propagation private sh -c 'mount --bind \"\$1\" \"\$2\" && shift 2 && exec \"\$@\"' rank \"\$m\" $w/at \"\$@\"" \
      > "$w/rank.sh"
    chmod +x "$w/rank.sh"
    launch=("$w/rank.sh")
    m="$w/at"
  fi
  for phase in write read; do
    args=(-w -e)
    [ "$phase" = write ] || args=(-r -C)
    mpirun --allow-run-as-root --oversubscribe -np 2 "${launch[@]}" "$IOR" -a POSIX "$@" -k \
      "${args[@]}" -o "$m/$wl" > "$WORK/ior.out" 2>&1
    # "write     123.45   ..." (the summary line of the access: its bandwidth in MiB/s).
    rate=$(awk -v p="$phase" '$1 == p && $2 ~ /^[0-9.]+$/ {print $2; exit}' "$WORK/ior.out")
    record "$wl" "$side" "$phase MiB/s" "${rate:-0}"
  done
  if mountpoint -q "$w/net/mnt2"; then
    "$NACRE" umount "$w/net/mnt2" || "$NACRE" umount -f "$w/net/mnt2"
  fi
  forms_down
  pids=()
  NACRE="$THIS"
  rm -rf "${WORK:?}/ior/$side"
}
wl_ior_hard() {
  ior_run "$1" "$2" ior-hard -t 47008 -b 47008 -s "${SEGMENTS:-5000}"
}
wl_ior_hard_2() {
  IOR_MOUNTS=2 ior_run "$1" "$2" ior-hard-2 -t 47008 -b 47008 -s "${SEGMENTS:-5000}"
}
wl_ior_easy() {
  OSTS_PER_OSS="${OSTS_PER_OSS:-2}" ior_run "$1" "$2" ior-easy --posix.odirect -t 1m \
    -b "${BLOCK:-1g}" -F
}

wl_find() {
  local side=$1 m fresh where s e n
  NACRE=$2
  net_form_up "$WORK/find/$side" "cmp$side"
  trap cleanup EXIT  # net_form_up sets its own
  m="$WORK/find/$side/net/mnt"
  mpirun --allow-run-as-root --oversubscribe -np 2 "$MDTEST" -F -u -C -n "${N:-50000}" \
    -d "$m/md" > "$WORK/mdtest.out" 2>&1
  touch "$WORK/find/$side/stamp"
  fresh="$WORK/find/$side/fresh"
  mkdir -p "$fresh"
  "$NACRE" mount "$MGS@tcp:/cmp$side" "$fresh" ${MOUNT_ARGS:-} >/dev/null
  for where in making fresh; do
    local root="$m/md"
    [ "$where" = making ] || root="$fresh/md"
    s=$(date +%s.%N)
    find "$root" -name '*01*' -newer "$WORK/find/$side/stamp" -size 3901c > /dev/null
    e=$(date +%s.%N)
    n=$((2 * ${N:-50000}))
    record find "$side" "$where mount entries/s" "$(python3 -c "print(int($n / ($e - $s)))")"
  done
  "$NACRE" umount "$fresh" || "$NACRE" umount -f "$fresh"
  forms_down
  pids=()
  NACRE="$THIS"
  rm -rf "${WORK:?}/find/$side"
}

wl_write_path() {
  local side=$1 bin=$2 d="$WORK/write-path/$1" out bytes secs gx
  mkdir -p "$d/mnt"
  "$bin" up "$d/data" --mount "$d/mnt" >/dev/null
  out=$(dd if=/dev/zero of="$d/mnt/f" bs="${BS:-64k}" count="${COUNT:-4000}" conv=fsync 2>&1 | tail -1)
  bytes=$(awk '{print $1}' <<<"$out"); secs=$(awk '{print $(NF-3)}' <<<"$out")
  gx=$("$bin" ctl get_param -n 'mdt.*.md_stats' | awk '$1=="getxattr" {print $2}')
  record write-path "$side" "MiB/s" "$(python3 -c "print(f'{$bytes/$secs/1048576:.1f}')")"
  record write-path "$side" "MDS getxattr" "${gx:-0}"
  "$bin" down "$d/mnt"
  rm -rf "$d"
}

# --- the rounds -----------------------------------------------------------------------------

for wl in "${WORKLOADS[@]}"; do [ "$wl" != ring ] || ring_setup; done
for wl in "${WORKLOADS[@]}"; do [ "$wl" != mdtest ] && [ "$wl" != find ] || mdtest_setup; done
for wl in "${WORKLOADS[@]}"; do
  case "$wl" in ior-hard | ior-hard-2 | ior-easy) ior_hard_setup ;; esac
done
echo "OLD = $OLD_SPEC ($OLD)" >&2
echo "NEW = $NEW_SPEC ($NEW)" >&2
for round in $(seq "$ROUNDS"); do
  for wl in "${WORKLOADS[@]}"; do
    echo "round $round: $wl" >&2
    CUR="$OLD"; "wl_${wl//-/_}" old "$OLD"
    CUR="$NEW"; "wl_${wl//-/_}" new "$NEW"
  done
done

# med WORKLOAD SIDE MEASURE: the median of a figure over the rounds.
med() { awk -F'\t' -v w="$1" -v s="$2" -v k="$3" '$1 == w && $2 == s && $3 == k {print $4}' "$RUNS" | median; }
ratio() { python3 -c "print(f'{$1/$2:.2f}x' if $2 else '-')"; }
echo
echo "OLD = $OLD_SPEC, NEW = $NEW_SPEC; medians of $ROUNDS rounds, OLD and NEW alternating (each run: $RUNS)"
for wl in "${WORKLOADS[@]}"; do
  [ "$wl" != md-sync ] || echo "md-sync: OLD ran with --mdt-sync-on-reply, NEW with the default (reply after the journal write)"
done
echo
echo "| workload | measure | OLD | NEW | NEW/OLD |"
echo "|---|---|---:|---:|---:|"
awk -F'\t' '!seen[$1 FS $3]++ {print $1 "\t" $3}' "$RUNS" | while IFS=$'\t' read -r wl key; do
  o=$(med "$wl" old "$key"); n=$(med "$wl" new "$key")
  echo "| $wl | $key | $o | $n | $(ratio "$n" "$o") |"
done
