#!/usr/bin/env bash
# `ls -l` of one directory of FILES files: a listing, then an lstat of every name (what
# `ls -l`, `find -ls` and backup scans do), timed as entries per second, on
#   local      the local file system (ext4 under /var/tmp)
#   embedded   `nacre up` (one process, its own FUSE mount)
#   networked  MGS+MDT0 server process, two OSS processes, a `nacre mount` process that did
#              not make the files
# each with readdirplus (the default: attributes and locks come with the listing) and
# without (`readdirplus=false`: a lookup per name). "cold": after dropping the kernel's
# dentry and inode caches (every attribute is asked for again); "warm": right after a cold
# scan. Medians of ROUNDS. Not a test: it asserts nothing.
#   bench/listing.sh [WORK_DIR]     (ROUNDS=3 FILES=10000)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-listing}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-10000}"
source "$(dirname "$0")/common.sh"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/emb-plus/mnt" "$WORK/emb-plain/mnt"
pids=()
N="$WORK/net"
cleanup() {
  for m in "$N"/maker "$N"/plus "$N"/plain; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  "$NACRE" down "$WORK/emb-plus/mnt" >/dev/null 2>&1 || true
  "$NACRE" down "$WORK/emb-plain/mnt" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT

for rdp in plus plain; do
  on=$([ $rdp = plus ] && echo true || echo false)
  "$NACRE" up "$WORK/emb-$rdp/data" --mount "$WORK/emb-$rdp/mnt" --osts 2 --fsname "e$rdp" \
    --listen "127.0.0.1:$(free_port 127.0.0.1)" --readdirplus "$on" >/dev/null
done
mkdir -p "$N/maker" "$N/plus" "$N/plain"
net_up "$N" listing
"$NACRE" mount "$MGS@tcp:/listing" "$N/maker" >/dev/null
"$NACRE" mount "$MGS@tcp:/listing" "$N/plus" >/dev/null
"$NACRE" mount "$MGS@tcp:/listing" "$N/plain" --readdirplus false >/dev/null

# make DIR: FILES files of 1 KiB.
make() {
  python3 - "$1" "$FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for i in range(n):
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(b"x" * 1024)
PY
}
# scan DIR: entries per second of a listing plus an lstat of every name, cold then warm.
scan() {
  python3 - "$1" "$FILES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
out = []
for _ in ("cold", "warm"):
    if not out:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
    t = time.perf_counter()
    names = os.listdir(d)
    for name in names:
        os.lstat(os.path.join(d, name))
    out.append(len(names) / (time.perf_counter() - t))
    assert len(names) == n, (len(names), n)
print(" ".join(f"{x:.0f}" for x in out))
PY
}
med() { # runs "$@" ROUNDS times; prints each column's median
  local runs=() r c
  for r in $(seq "$ROUNDS"); do runs+=("$("$@")"); done
  for c in 1 2; do printf '%s ' "$(printf '%s\n' "${runs[@]}" | awk -v c=$c '{print $c}' | median)"; done
}

make "$WORK/local/d"
make "$WORK/emb-plus/mnt/d"
make "$WORK/emb-plain/mnt/d"
make "$N/maker/d"
declare -A R
R[local]=$(med scan "$WORK/local/d")
R[emb-plus]=$(med scan "$WORK/emb-plus/mnt/d")
R[emb-plain]=$(med scan "$WORK/emb-plain/mnt/d")
R[net-plus]=$(med scan "$N/plus/d")
R[net-plain]=$(med scan "$N/plain/d")

echo "ls -l of $FILES files, entries/s (median of $ROUNDS; ratio to local)"
printf '| %-28s | %12s | %12s |\n' "form" "cold" "warm"
printf '|%s|%s|%s|\n' "------------------------------" "-------------:" "-------------:"
read -r lc lw <<<"${R[local]}"
for k in local emb-plain emb-plus net-plain net-plus; do
  read -r c w <<<"${R[$k]}"
  case $k in
    local) name="local" ;;
    emb-plain) name="embedded, readdirplus=false" ;;
    emb-plus) name="embedded, readdirplus" ;;
    net-plain) name="networked, readdirplus=false" ;;
    net-plus) name="networked, readdirplus" ;;
  esac
  printf '| %-28s | %12s | %12s |\n' "$name" "$c ($(pct "$c" "$lc"))" "$w ($(pct "$w" "$lw"))"
done
