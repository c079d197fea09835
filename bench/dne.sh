#!/usr/bin/env bash
# Metadata scaling over MDTs (not a test; it asserts nothing): for M = 1, 2, 4 MDTs, each MDT
# in its own server process on its own loopback address (MGS + one OST in another), TASKS
# client processes (native library, no FUSE) each create, stat and remove FILES files in its
# own directory; directory k is made with `nacre mkdir -i k%M`, so the tasks' directories are
# spread over the MDTs. Rates are summed over the tasks (they run at once), medians of ROUNDS.
#   bench/dne.sh [WORK_DIR]        (TASKS=4 FILES=5000 ROUNDS=3 MDTS="1 2 4")
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-dne}"
TASKS="${TASKS:-4}"
FILES="${FILES:-5000}"
ROUNDS="${ROUNDS:-3}"
MDTS="${MDTS:-1 2 4}"
PIDS=()
cleanup() {
  "$NACRE" umount "$WORK/mnt" >/dev/null 2>&1 || umount -l "$WORK/mnt" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# serve ADDR TARGET...: a server process in the background, waiting until it serves.
serve() {
  local addr=$1; shift
  local args=(server --listen "$addr")
  for t in "$@"; do args+=(--target "$t"); done
  "$NACRE" "${args[@]}" > "$WORK/server-$addr.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q serving "$WORK/server-$addr.log" && return; sleep 0.1; done
  echo "server at $addr did not start" >&2; exit 1
}

# run M: one round with M MDTs; prints "create stat remove" summed over the tasks.
run() {
  local m=$1 port fs
  cleanup; PIDS=()
  rm -rf "$WORK"; mkdir -p "$WORK/mnt"
  port=$((30000 + RANDOM % 20000)); fs="dne$m"
  local mgs="127.0.0.1:$port@tcp"
  "$NACRE" mkfs --mgs --fsname "$fs" "$WORK/mgs" >/dev/null
  "$NACRE" mkfs --ost --index 0 --fsname "$fs" --mgsnode "$mgs" "$WORK/ost0" >/dev/null
  serve "127.0.0.1:$port" "$WORK/mgs" "$WORK/ost0"
  for k in $(seq 0 $((m - 1))); do
    "$NACRE" mkfs --mdt --index "$k" --fsname "$fs" --mgsnode "$mgs" "$WORK/mdt$k" >/dev/null
    serve "127.0.0.$((k + 2)):$((port + 1 + k))" "$WORK/mdt$k"
  done
  "$NACRE" mount "$mgs:/$fs" "$WORK/mnt" >/dev/null
  for t in $(seq 0 $((TASKS - 1))); do
    "$NACRE" mkdir -i $((t % m)) "$WORK/mnt/d$t"
  done
  local tasks=()
  for t in $(seq 0 $((TASKS - 1))); do
    "$NACRE" bench mdtest -a NACRE --mgs "$mgs" --fsname "$fs" -d "/d$t" -n "$FILES" -F -q \
      --json > "$WORK/task$t.json" &
    tasks+=($!)
  done
  wait "${tasks[@]}"
  python3 - "$WORK"/task*.json <<'EOF'
import json, sys
tot = {}
for f in sys.argv[1:]:
    d = json.load(open(f))
    for name, items, secs, rate in d["iterations"][0]["phases"]:
        tot[name] = tot.get(name, 0) + rate
print(round(tot["File creation"]), round(tot["File stat"]), round(tot["File removal"]))
EOF
}

echo "# Metadata over MDTs ($(date -u +%F), $(nproc) cores, $TASKS tasks x $FILES files, unique directories, medians of $ROUNDS)"
echo
printf "| %-6s | %10s | %10s | %10s |\n" "MDTs" "create/s" "stat/s" "remove/s"
printf "| %-6s | %10s | %10s | %10s |\n" "---" "---:" "---:" "---:"
declare -A first
for m in $MDTS; do
  : > "$WORK.rounds"
  for _ in $(seq "$ROUNDS"); do run "$m" >> "$WORK.rounds"; done
  c=$(awk '{print $1}' "$WORK.rounds" | median)
  s=$(awk '{print $2}' "$WORK.rounds" | median)
  r=$(awk '{print $3}' "$WORK.rounds" | median)
  printf "| %-6s | %10s | %10s | %10s |\n" "$m" "$c" "$s" "$r"
  if [ -z "${first[c]:-}" ]; then first[c]=$c; first[s]=$s; first[r]=$r; fi
  last="$c $s $r"
done
rm -f "$WORK.rounds"
read -r c s r <<< "$last"
echo
echo "Scaling, most MDTs vs one: create $(python3 -c "print(f'{$c/${first[c]}:.2f}x')"), stat $(python3 -c "print(f'{$s/${first[s]}:.2f}x')"), remove $(python3 -c "print(f'{$r/${first[r]}:.2f}x')")."
