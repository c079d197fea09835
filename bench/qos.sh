#!/usr/bin/env bash
# Cluster-wide QoS (issue 21, step 3; docs/qos.md): mdtest as a noisy neighbour against a
# second job's IOR and stat latency, on one networked file system (MGS+MDT0 process, two OSS
# processes with one OST each, two `nacre mount` processes — a client per job — TCP), in
# one run:
#   solo     each job alone
#   shared   both at once, no rule
#   capped   both at once, the neighbour held by `nacre qos add` to 25% of its solo
#            request rate (measured in the solo phase from the MDTs' and OSTs' job_stats)
#   weighted both at once, no cap: the victim's requests weighted 8 (`--weight 8`), so
#            the servers take them before the neighbour's
#   cpu      no neighbour: instead, plain busy loops using as much of the machine's CPU
#            as the capped neighbour used on its own (measured from /proc/stat, with
#            every process of the file system), to tell what a capped neighbour costs
#            the victim in CPU alone from what it costs through the file system
# The neighbour: `nacre bench mdtest -N 4 -u -F` (job noisy.1) repeated until stopped; its
# rate is read from job_stats over the victim's run. The victim (job victim.2, its own
# mount): IOR easy (2 tasks, file per process, 1 MiB O_DIRECT transfers, SIZE each, write
# then read) and then up to SECS seconds of stat(2) by one thread on 8,000 files its mount
# has not seen (made beforehand through the other mount; the victim's mount is mounted
# again before each run, so each stat asks the MDS), rate and 99th percentile.
# The victim's phases run ROUNDS times (alternating); medians.
# Not a test: it asserts nothing.
#   bench/qos.sh [WORK_DIR]     (SECS=10 SIZE=256m ROUNDS=3)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-qos}"
SECS="${SECS:-10}"
SIZE="${SIZE:-256m}"
ROUNDS="${ROUNDS:-3}"
source "$(dirname "$0")/common.sh"
rm -rf "$WORK"; mkdir -p "$WORK/mnt" "$WORK/mnt2"
pids=()
NOISY=""
HOGS=()
down() {
  [ -n "$NOISY" ] && { kill "$NOISY" 2>/dev/null || true; wait "$NOISY" 2>/dev/null || true; }
  for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
  for m in "$WORK/mnt" "$WORK/mnt2"; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap down EXIT
net_up "$WORK/fs" qosb
SRC="$MGS@tcp:/qosb"
M="$WORK/mnt"
V="$WORK/mnt2"
"$NACRE" mount "$SRC" "$M" >/dev/null
"$NACRE" mount "$SRC" "$V" >/dev/null
# Files to stat, made through the neighbour's mount.
python3 -c '
import os, sys
for d in range(8):
    p = f"{sys.argv[1]}/st/d{d}"
    os.makedirs(p)
    for i in range(1000):
        os.close(os.open(f"{p}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))' "$M"

# requests JOB [OP]: requests of JOB (or only its OP ones) served so far, from every
# MDT's and OST's job_stats — those QoS rules cap (lock traffic, pings and recovery never
# wait for a rate, docs/qos.md).
requests() {
  "$NACRE" ctl get_param -n 'mdt.qosb-*.job_stats' 'ost.qosb-*.job_stats' | python3 -c '
import re, sys
job, op, n, cur = sys.argv[1], sys.argv[2], 0, None
for line in sys.stdin:
    m = re.match(r"- job_id:\s+(\S+)", line)
    if m:
        cur = m.group(1)
        continue
    m = re.match(r"\s+(\w+):\s+\{ samples:\s+(\d+), unit: usecs", line)
    free = m and (m.group(1).startswith("ldlm_") or m.group(1) in ("ping", "connect", "disconnect", "reopen", "replay", "replay_done"))
    if m and cur == job and op in ("", m.group(1)) and not free:
        n += int(m.group(2))
print(n)' "$1" "${2:-}"
}
noisy_start() {
  rm -rf "$M/noisy"
  SLURM_JOB_ID=noisy.1 "$NACRE" bench mdtest -n 2000 -N 4 -u -F -i 1000000 -q -d "$M/noisy" \
    >/dev/null 2>&1 &
  NOISY=$!
  sleep 3
}
noisy_stop() { kill "$NOISY" 2>/dev/null || true; wait "$NOISY" 2>/dev/null || true; NOISY=""; }
# victim PHASE: "write_MiB/s read_MiB/s stats/s stat_p99_ms" of job victim.2.
victim() {
  rm -rf "$V/ior"
  # Mounted again: nothing of the files to stat is cached.
  "$NACRE" umount "$V"
  "$NACRE" mount "$SRC" "$V" >/dev/null
  local ior st
  ior=$(SLURM_JOB_ID=victim.2 "$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N 2 -F -e --direct -q \
    --json -o "$V/ior" \
    | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))")
  st=$(SLURM_JOB_ID=victim.2 python3 -c '
import os, sys, time
d, secs = sys.argv[1], float(sys.argv[2])
names = [f"{d}/d{k}/f{i}" for i in range(1000) for k in range(8)]
lat, start = [], time.time()
for n in names:
    if time.time() - start > secs:
        break
    t = time.perf_counter()
    os.stat(n)
    lat.append(time.perf_counter() - t)
took = time.time() - start
lat.sort()
print(round(len(lat) / took), f"{lat[int(len(lat) * 0.99)] * 1000:.2f}")' "$V/st" "$SECS")
  echo "$ior $st"
}
# busy: "busy total" jiffies of all CPUs so far (/proc/stat).
busy() { awk '/^cpu / {t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t}' /proc/stat; }
# busy_share SECS: the fraction of the machine's CPU time busy over the next SECS seconds.
busy_share() {
  local a b
  a=$(busy); sleep "$1"; b=$(busy)
  python3 -c "a=[$(echo "$a" | tr ' ' ,)]; b=[$(echo "$b" | tr ' ' ,)]; print(round((b[0]-a[0])/(b[1]-a[1]), 3))"
}
# hogs_start SHARE: one busy loop per CPU, each busy SHARE of every 10 ms.
hogs_start() {
  local i
  for i in $(seq "$(nproc)"); do
    python3 -c '
import sys, time
d = float(sys.argv[1])
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.01 * d:
        pass
    time.sleep(0.01 * (1 - d))' "$1" &
    HOGS+=($!)
  done
}
hogs_stop() { for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; HOGS=(); }
# phase NAME: runs the victim beside the running neighbour; prints the row.
row() {
  local name="$1" v r0 r1 c0 c1 t0 t1
  r0=$(requests noisy.1); c0=$(requests noisy.1 create); t0=$(date +%s.%N)
  v=$(victim "$name")
  r1=$(requests noisy.1); c1=$(requests noisy.1 create); t1=$(date +%s.%N)
  echo "$name $(python3 -c "print(round(($r1 - $r0) / ($t1 - $t0)), round(($c1 - $c0) / ($t1 - $t0)))") $v"
}

# The neighbour alone: its create and request rates.
noisy_start
r0=$(requests noisy.1); c0=$(requests noisy.1 create); t0=$(date +%s.%N)
sleep "$SECS"
r1=$(requests noisy.1); c1=$(requests noisy.1 create); t1=$(date +%s.%N)
noisy_stop
solo_req=$(python3 -c "print(round(($r1 - $r0) / ($t1 - $t0)))")
solo_cre=$(python3 -c "print(round(($c1 - $c0) / ($t1 - $t0)))")
cap=$((solo_req / 4))
# The capped neighbour alone: the share of the machine's CPU it takes (with the servers'
# and its mount's work for it).
"$NACRE" qos add noisy --job 'noisy*' --ops-rate "$cap" "$SRC" >/dev/null
noisy_start
cap_cpu=$(busy_share "$SECS")
noisy_stop
"$NACRE" qos del noisy "$SRC" >/dev/null

rows=()
for _ in $(seq "$ROUNDS"); do
  rows+=("solo $solo_req $solo_cre $(victim solo)")
  noisy_start; rows+=("$(row shared)"); noisy_stop
  "$NACRE" qos add noisy --job 'noisy*' --ops-rate "$cap" "$SRC" >/dev/null
  noisy_start; rows+=("$(row capped)"); noisy_stop
  "$NACRE" qos del noisy "$SRC" >/dev/null
  "$NACRE" qos add victim --job 'victim*' --weight 8 "$SRC" >/dev/null
  noisy_start; rows+=("$(row weighted)"); noisy_stop
  "$NACRE" qos del victim "$SRC" >/dev/null
  hogs_start "$cap_cpu"; rows+=("cpu 0 0 $(victim cpu)"); hogs_stop
done
# med PHASE COLUMN: the median of a column over the rounds of a phase.
med() { printf '%s\n' "${rows[@]}" | awk -v p="$1" -v f="$2" '$1 == p {print $f}' | median; }

echo "neighbour alone: $solo_cre creates/s, $solo_req requests/s; cap: $cap requests/s"
echo "capped neighbour alone: $cap_cpu of the machine's CPU (the cpu phase's busy loops)"
echo "medians of $ROUNDS rounds"
echo
echo "| phase | neighbour requests/s | neighbour creates/s | victim IOR write MiB/s | IOR read MiB/s | stat/s | stat p99 ms |"
echo "|---|---:|---:|---:|---:|---:|---:|"
sw=$(med solo 4); sr=$(med solo 5); ss=$(med solo 6)
for phase in solo shared capped weighted cpu; do
  nr=$(med "$phase" 2); nc=$(med "$phase" 3)
  w=$(med "$phase" 4); rd=$(med "$phase" 5); st=$(med "$phase" 6); p=$(med "$phase" 7)
  if [ "$phase" = solo ]; then
    echo "| $phase | $nr | $nc | $w | $rd | $st | $p |"
  else
    echo "| $phase | $nr ($(pct "$nr" "$solo_req")) | $nc | $w ($(pct "$w" "$sw")) | $rd ($(pct "$rd" "$sr")) | $st ($(pct "$st" "$ss")) | $p |"
  fi
done
echo
echo "each round:"
printf '%s\n' "${rows[@]}"
