#!/usr/bin/env bash
# The issue-19 yardstick, in one go: mdtest easy and hard and IOR easy and hard, 2 tasks, on
#   local      the local file system (ext4 under /var/tmp)
#   embedded   `nacre up` (one process, in-process transport, its own FUSE mount)
#   net-1      the networked form: MGS+MDT0 server process on 127.0.0.1, two OSS processes
#              (127.0.0.2, .3) with one OST each, both tasks on one `nacre mount` process
#   net-2      the same file system, one task per mount (two `nacre mount` processes)
# plus `nacre bench survey` on the networked OSTs as their own ceiling, right before and
# after each IOR easy run. Checksums on (the default). Every figure is the median of ROUNDS
# runs, with its ratio to local. The embedded form is one process with one mount by
# definition: it has no one-task-per-mount column.
#   mdtest easy: -n FILES/2 per task, a directory per task, empty files
#   mdtest hard: one shared directory, 3,901-byte files written then read
#   IOR easy:    file per process, 1 MiB transfers, O_DIRECT, SIZE per task
#   IOR hard:    one shared file, 47,008-byte records interleaved, SEGMENTS per task
# Not a test: it asserts nothing.
#   bench/forms.sh [WORK_DIR]     (ROUNDS=3 FILES=4000 SIZE=512m SEGMENTS=2000 ONLY=...
#                                  MOUNT_OPTS=...)
set -euo pipefail
WORK="${1:-/var/tmp/nacre-forms}"
ROUNDS="${ROUNDS:-3}"
FILES="${FILES:-4000}"
SIZE="${SIZE:-512m}"
SEGMENTS="${SEGMENTS:-2000}"
ONLY="${ONLY:-local embedded net-1 net-2}"
KEEP="${KEEP:-}"
source "$(dirname "$0")/common.sh"
rm -rf "$WORK"; mkdir -p "$WORK/local" "$WORK/emb/mnt"
pids=()
cleanup() {
  for m in "$WORK"/net/a "$WORK"/net/b; do
    mountpoint -q "$m" 2>/dev/null && { "$NACRE" umount "$m" || "$NACRE" umount -f "$m"; }
  done
  "$NACRE" down "$WORK/emb/mnt" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
[ -n "$KEEP" ] || trap cleanup EXIT

# --- the file systems -----------------------------------------------------------------
"$NACRE" up "$WORK/emb/data" --mount "$WORK/emb/mnt" --osts 2 --fsname emb \
  --listen "127.0.0.1:$(free_port 127.0.0.1)" >/dev/null
N="$WORK/net"; mkdir -p "$N/a" "$N/b"
net_up "$N" forms
# MOUNT_OPTS: extra `nacre mount` options for the networked mounts (e.g. "--data-cache
# false" for the figures without data locks and write-behind).
read -r -a mount_opts <<<"${MOUNT_OPTS:-}"
"$NACRE" mount "$MGS@tcp:/forms" "$N/a" "${mount_opts[@]}" >/dev/null
"$NACRE" mount "$MGS@tcp:/forms" "$N/b" "${mount_opts[@]}" >/dev/null

# --- the workloads: each prints one line of numbers -----------------------------------
# Where a form's two tasks run: one root (both on one mount) or {host} over two mounts.
where() { # form -> sets P (path prefix) and TEAM (the two-mount placement), no subshell
  TEAM=()
  case "$1" in
    local) P="$WORK/local" ;;
    embedded) P="$WORK/emb/mnt" ;;
    net-1) P="$N/a" ;;
    net-2) TEAM=(--hosts a,b --launcher "env NACRE_BENCH_HOST={host}" --listen 127.0.0.1:0)
           P="$N/{host}" ;;
  esac
}
clean() { rm -rf "$WORK/local"/* "$WORK/emb/mnt"/* "$N/a"/* 2>/dev/null || true; }
md_easy() { # form -> "create stat remove"
  where "$1"; clean
  "$NACRE" bench mdtest -n "$((FILES / 2))" -N 2 -u -F -q --json -d "$P/md-easy" "${TEAM[@]}" \
    | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File stat','File removal'))"
}
md_hard() { # form -> "create stat read remove"
  where "$1"; clean
  "$NACRE" bench mdtest -n "$((FILES / 4))" -N 2 -F -w 3901 -e 3901 -q --json -d "$P/md-hard" "${TEAM[@]}" \
    | json "' '.join(str(round(dict(d['summary'])[k]['mean'])) for k in ('File creation','File stat','File read','File removal'))"
}
ior_easy() { # form -> "write read" MiB/s
  where "$1"; clean
  "$NACRE" bench ior -w -r -t 1m -b "$SIZE" -N 2 -F -e --direct -q --json -o "$P/ior-easy" "${TEAM[@]}" \
    | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))"
}
ior_hard() { # form -> "write read" MiB/s
  where "$1"; clean
  "$NACRE" bench ior -w -r -t 47008 -b 47008 -s "$SEGMENTS" -N 2 -e -C -q --json -o "$P/ior-hard" "${TEAM[@]}" \
    | json "' '.join(str(round([x for x in d['phases'] if x['op']==o][0]['bw_mib'])) for o in ('write','read'))"
}
survey() { # THREADS -> "write read" MiB/s of both OSTs, THREADS threads each, 1 MiB records,
  # objects made durable inside the time as IOR's -e does (a virtual disk's flush writes out
  # its host's cache: without it the survey timed the host's memory)
  local out
  out=$("$NACRE" bench survey --ost "$N/ost0" --ost "$N/ost1" -o "$1" -t "$1" -r 1M -s "$SIZE" \
    --fsync --json)
  for op in write read; do json "round([p for p in d if p['op']=='$op'][0]['total_mib'])" <<<"$out"; done | xargs
}
ior_easy_paired() { # form -> "write read s2-write s2-read s1-write write/s2% write/s1%"
  # The OSTs' ceiling is measured right before and right after each IOR easy run, with 2
  # threads per OST (4 streams) and with 1 (2 streams, as many as IOR's 2 tasks), and the
  # better of before and after is taken: this virtual disk's speed drifts by 2x within a
  # minute (a survey right after 1 GiB of writes often runs at half the speed of the next
  # one), so a ceiling measured at another moment compared different disks.
  local w r a2w a2r a1w b2w b2r b1w _
  read -r a2w a2r <<<"$(survey 2)"
  read -r a1w _ <<<"$(survey 1)"
  read -r w r <<<"$(ior_easy "$1")"
  read -r b2w b2r <<<"$(survey 2)"
  read -r b1w _ <<<"$(survey 1)"
  python3 -c "
s2w, s1w = max($a2w, $b2w), max($a1w, $b1w)
print($w, $r, s2w, max($a2r, $b2r), s1w, round($w / s2w * 100), round($w / s1w * 100))"
}
medcols() { # runs "$@" ROUNDS times; prints each column's median (a failed run stops all)
  local out; out=$(for _ in $(seq "$ROUNDS"); do "$@" || exit 1; done) \
    || { echo "failed: $*" >&2; kill $$; exit 1; }
  local n; n=$(head -1 <<<"$out" | wc -w)
  for c in $(seq "$n"); do awk -v c="$c" '{print $c}' <<<"$out" | median; done | xargs
}

declare -A R
for form in $ONLY; do
  echo "measuring $form ..." >&2
  read -r R[$form,ec] R[$form,es] R[$form,er] <<<"$(medcols md_easy "$form")"
  read -r R[$form,hc] R[$form,hs] R[$form,hr] R[$form,hx] <<<"$(medcols md_hard "$form")"
  read -r R[$form,iew] R[$form,ier] R[$form,sw] R[$form,sr] R[$form,s1w] R[$form,iewr] \
    R[$form,iewr1] <<<"$(medcols ior_easy_paired "$form")"
  read -r R[$form,ihw] R[$form,ihr] <<<"$(medcols ior_hard "$form")"
done

cell() { # form key -> "value (ratio to local)"
  local v="${R[$1,$2]:--}" l="${R[local,$2]:-}"
  if [ "$v" = - ] || [ -z "$l" ] || [ "$1" = local ]; then echo "$v"; else echo "$v ($(pct "$v" "$l"))"; fi
}
echo
echo "ROUNDS=$ROUNDS FILES=$FILES SIZE=$SIZE SEGMENTS=$SEGMENTS (medians; % of local)"
echo
printf '| figure |'; for f in $ONLY; do printf ' %s |' "$f"; done; echo
printf '|---|'; for _ in $ONLY; do printf -- '---:|'; done; echo
for row in "mdtest easy create/s:ec" "mdtest easy stat/s:es" "mdtest easy remove/s:er" \
           "mdtest hard create/s:hc" "mdtest hard stat/s:hs" "mdtest hard read/s:hr" \
           "mdtest hard remove/s:hx" "IOR easy write O_DIRECT MiB/s:iew" \
           "IOR easy read O_DIRECT MiB/s:ier" "IOR hard write MiB/s:ihw" "IOR hard read MiB/s:ihr"; do
  printf '| %s |' "${row%%:*}"
  for f in $ONLY; do printf ' %s |' "$(cell "$f" "${row##*:}")"; done; echo
done
echo
echo "OSTs alone (nacre bench survey, 2 OSTs, 1 MiB), the better of right before and right after"
echo "each IOR easy run: 2 threads per OST (4 streams) and 1 thread per OST (2 streams, as many"
echo "as IOR's tasks); IOR easy write as a share of each (medians of the runs' ratios):"
for f in $ONLY; do
  echo "$f: OSTs alone write ${R[$f,sw]} MiB/s (1 thread per OST: ${R[$f,s1w]}), read ${R[$f,sr]}" \
    "MiB/s; IOR easy write / OSTs alone write: ${R[$f,iewr]}% (1 thread per OST: ${R[$f,iewr1]}%)"
done
