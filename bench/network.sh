#!/usr/bin/env bash
# The network layer measured on one machine (not a test; it asserts nothing):
#  1. bulk RPCs (nacre selftest brw_write / brw_read) over loopback against raw TCP moving the
#     same message sizes in the same run (bench/rawtcp.py), one connection each;
#  2. small-RPC rate of a service (selftest null: queue, partition, service thread) with 1 and
#     2 CPU partitions, two client processes;
#  3. two rails vs one: two network namespaces joined by two veth pairs, each rate-limited with
#     tc (RATE, default 400mbit), selftest brw_write with and without discovery.
# Figures 1 and 2 are medians of REPS runs (default 3), raw and RPC runs interleaved, as this
# shared 2-core VM's loopback rate drifts by tens of percent from run to run.
#   bench/network.sh [SECS]          (RATE=400mbit SIZES="65536 1048576 4194304" REPS=3)
set -euo pipefail
SECS="${1:-5}"
RATE="${RATE:-400mbit}"
SIZES="${SIZES:-65536 1048576 4194304}"
REPS="${REPS:-3}"
source "$(dirname "$0")/common.sh"
WORK=$(mktemp -d /var/tmp/nacre-net.XXXX)
ID=$$
cleanup() {
  "$NACRE" down "$WORK/mnt" >/dev/null 2>&1 || true
  for ns in "nbA$ID" "nbB$ID"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  done
  sleep 0.5
  ip netns del "nbA$ID" 2>/dev/null || true
  ip netns del "nbB$ID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$((20000 + ID % 20000))
mkdir -p "$WORK/mnt"
"$NACRE" up "$WORK/data" --mount "$WORK/mnt" --osts 1 --fsname netb --listen "127.0.0.1:$PORT" >/dev/null
NID="127.0.0.1:$PORT@tcp"

echo "# Network layer ($(date -u +%F), $(nproc) cores, ${SECS} s per run, medians of $REPS runs)"
echo
echo "## Bulk RPCs vs raw TCP over loopback (one connection, 8 messages in flight for RPCs)"
printf "| %-10s | %-6s | %12s | %12s | %6s |\n" "size" "dir" "raw TCP MiB/s" "RPC MiB/s" "ratio"
printf "| %-10s | %-6s | %12s | %12s | %6s |\n" "---" "---" "---:" "---:" "---:"
for size in $SIZES; do
  for dir in write read; do
    raws=""; rpcs=""
    for _ in $(seq "$REPS"); do
      raws="$raws $(python3 bench/rawtcp.py "$size" 1 "$SECS" "$dir")"
      rpcs="$rpcs $("$NACRE" selftest --to "$NID" --test "brw_$dir" --size "$size" \
            --concurrency 8 --duration "$SECS" --json | json "round(d[0]['mib_per_s'])")"
    done
    raw=$(echo $raws | tr ' ' '\n' | median)
    rpc=$(echo $rpcs | tr ' ' '\n' | median)
    printf "| %-10s | %-6s | %12s | %12s | %6s |\n" "$size" "$dir" "$raw" "$rpc" "$(pct "$rpc" "$raw")"
  done
done
raw8=$(python3 bench/rawtcp.py 1048576 8 "$SECS" write)
echo
echo "Raw TCP with 8 connections of 1 MiB messages: $raw8 MiB/s (what the loopback itself allows)."
nock=$("$NACRE" selftest --to "$NID" --test brw_write --size 1M --concurrency 8 --duration "$SECS" \
       --checksum false --json | json "round(d[0]['mib_per_s'])")
echo "brw_write 1 MiB without bulk checksums: $nock MiB/s."
"$NACRE" down "$WORK/mnt" >/dev/null

echo
echo "## Small RPCs through a service (selftest null), 2 client processes x 8 in flight"
printf "| %-22s | %10s |\n" "server partitions" "RPC/s"
printf "| %-22s | %10s |\n" "---" "---:"
for n in 1 2; do
  "$NACRE" up "$WORK/data$n" --mount "$WORK/mnt" --osts 1 --fsname netb --listen "127.0.0.1:$PORT" \
    --cpu-npartitions "$n" >/dev/null
  totals=""
  for _ in $(seq "$REPS"); do
    for c in 1 2; do
      "$NACRE" selftest --to "$NID" --test null --concurrency 8 --duration "$SECS" --json \
        > "$WORK/null$c.json" &
    done
    wait
    totals="$totals $(python3 -c "import json,sys; print(round(sum(p['rpc_per_s'] for f in sys.argv[1:] for p in json.load(open(f)))))" "$WORK"/null1.json "$WORK"/null2.json)"
  done
  total=$(echo $totals | tr ' ' '\n' | median)
  printf "| %-22s | %10s |\n" "cpu_npartitions=$n" "$total"
  "$NACRE" down "$WORK/mnt" >/dev/null
done

echo
echo "## Two rails vs one (two namespaces, two veth pairs, each limited to $RATE by tc)"
A="nbA$ID"; B="nbB$ID"
ip netns add "$A"; ip netns add "$B"
for k in 0 1; do
  ip link add "va$ID$k" type veth peer name "vb$ID$k"
  ip link set "va$ID$k" netns "$A"; ip link set "vb$ID$k" netns "$B"
  ip netns exec "$A" ip link set "va$ID$k" name "rail$k"
  ip netns exec "$B" ip link set "vb$ID$k" name "rail$k"
  ip netns exec "$A" ip addr add "10.99.$k.1/24" dev "rail$k"
  ip netns exec "$B" ip addr add "10.99.$k.2/24" dev "rail$k"
  for ns in "$A" "$B"; do
    ip netns exec "$ns" ip link set "rail$k" up
    ip netns exec "$ns" tc qdisc add dev "rail$k" root tbf rate "$RATE" burst 256kb latency 50ms
  done
done
ip netns exec "$A" ip link set lo up; ip netns exec "$B" ip link set lo up
"$NACRE" mkfs --mgs --fsname netb "$WORK/mgs" >/dev/null
ip netns exec "$A" "$NACRE" server --listen 10.99.0.1:988 --networks "tcp(rail0,rail1)" \
  --target "$WORK/mgs" > "$WORK/server.log" 2>&1 &
for _ in $(seq 50); do grep -q serving "$WORK/server.log" && break; sleep 0.1; done
printf "| %-30s | %10s |\n" "client" "MiB/s"
printf "| %-30s | %10s |\n" "---" "---:"
one=$(ip netns exec "$B" "$NACRE" selftest --to 10.99.0.1@tcp --test brw_write --size 1M \
      --concurrency 8 --duration "$SECS" --discovery false --json | json "round(d[0]['mib_per_s'])")
two=$(ip netns exec "$B" "$NACRE" selftest --to 10.99.0.1@tcp --test brw_write --size 1M \
      --concurrency 8 --duration "$SECS" --json | json "round(d[0]['mib_per_s'])")
printf "| %-30s | %10s |\n" "one rail (--discovery false)" "$one"
printf "| %-30s | %10s |\n" "two rails (discovered)" "$two"
echo
echo "Two rails / one rail: $(python3 -c "print(f'{$two/$one:.2f}x')")"
