#!/usr/bin/env bash
# Where the time of one synchronous 4 KiB read goes, through each front end of the networked
# form (two OSS processes, a separate `nacre mount`, TCP): random 4 KiB O_DIRECT reads at
# queue depth 1, one thread, through FUSE (fio, psync), LD_PRELOAD (the same fio with
# libnacre_preload.so) and the node API's rings (examples/c/ringbench.c). Rounds alternate
# the front ends on the same servers. For each run: reads/s, the time of one read
# (1 / reads/s), and of that time what the OSS's `ost_io` threads spent serving a read
# (`busy`: the disk read and its checks) and what a read waited in their queue for a thread
# (`queue`), from `ost.OSS.ost_io.partition_stats` cleared before the run. The rest
# (`outside`) is the client, the network both ways and the OSS's network thread.
#
# Beside them, `nacre selftest` from this machine to one OSS at one RPC in flight: `ping`
# (the network layer's round trip, answered by the OSS's network thread) and `null` (an
# empty RPC through a service thread: the round trip plus the queue's hand-off). A read
# For scale, `raw`: a plain TCP round trip between two processes of this machine (Python,
# blocking sockets, no protocol at all). A read
# sent by the node's client itself could take no less than `busy + null`, with nothing
# between the application and the client at all.
#
# The last lines are the most any front end could gain over FUSE at queue depth 1: if all
# of `outside` cost nothing (FUSE's time over `busy + queue`), and if the application were
# the node's client itself (FUSE's time over `busy + null`): ceilings for work on the
# client side, which FUSE and the other front ends share the OSS with.
# Not a test: it asserts nothing.
#   bench/qd1.sh [WORK_DIR]    (ROUNDS=3 SECS=5 SIZE_MIB=512)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-qd1}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-5}"
SIZE_MIB="${SIZE_MIB:-512}"
source "$(dirname "$0")/common.sh"
cargo build --release -q -p nacre-capi -p nacre-preload
PRELOAD="$CARGO_TARGET_DIR/release/libnacre_preload.so"
net_form_up "$WORK" qdone
M="$WORK/net/mnt"
RB="$WORK/ringbench"
build_ringbench "$RB"
"$NACRE" setstripe -c 2 -S 1M "$M/ring.dat"
"$NACRE" setstripe -c 2 -S 1M "$M/fio.dat"
"$RB" "$M" ring.dat write 1048576 32 1 "$SIZE_MIB" 2 >/dev/null
fio --name=lay --filename="$M/fio.dat" --rw=write --bs=1M --direct=1 --size="${SIZE_MIB}M" \
  --output-format=json >/dev/null 2>&1

# oss_stats: "requests busy_secs wait_secs" of ost_io, both OSS processes, every partition.
oss_stats() {
  for p in "${pids[1]}" "${pids[2]}"; do
    "$NACRE" ctl --pid "$p" get_param ost.OSS.ost_io.partition_stats
  done | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {r += $6; b += $7; w += $8} END {print r, b, w}'
}
clear_stats() {
  for p in "${pids[1]}" "${pids[2]}"; do
    "$NACRE" ctl --pid "$p" set_param ost.OSS.ost_io.partition_stats=0 >/dev/null
  done
}
# run FRONT: reads/s of one run through FRONT (fuse, preload or rings).
run() {
  case "$1" in
    rings) "$RB" "$M" ring.dat randread 4096 1 1 "$SIZE_MIB" "$SECS" | json "d['ops_s']" ;;
    *)
      local pre=""
      [ "$1" = preload ] && pre="$PRELOAD"
      LD_PRELOAD="$pre" fio --name=q --filename="$M/fio.dat" --rw=randread --bs=4k --direct=1 \
        --ioengine=psync --size="${SIZE_MIB}M" --time_based --runtime="$SECS" \
        --output-format=json 2>/dev/null | json "d['jobs'][0]['read']['iops']"
      ;;
  esac
}

# selftest TEST: the round trip in microseconds of TEST RPCs to the first OSS, one in flight.
selftest() {
  "$NACRE" selftest --to "${OSS_NIDS[0]}" --test "$1" --concurrency 1 --duration "$SECS" --discovery false --json -q \
    | json "round(1e6 / sum(p['rpc_per_s'] for p in d))"
}

# raw_rtt: a plain TCP round trip between two processes over loopback, in microseconds.
raw_rtt() {
  python3 - "$SECS" <<'PY'
import os, socket, sys, time
secs = float(sys.argv[1])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
if os.fork() == 0:
    c, _ = srv.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (d := c.recv(64)):
        c.sendall(d)
    os._exit(0)
s = socket.create_connection(srv.getsockname())
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n, start = 0, time.time()
while time.time() - start < secs:
    s.sendall(b"x" * 48)
    s.recv(64)
    n += 1
s.close()
os.wait()
print(round((time.time() - start) * 1e6 / n))
PY
}

echo "random 4 KiB O_DIRECT reads, queue depth 1, one thread, networked form, ${SECS}s a run"
printf "%-8s %8s %9s %9s %10s %11s\n" front reads/s read_us busy_us queue_us outside_us
declare -A lat busy queue
pings=""; nulls=""
for r in $(seq "$ROUNDS"); do
  p=$(selftest ping); n=$(selftest null); t=$(raw_rtt)
  printf "%-8s %8s %9s   (one in flight: selftest ping %s us, null %s us; raw TCP %s us)\n" \
    selftest - - "$p" "$n" "$t"
  pings+="$p "; nulls+="$n "
  for f in fuse preload rings; do
    clear_stats
    ops=$(run "$f")
    read -r n b w <<<"$(oss_stats)"
    read -r l bu qu o <<<"$(python3 -c "
ops, n, b, w = $ops, $n, $b, $w
l = 1e6 / ops
bu, qu = b / n * 1e6, w / n * 1e6
print(f'{l:.0f} {bu:.0f} {qu:.0f} {l - bu - qu:.0f}')")"
    printf "%-8s %8.0f %9s %9s %10s %11s\n" "$f" "$ops" "$l" "$bu" "$qu" "$o"
    lat[$f]+="$l "; busy[$f]+="$bu "; queue[$f]+="$qu "
  done
done
python3 -c "
import statistics as s
f = s.median([float(x) for x in '${lat[fuse]}'.split()])
p = s.median([float(x) for x in '${lat[preload]}'.split()])
g = s.median([float(x) for x in '${lat[rings]}'.split()])
oss = s.median([float(x) for x in '${busy[fuse]} ${busy[preload]} ${busy[rings]}'.split()]) \
    + s.median([float(x) for x in '${queue[fuse]} ${queue[preload]} ${queue[rings]}'.split()])
print(f'medians: FUSE {f:.0f} us, LD_PRELOAD {p:.0f} us ({f / p:.2f}x FUSE), rings {g:.0f} us ({f / g:.2f}x FUSE)')
busy = s.median([float(x) for x in '${busy[fuse]} ${busy[preload]} ${busy[rings]}'.split()])
null = s.median([float(x) for x in '$nulls'.split()])
ping = s.median([float(x) for x in '$pings'.split()])
print(f'selftest medians: ping {ping:.0f} us, null {null:.0f} us')
print(f'ceiling with nothing outside the OSS threads: FUSE {f:.0f} us / OSS {oss:.0f} us = {f / oss:.2f}x')
print(f'ceiling with the application as the node client: FUSE {f:.0f} us / (busy {busy:.0f} + null {null:.0f} us) = {f / (busy + null):.2f}x')"
