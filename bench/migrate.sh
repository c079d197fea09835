#!/usr/bin/env bash
# Online migration throughput (docs/migrate.md) against `cp` of the same files on the same
# machine, on the embedded form and the networked form (an MGS+MDT server process, two
# OSS processes, a separate `nacre mount` process). Not a test: it asserts nothing.
# FILES files of SIZE each are written into pool `flash` (OST0), then:
#   - migrate: `nacre migrate -p capacity DIR` (to OST1), MiB/s from its --json summary;
#   - cp:      `cp -r DIR DIR2` into a directory of pool `capacity`, then sync;
#   - limited: `nacre migrate --bandwidth LIMIT` back to `flash` (the limit holds?).
# Figures are medians of ROUNDS.
#   bench/migrate.sh [WORK_DIR]     (FILES=16 SIZE=32M LIMIT=100M ROUNDS=3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="${1:-/var/tmp/nacre-migrate}"
FILES="${FILES:-16}"
SIZE="${SIZE:-32M}"
LIMIT="${LIMIT:-100M}"
ROUNDS="${ROUNDS:-3}"
forms_up "$WORK" mge mgn
declare -A MNT=([mge]="$WORK/emb/mnt" [mgn]="$WORK/net/mnt")
for f in mge mgn; do
  "$NACRE" pool new "$f.flash" >/dev/null && "$NACRE" pool add "$f.flash" OST0000 >/dev/null
  "$NACRE" pool new "$f.capacity" >/dev/null && "$NACRE" pool add "$f.capacity" OST0001 >/dev/null
done
mib() { python3 -c "import sys; print(round($1 / 1048576 / $2))"; }
bytes=$(( FILES * $(numfmt --from=iec "$SIZE") ))
declare -A R
for _ in $(seq "$ROUNDS"); do
  for f in mge mgn; do
    m="${MNT[$f]}"
    rm -rf "$m/src" "$m/dst"; mkdir "$m/src" "$m/dst"
    "$NACRE" setstripe -p flash "$m/src" >/dev/null
    "$NACRE" setstripe -p capacity "$m/dst" >/dev/null
    for i in $(seq "$FILES"); do head -c "$SIZE" /dev/urandom > "$m/src/f$i"; done
    sync
    R[$f-migrate]+="$("$NACRE" migrate -p capacity --json "$m/src" | json "round(d['mib_per_s'])")"$'\n'
    t0=$(date +%s.%N); cp -r "$m/src/." "$m/dst/"; sync; t1=$(date +%s.%N)
    R[$f-cp]+="$(mib "$bytes" "($t1 - $t0)")"$'\n'
    R[$f-limited]+="$("$NACRE" migrate -p flash --bandwidth "$LIMIT" --json "$m/src" | json "round(d['mib_per_s'])")"$'\n'
  done
done
med() { awk 'NF {print $1}' <<<"${R[$1]}" | median; }
echo "FILES=$FILES SIZE=$SIZE LIMIT=$LIMIT ROUNDS=$ROUNDS (medians, MiB/s)"
echo
echo "| form | nacre migrate | cp -r + sync | migrate / cp | nacre migrate --bandwidth $LIMIT |"
echo "|---|---:|---:|---:|---:|"
for f in mge mgn; do
  name=$([ $f = mge ] && echo embedded || echo networked)
  echo "| $name | $(med $f-migrate) | $(med $f-cp) | $(pct "$(med $f-migrate)" "$(med $f-cp)") | $(med $f-limited) |"
done
