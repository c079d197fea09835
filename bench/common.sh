# Sourced by the bench scripts: builds nacre (dependencies installed by the project) and
# defines the helpers they share. Sets NACRE to the binary.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
./scripts/install-deps.sh >/dev/null
cargo build --release -p nacre-cli -q
NACRE="$CARGO_TARGET_DIR/release/nacre"
# The benchmarks' file systems are keyless (`mkfs --no-key`, servers `--insecure`), as their
# figures always were; bench/security.sh measures what keys cost. Unset it to run keyed.
export NACRE_INSECURE="${NACRE_INSECURE-1}"

# json EXPR: evaluates a Python expression over the JSON document on stdin (`d`).
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# pct A B: A as a percentage of B ('-' when B is 0).
pct() { python3 -c "print(f'{$1/$2*100:.0f}%' if $2 else '-')"; }
# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# fio_bw DIR RW SIZE JOBS: sequential 1 MiB O_DIRECT fio bandwidth in MiB/s.
fio_bw() {
  fio --name=seq --directory="$1" --rw="$2" --bs=1m --size="$3" --numjobs="$4" --direct=1 \
      --ioengine=psync --group_reporting --output-format=json 2>/dev/null \
    | json "round(d['jobs'][0]['$([ "$2" = read ] && echo read || echo write)']['bw']/1024)"
}

