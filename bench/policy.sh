#!/usr/bin/env bash
# The policy engine (docs/policy.md) on the embedded form and the networked form (an
# MGS+MDT server process, two OSS processes, a separate `nacre mount` process). Not a
# test: it asserts nothing.
#   - records consumed per second by `nacre policy run --once` catching up (the whole
#     process: start, index updates committed durably, one batched StatMany per batch of
#     records, clears), for two record mixes:
#       kept:  FILES files of 4 KiB written and kept (CREAT and CLOSE: 2 records per file);
#       storm: mdtest easy, -w 4096, create, stat, remove (CREAT, CLOSE, UNLNK: 3 per file);
#     and the index's size on disk per file after "kept";
#   - a user's IOR (2 tasks, file per process, 256 MiB each, fsync) alone, beside a policy
#     run migrating COLD files of COLD_SIZE from pool flash (OST0) to capacity (OST1) with
#     no limit, and beside one limited to LIMIT per second; the policy's own MiB/s too.
# Figures are medians of ROUNDS.
#   bench/policy.sh [WORK_DIR]     (FILES=20000 COLD=16 COLD_SIZE=64M LIMIT=50M ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-policy}"
FILES="${FILES:-20000}"
COLD="${COLD:-16}"
COLD_SIZE="${COLD_SIZE:-64M}"
LIMIT="${LIMIT:-50M}"
ROUNDS="${ROUNDS:-3}"
forms_up "$WORK" ple pln
declare -A SRC=([ple]="$EMB_MGS@tcp:/ple" [pln]="$MGS@tcp:/pln")
declare -A MNT=([ple]="$WORK/emb/mnt" [pln]="$WORK/net/mnt")
for f in ple pln; do
  "$NACRE" pool new "$f.flash" >/dev/null && "$NACRE" pool add "$f.flash" OST0000 >/dev/null
  "$NACRE" pool new "$f.capacity" >/dev/null && "$NACRE" pool add "$f.capacity" OST0001 >/dev/null
done
# rules FORM STATE [LIMIT]: a rules file moving cold files of flash to capacity.
rules() {
  local r="$WORK/$1-rules.toml"
  {
    echo "fs = \"${SRC[$1]}\""
    echo "state_dir = \"$2\""
    echo "[engine]"
    [ -n "${3:-}" ] && echo "bandwidth = \"$3\""
    echo "[[rule]]"
    echo "name = \"cold-flash\""
    echo "action = \"migrate\""
    echo "pool = \"capacity\""
    echo "in_pool = [\"flash\"]"
    echo "not_accessed_for = \"1d\""
  } > "$r"
  echo "$r"
}
# consume FORM RULES: records per second of a catching-up run, and the records.
consume() {
  local t0 t1 n
  t0=$(date +%s.%N)
  "$NACRE" policy run --rules "$2" --once >/dev/null 2>&1
  t1=$(date +%s.%N)
  n=$("$NACRE" policy status --rules "$2" --json | json "d['records']")
  python3 -c "print(round($n / ($t1 - $t0)), $n)"
}
ior() { # mount -> MiB/s written
  rm -rf "$1/ior"; mkdir "$1/ior"
  "$NACRE" bench ior -w -t 1m -b 256m -N 2 -F -e -q --json -o "$1/ior/f" \
    | json "round([p for p in d['phases'] if p['op']=='write'][0]['bw_mib'])"
}
dereg_all() { # form: every changelog consumer goes (their records with them)
  local u
  for u in $("$NACRE" changelog users "${SRC[$1]}" --json | json "' '.join(x['id'] for t in d for x in t['users'])"); do
    "$NACRE" changelog deregister "${SRC[$1]}" "$u" >/dev/null
  done
}
cold_files() { # mount: COLD files of COLD_SIZE in pool flash, last accessed 2 days ago
  rm -rf "$1/cold"; mkdir "$1/cold"
  "$NACRE" setstripe -p flash "$1/cold" >/dev/null
  for i in $(seq "$COLD"); do head -c "$COLD_SIZE" /dev/zero | tr '\0' x > "$1/cold/f$i"; done
  sync
  touch -a -d '2 days ago' "$1"/cold/f*
}
beside() { # form rules -> "ior_MiB/s policy_MiB/s"
  local m="${MNT[$1]}" t0 t1 pid io
  "$NACRE" policy run --rules "$2" --once >/dev/null 2>&1   # registers, scans
  cold_files "$m"
  t0=$(date +%s.%N)
  "$NACRE" policy run --rules "$2" --once >/dev/null 2>&1 & pid=$!
  io=$(ior "$m")
  wait "$pid"
  t1=$(date +%s.%N)
  echo "$io $(python3 -c "print(round($COLD * $(numfmt --from=iec "$COLD_SIZE") / 1048576 / ($t1 - $t0)))")"
}
declare -A R
for round in $(seq "$ROUNDS"); do
  for f in ple pln; do
    m="${MNT[$f]}"
    st="$WORK/$f-state-$round"
    r=$(rules "$f" "$st")
    "$NACRE" policy run --rules "$r" --once >/dev/null 2>&1   # registers, scans
    rm -rf "$m/kept"; mkdir "$m/kept"
    python3 -c "
import os
for i in range($FILES):
    with open(os.path.join('$m/kept', 'f%d' % i), 'wb') as fh: fh.write(b'x' * 4096)"
    R[$f-kept]+="$(consume "$f" "$r")"$'\n'
    R[$f-size]+="$("$NACRE" policy status --rules "$r" --json | json "round(d['index_disk_bytes'] / max(d['files'], 1))")"$'\n'
    dereg_all "$f"
    r2=$(rules "$f" "$WORK/$f-state2-$round")
    "$NACRE" policy run --rules "$r2" --once >/dev/null 2>&1   # registers, scans
    "$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -w 4096 -q -d "$m/md" >/dev/null
    R[$f-storm]+="$(consume "$f" "$r2")"$'\n'
    dereg_all "$f"
    rm -rf "$m/kept"
    R[$f-ior]+="$(ior "$m")"$'\n'
    R[$f-free]+="$(beside "$f" "$(rules "$f" "$WORK/$f-state3-$round")")"$'\n'
    dereg_all "$f"
    R[$f-limited]+="$(beside "$f" "$(rules "$f" "$WORK/$f-state4-$round" "$LIMIT")")"$'\n'
    dereg_all "$f"
  done
done
med() { awk -v c="$2" 'NF {print $c}' <<<"${R[$1]}" | median; }
echo "FILES=$FILES COLD=$COLD COLD_SIZE=$COLD_SIZE LIMIT=$LIMIT ROUNDS=$ROUNDS (medians)"
echo
echo "| form | records/s kept (records) | records/s storm (records) | index bytes per file |"
echo "|---|---:|---:|---:|"
for f in ple pln; do
  name=$([ $f = ple ] && echo embedded || echo networked)
  echo "| $name | $(med $f-kept 1) ($(med $f-kept 2)) | $(med $f-storm 1) ($(med $f-storm 2)) | $(med $f-size 1) |"
done
echo
echo "| form | IOR alone MiB/s | IOR beside policy | policy MiB/s | IOR beside policy --bandwidth $LIMIT | policy MiB/s |"
echo "|---|---:|---:|---:|---:|---:|"
for f in ple pln; do
  name=$([ $f = ple ] && echo embedded || echo networked)
  a=$(med $f-ior 1)
  echo "| $name | $a | $(med $f-free 1) ($(pct "$(med $f-free 1)" "$a")) | $(med $f-free 2) | $(med $f-limited 1) ($(pct "$(med $f-limited 1)" "$a")) | $(med $f-limited 2) |"
done
