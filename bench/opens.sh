#!/usr/bin/env bash
# Repeated opens of the same small files (a job's tasks reading one configuration or
# Python's imports), with and without the open cache (OPEN locks, docs/locking.md
# "Opens"), on local disk, the embedded form and the networked form (an MGS+MDT server
# process, two OSS processes, a separate `nacre mount` process). Not a test: it asserts
# nothing. One process opens, reads whole and closes each of FILES files of 4 KiB, PASSES
# times over, in a loop; figures are opens per second (medians of ROUNDS) and MDT
# requests (open + close) per open. "off" is the same mount with
# `llite.FS.opencache_threshold_count=0` (on files of their own, which never get an OPEN
# lock), measured alternately with "on" (the default, 3) in each round.
#   bench/opens.sh [WORK_DIR]     (FILES=200 PASSES=20 ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-opens}"
FILES="${FILES:-200}"
PASSES="${PASSES:-20}"
ROUNDS="${ROUNDS:-3}"
forms_up "$WORK" emb opn
mkdir -p "$WORK/local"

# pid of the process serving a mount (the embedded form's server is its mount too)
mount_pid() { pgrep -f -- "$1" | head -1; }
declare -A PID=([emb]=$(mount_pid "up $WORK/emb/data") [opn]=$(mount_pid "mount $MGS@tcp:/opn"))
setthr() { "$NACRE" ctl --pid "${PID[$1]}" set_param "llite.$1.opencache_threshold_count=$2" >/dev/null; }
mdreqs() { # fsname -> open + close requests served by its MDT so far
  "$NACRE" ctl get_param -n "mdt.$1-MDT0000.md_stats" | awk '$1 == "open" || $1 == "close" {n += $2} END {print n + 0}'
}
run() { # dir -> opens per second
  python3 - "$1" "$FILES" "$PASSES" <<'PY'
import os, sys, time
d, files, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
for _ in range(passes):
    for i in range(files):
        fd = os.open(f"{d}/f{i}", os.O_RDONLY)
        os.read(fd, 8192)
        os.close(fd)
print(round(files * passes / (time.perf_counter() - t)))
PY
}
for d in "$WORK/local/d" "$WORK"/{emb,net}/mnt/{off,on}; do
  mkdir -p "$d"
  for i in $(seq 0 $((FILES - 1))); do head -c 4096 /dev/urandom > "$d/f$i"; done
done
declare -A R
measure() { # label fsname dir threshold
  local before after rate
  setthr "$2" "$4"
  before=$(mdreqs "$2")
  rate=$(run "$3")
  after=$(mdreqs "$2")
  R[$1]+="$rate $(python3 -c "print(f'{($after - $before) / ($FILES * $PASSES):.2f}')")"$'\n'
}
for _ in $(seq "$ROUNDS"); do
  R[local]+="$(run "$WORK/local/d")"$'\n'
  for f in emb opn; do
    dir=$([ $f = emb ] && echo "$WORK/emb/mnt" || echo "$WORK/net/mnt")
    measure "$f-off" "$f" "$dir/off" 0
    measure "$f-on" "$f" "$dir/on" 3
  done
done
med() { awk -v c="$2" 'NF {print $c}' <<<"${R[$1]}" | median; }
echo "FILES=$FILES PASSES=$PASSES ROUNDS=$ROUNDS (medians)"
echo
echo "| form | open cache | opens/s | MDT requests per open |"
echo "|---|---|---:|---:|"
echo "| local ext4 | | $(med local 1) | |"
for f in emb opn; do
  name=$([ $f = emb ] && echo embedded || echo networked)
  echo "| $name | off | $(med $f-off 1) | $(med $f-off 2) |"
  echo "| $name | on | $(med $f-on 1) | $(med $f-on 2) |"
done
