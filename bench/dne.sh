#!/usr/bin/env bash
# Metadata scaling over MDTs (not a test; it asserts nothing). For M = 1, 2, 4 MDTs, each MDT
# in its own server process on its own loopback address (MGS + one OST in another), clients
# on the native library (no FUSE), files created, stat'ed and removed (mdtest -F):
#   1. unique directories: TASKS processes, each in its own directory made with
#      `nacre mkdir -i k%M`;
#   2. one shared directory striped over the M MDTs (`nacre mkdir -c M` + `setdirstripe -D`,
#      so mdtest's tree root inherits it), one mdtest process with TASKS tasks;
#   3. the IU-style sweep: D = 1, 2, 4 directories (placed round-robin on the MDTs), 4 tasks
#      per directory (one mdtest process each);
#   4. directory migration: a directory of FILES files (made through FUSE) moved MDT0 ->
#      MDT1 and back with `nacre migrate -m`, entries per second.
# Rates of concurrent processes are summed; tables 1, 2 and 4 are medians of ROUNDS.
#   bench/dne.sh [WORK_DIR]     (TASKS=4 FILES=5000 ROUNDS=3 MDTS="1 2 4" DIRS="1 2 4")
#   ONLY=migrate bench/dne.sh   runs table 4 alone
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-dne}"
TASKS="${TASKS:-4}"
FILES="${FILES:-5000}"
ROUNDS="${ROUNDS:-3}"
MDTS="${MDTS:-1 2 4}"
DIRS="${DIRS:-1 2 4}"
PIDS=()
MGS=""; FS=""
teardown() {
  umount -l "$WORK/mnt" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  # Servers started in a subshell are not in PIDS: find them by their target directories.
  pkill -f -- "--target $WORK/" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
trap teardown EXIT

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

# cluster M: a fresh file system with M MDTs, mounted at $WORK/mnt (for mkdir -i/-c).
cluster() {
  local m=$1 port
  teardown
  rm -rf "$WORK"; mkdir -p "$WORK/mnt"
  port=$(free_port); FS="dne$m"; MGS="127.0.0.1:$port@tcp"
  "$NACRE" mkfs --mgs --fsname "$FS" "$WORK/mgs" >/dev/null
  "$NACRE" mkfs --ost --index 0 --fsname "$FS" --mgsnode "$MGS" "$WORK/ost0" >/dev/null
  serve "127.0.0.1:$port" "$WORK/mgs" "$WORK/ost0"
  for k in $(seq 0 $((m - 1))); do
    "$NACRE" mkfs --mdt --index "$k" --fsname "$FS" --mgsnode "$MGS" "$WORK/mdt$k" >/dev/null
    serve "127.0.0.$((k + 2)):$(free_port)" "$WORK/mdt$k"
  done
  "$NACRE" mount "$MGS:/$FS" "$WORK/mnt" >/dev/null
}

# mdtest_bg OUT DIR TASKS: one mdtest process in the background.
mdtest_bg() {
  "$NACRE" bench mdtest -a NACRE --mgs "$MGS" --fsname "$FS" -d "$2" -n "$FILES" -N "$3" -F -q \
    --json > "$1" &
}

# sum FILE...: "create stat remove" rates summed over mdtest JSON reports.
sum() {
  python3 - "$@" <<'EOF'
import json, sys
tot = {}
for f in sys.argv[1:]:
    d = json.load(open(f))
    for name, items, secs, rate in d["iterations"][0]["phases"]:
        tot[name] = tot.get(name, 0) + rate
print(round(tot["File creation"]), round(tot["File stat"]), round(tot["File removal"]))
EOF
}

unique() { # M
  cluster "$1"
  local tasks=()
  for t in $(seq 0 $((TASKS - 1))); do
    "$NACRE" mkdir -i $((t % $1)) "$WORK/mnt/d$t"
    mdtest_bg "$WORK/u$t.json" "/d$t" 1; tasks+=($!)
  done
  wait "${tasks[@]}"
  sum "$WORK"/u*.json
}

shared() { # M
  cluster "$1"
  "$NACRE" mkdir -c "$1" -i 0 "$WORK/mnt/shared"
  "$NACRE" setdirstripe -D -c "$1" -i 0 "$WORK/mnt/shared"
  mdtest_bg "$WORK/s.json" /shared "$TASKS"; wait $!
  sum "$WORK/s.json"
}

sweep() { # M D
  cluster "$1"
  local tasks=()
  for k in $(seq 0 $(($2 - 1))); do
    "$NACRE" mkdir -i $((k % $1)) "$WORK/mnt/w$k"
    mdtest_bg "$WORK/w$k.json" "/w$k" 4; tasks+=($!)
  done
  wait "${tasks[@]}"
  sum "$WORK"/w*.json
}

# table TITLE FN: a table over $MDTS of medians of ROUNDS runs of FN M.
table() {
  local title=$1 fn=$2 first=""
  echo "## $title"
  echo
  printf "| %-6s | %10s | %10s | %10s |\n" "MDTs" "create/s" "stat/s" "remove/s"
  printf "| %-6s | %10s | %10s | %10s |\n" "---" "---:" "---:" "---:"
  for m in $MDTS; do
    : > "$WORK.rounds"
    for _ in $(seq "$ROUNDS"); do "$fn" "$m" >> "$WORK.rounds"; done
    local c s r
    c=$(awk '{print $1}' "$WORK.rounds" | median)
    s=$(awk '{print $2}' "$WORK.rounds" | median)
    r=$(awk '{print $3}' "$WORK.rounds" | median)
    printf "| %-6s | %10s | %10s | %10s |\n" "$m" "$c" "$s" "$r"
    [ -z "$first" ] && first=$c
    last=$c
  done
  rm -f "$WORK.rounds"
  echo
  echo "Create scaling, most MDTs vs one: $(python3 -c "print(f'{$last/$first:.2f}x')")."
  echo
}

# migration: seconds to move a directory of FILES files MDT0 -> MDT1, then back.
migration() {
  cluster 2
  local d="$WORK/mnt/m" t0 t1 t2
  mkdir "$d"
  (cd "$d" && for i in $(seq "$FILES"); do : > "f$i"; done)
  t0=$(date +%s.%N)
  "$NACRE" migrate -m 1 "$d" >/dev/null
  t1=$(date +%s.%N)
  "$NACRE" migrate -m 0 "$d" >/dev/null
  t2=$(date +%s.%N)
  [ "$(ls "$d" | wc -l)" = "$FILES" ] || { echo "migration lost entries" >&2; exit 1; }
  python3 -c "print(round($FILES/($t1-$t0)), round($FILES/($t2-$t1)))"
}

migration_table() {
  echo "## Directory migration ($FILES files, nacre migrate -m, entries/s, median of $ROUNDS)"
  echo
  : > "$WORK.rounds"
  for _ in $(seq "$ROUNDS"); do migration >> "$WORK.rounds"; done
  echo "| MDT0 -> MDT1 | MDT1 -> MDT0 |"
  echo "| ---: | ---: |"
  echo "| $(awk '{print $1}' "$WORK.rounds" | median) | $(awk '{print $2}' "$WORK.rounds" | median) |"
  rm -f "$WORK.rounds"
  echo
}

echo "# Metadata over MDTs ($(date -u +%F), $(nproc) cores, $FILES files per task, medians of $ROUNDS)"
echo
if [ "${ONLY:-}" = migrate ]; then
  migration_table
  exit 0
fi
table "Unique directories ($TASKS processes, one directory each, placed round-robin)" unique
table "One shared directory striped over the MDTs ($TASKS tasks)" shared
echo "## IU-style sweep: directories x 4 tasks each, create/s (one run each)"
echo
printf "| %-6s |" "MDTs"; for d in $DIRS; do printf " %8s |" "$d dirs"; done; echo
printf "| %-6s |" "---"; for d in $DIRS; do printf " %8s |" "---:"; done; echo
for m in $MDTS; do
  printf "| %-6s |" "$m"
  for d in $DIRS; do
    sweep "$m" "$d" > "$WORK.sweep"
    printf " %8s |" "$(awk '{print $1}' "$WORK.sweep")"
  done
  echo
done
rm -f "$WORK.sweep"
echo
migration_table
