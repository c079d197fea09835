#!/usr/bin/env bash
# What changelogs cost and how fast they are read (crates/mds/src/changelog.rs), on the
# embedded form and the networked form (an MGS+MDT server process, two OSS processes, a
# separate `nacre mount` process). Not a test: it asserts nothing.
#   - mdtest easy (2 tasks, FILES/2 empty files each, a directory per task): creates, stats
#     and removals per second with no consumer registered ("off") and with one ("on": every
#     create, writer close and removal is recorded), measured alternately in each round;
#   - the records the "on" runs made (3 per file: CREAT, CLOSE, UNLNK), read by one
#     `nacre changelog read --json` process over the network: records per second.
# Figures are medians of ROUNDS.
#   bench/changelog.sh [WORK_DIR]     (FILES=20000 ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-changelog}"
FILES="${FILES:-20000}"
ROUNDS="${ROUNDS:-3}"
forms_up "$WORK" chl chn
declare -A SRC=([chl]="$EMB_MGS@tcp:/chl" [chn]="$MGS@tcp:/chn")
declare -A MNT=([chl]="$WORK/emb/mnt" [chn]="$WORK/net/mnt")

md_easy() { # mount dir -> "create stat remove"
  rm -rf "$1/md"
  "$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -q --json -d "$1/md" \
    | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File stat','File removal'))"
}
declare -A R
for _ in $(seq "$ROUNDS"); do
  for f in chl chn; do
    R[$f-off]+="$(md_easy "${MNT[$f]}")"$'\n'
    "$NACRE" changelog register "${SRC[$f]}" >/dev/null
    R[$f-on]+="$(md_easy "${MNT[$f]}")"$'\n'
    t0=$(date +%s.%N)
    n=$("$NACRE" changelog read "${SRC[$f]}" --json | wc -l)
    t1=$(date +%s.%N)
    R[$f-read]+="$(python3 -c "print(round($n / ($t1 - $t0)), $n)")"$'\n'
    "$NACRE" changelog deregister "${SRC[$f]}" cl1
  done
done
med() { awk -v c="$2" 'NF {print $c}' <<<"${R[$1]}" | median; }
echo "FILES=$FILES ROUNDS=$ROUNDS (medians)"
echo
echo "| form | changelog | creates/s | stats/s | removals/s | records read/s (records) |"
echo "|---|---|---:|---:|---:|---:|"
for f in chl chn; do
  name=$([ $f = chl ] && echo embedded || echo networked)
  echo "| $name | off | $(med $f-off 1) | $(med $f-off 2) | $(med $f-off 3) | |"
  echo "| $name | on | $(med $f-on 1) | $(med $f-on 2) | $(med $f-on 3) | $(med $f-read 1) ($(med $f-read 2)) |"
done