# free_port ADDR: a TCP port free on ADDR now.
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('$1', 0)); print(s.getsockname()[1])"; }
# wait_serving LOG: waits until the server logging to LOG serves (fails after 10 s).
wait_serving() {
  for _ in $(seq 200); do grep -q serving "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "server did not start: $(cat "$1")" >&2; return 1
}
# net_up DIR FSNAME: the networked form under DIR — an MGS+MDT0 server process on 127.0.0.1
# and two OSS processes (127.0.0.2, .3) with OSTS_PER_OSS OSTs each (default 1: ost0 on the
# first, ost1 on the second; with 2, ost0 and ost1 on the first, ost2 and ost3 on the second)
# (OSS_ARGS: more `nacre server` options for them, e.g. "--oss-threads-min 16";
# SERVER_PREFIX: a command the server processes run under, e.g. "taskset -c 1"). Sets MGS
# (its address) and OSS_NIDS (the two OSS processes' NIDs) and adds the server pids to the
# array `pids` (the caller kills them).
net_up() {
  local dir="$1" fs="$2" i j addr per="${OSTS_PER_OSS:-1}" targets
  MGS="127.0.0.1:$(free_port 127.0.0.1)"
  "$NACRE" mkfs --mgs --fsname "$fs" "$dir/mgs" >/dev/null
  "$NACRE" mkfs --mdt --index 0 --fsname "$fs" --mgsnode "$MGS@tcp" "$dir/mdt0" >/dev/null
  for i in $(seq 0 $((2 * per - 1))); do
    "$NACRE" mkfs --ost --index "$i" --fsname "$fs" --mgsnode "$MGS@tcp" "$dir/ost$i" >/dev/null
  done
  ${SERVER_PREFIX:-} "$NACRE" server --listen "$MGS" --target "$dir/mgs" --target "$dir/mdt0" \
    > "$dir/mds.log" 2>&1 &
  pids+=($!); wait_serving "$dir/mds.log"
  OSS_NIDS=()
  for i in 0 1; do
    addr="127.0.0.$((i + 2))"
    addr="$addr:$(free_port "$addr")"
    targets=()
    for j in $(seq 0 $((per - 1))); do targets+=(--target "$dir/ost$((i * per + j))"); done
    ${SERVER_PREFIX:-} "$NACRE" server --listen "$addr" "${targets[@]}" ${OSS_ARGS:-} \
      > "$dir/oss$i.log" 2>&1 &
    pids+=($!); wait_serving "$dir/oss$i.log"
    OSS_NIDS+=("$addr@tcp")
  done
}
# net_form_up WORK FS: the networked form alone (net_up under WORK/net, mounted by a
# separate `nacre mount` at WORK/net/mnt, run under CLIENT_PREFIX if set), taken down when
# the script exits.
net_form_up() {
  local work="$1" fs="$2"
  rm -rf "$work"; mkdir -p "$work/net/mnt"
  pids=()
  FORMS_WORK="$work"
  trap forms_down EXIT
  net_up "$work/net" "$fs"
  ${CLIENT_PREFIX:-} "$NACRE" mount "$MGS@tcp:/$fs" "$work/net/mnt" ${MOUNT_ARGS:-} >/dev/null
}
# forms_up WORK EMB_FS NET_FS: the networked form (net_form_up) and the embedded form
# (`nacre up`, 2 OSTs, mounted at WORK/emb/mnt, its MGS at EMB_MGS), both taken down when
# the script exits.
forms_up() {
  local work="$1" emb="$2" net="$3"
  net_form_up "$work" "$net"
  mkdir -p "$work/emb/mnt"
  EMB_MGS="127.0.0.1:$(free_port 127.0.0.1)"
  "$NACRE" up "$work/emb/data" --mount "$work/emb/mnt" --osts 2 --fsname "$emb" \
    --listen "$EMB_MGS" >/dev/null
}
forms_down() {
  local w="$FORMS_WORK"
  mountpoint -q "$w/net/mnt" && { "$NACRE" umount "$w/net/mnt" || "$NACRE" umount -f "$w/net/mnt"; }
  "$NACRE" down "$w/emb/mnt" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Gone before the next run picks its ports (one still listening on a port the next MGS
  # was given answered its mount: "file system 'cmpnew' has no MDT0 registered").
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  return 0
}
# build_ringbench OUT: builds examples/c/ringbench.c against libnacre.so at OUT.
build_ringbench() {
  cc -O2 -o "$1" examples/c/ringbench.c \
    $(PKG_CONFIG_PATH="$CARGO_TARGET_DIR/release/pkgconfig" pkg-config --cflags --libs nacre) -lpthread
}
# survey_osts DIR IN_FLIGHT: "write read" MiB/s of the OSTs DIR/ost0 and DIR/ost1 alone
# (`nacre bench survey`, under SERVER_PREFIX if set) with IN_FLIGHT 1 MiB requests in
# flight: one stream on ost0 for 1, else IN_FLIGHT/2 streams per OST (at most 16).
survey_osts() {
  local per=$(( $2 / 2 )) out osts=(--ost "$1/ost0" --ost "$1/ost1")
  [ "$per" -gt 16 ] && per=16
  if [ "$2" -eq 1 ]; then per=1 osts=(--ost "$1/ost0"); fi
  out=$(${SERVER_PREFIX:-} "$NACRE" bench survey "${osts[@]}" -o "$per" -t "$per" -r 1M \
    -s "$(( 512 / per ))M" --json)
  for op in write read; do json "round([p for p in d if p['op']=='$op'][0]['total_mib'])" <<<"$out"; done | xargs
}
# cpu_ticks: the machine's busy CPU time so far, in clock ticks (user, nice, system, irq,
# softirq of /proc/stat).
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
# proc_ticks PIDS...: user+system clock ticks these processes used so far.
proc_ticks() {
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$((t + $(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat")))
  done
  echo "$t"
}
# network_alone RW IN_FLIGHT: MiB/s of `nacre selftest` bulk RPCs of 1 MiB (brw_read or
# brw_write, SECS seconds, under CLIENT_PREFIX if set) to the OSS processes of net_up: the
# network path with no disk and no file system. One to the first OSS for 1, else half of
# IN_FLIGHT to each.
network_alone() {
  local per=$(( $2 / 2 )) to="${OSS_NIDS[0]},${OSS_NIDS[1]}"
  if [ "$2" -eq 1 ]; then per=1 to="${OSS_NIDS[0]}"; fi
  ${CLIENT_PREFIX:-} "$NACRE" selftest --to "$to" --test "brw_$1" --size 1M --concurrency "$per" \
      --duration "${SECS:-5}" --discovery false --json -q \
    | json "round(sum(p['mib_per_s'] for p in d))"
}
