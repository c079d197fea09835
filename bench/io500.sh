#!/usr/bin/env bash
# The real IO500 (github IO500/io500, built by the user outside this repository with its
# ior and pfind) run by mpirun with 2 ranks on one mount of the networked form: an MGS+MDT0
# process, two OSS processes with two OSTs each, a separate `nacre mount` process, all over
# TCP on loopback (issue 44's setting), with a short stonewall (STONEWALL seconds per write
# phase: the score is computed but marked invalid, as for any run under 300 s). Prints
# io500's per-phase results and score, and the CPU seconds the Nacre processes spent.
#   IO500=/path/io500 bench/io500.sh [WORK]
#   (MPIRUN=mpirun STONEWALL=30 MOUNT_ARGS="--async-dirops true" DOM_HARD=1: mdtest hard's
#    directory laid out `-E 64K -L mdt -E -1 -c 1` before the run, as sites set for small
#    files; PHASES="find": the phases to run besides the writes they need, default all;
#    SET_PARAMS="ldlm.namespaces.*-mdc.lru_size=1048576": `nacre ctl set_param` after mounting)
# Not a test: it asserts nothing.
set -euo pipefail
: "${IO500:?set IO500 to the path of an io500 binary (github IO500/io500)}"
WORK="${1:-/var/tmp/nacre-io500}"
MPIRUN="${MPIRUN:-mpirun}"
STONEWALL="${STONEWALL:-30}"
source "$(dirname "$0")/common.sh"
WORK="$(realpath -m "$WORK")"
rm -rf "$WORK"; mkdir -p "$WORK/net/mnt"
pids=()
cleanup() {
  mountpoint -q "$WORK/net/mnt" 2>/dev/null \
    && { "$NACRE" umount "$WORK/net/mnt" || "$NACRE" umount -f "$WORK/net/mnt"; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  return 0
}
trap cleanup EXIT
TCK=$(getconf CLK_TCK)

OSTS_PER_OSS=2 net_up "$WORK/net" io500
# shellcheck disable=SC2086
"$NACRE" mount "$MGS@tcp:/io500" "$WORK/net/mnt" ${MOUNT_ARGS:-} >/dev/null
procs=("${pids[@]}" "$(pgrep -f "nacre mount $MGS@tcp:/io500 $WORK/net/mnt" | head -1)")
for a in ${SET_PARAMS:-}; do "$NACRE" ctl set_param "$a" >/dev/null; done
D="$WORK/net/mnt/io500"
mkdir -p "$D/mdtest-hard"
if [ -n "${DOM_HARD:-}" ]; then
  "$NACRE" setstripe -E 64K -L mdt -E -1 -c 1 "$D/mdtest-hard"
fi
cat > "$WORK/config.ini" <<EOF
[global]
datadir = $D
timestamp-datadir = FALSE
resultdir = $WORK/results
timestamp-resultdir = FALSE
drop-caches = FALSE
[debug]
stonewall-time = $STONEWALL
EOF
if [ -n "${PHASES:-}" ]; then
  for s in ior-easy-read mdtest-easy-stat ior-hard-read mdtest-hard-stat mdtest-easy-delete \
           mdtest-hard-read mdtest-hard-delete ior-rnd4K-easy-read find; do
    case " $PHASES " in *" $s "*) ;; *) printf '[%s]\nrun = FALSE\n' "$s" >> "$WORK/config.ini" ;; esac
  done
fi
t0=$(proc_ticks "${procs[@]}"); m0=$(cpu_ticks); s0=$(date +%s)
(cd "$WORK" && "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 "$IO500" config.ini) \
  > "$WORK/io500.out" 2>&1 || { tail -30 "$WORK/io500.out"; exit 1; }
t1=$(proc_ticks "${procs[@]}"); m1=$(cpu_ticks); s1=$(date +%s)
grep -E '^\[(RESULT|SCORE)' "$WORK/io500.out"
echo "MOUNT_ARGS=${MOUNT_ARGS:-} DOM_HARD=${DOM_HARD:-} SET_PARAMS=${SET_PARAMS:-}" \
  "STONEWALL=$STONEWALL; $((s1 - s0)) s;" \
  "CPU s: Nacre processes $(( (t1 - t0) / TCK )), machine $(( (m1 - m0) / TCK ))"
