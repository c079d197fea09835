#!/bin/sh
# Slurm epilog (EpilogSlurmctld or Epilog on the first node): stages a job's output out to
# the capacity pool after it ends, through Nacre's data mover (docs/stage.md). Queued, not
# waited for: the nodes are free at once; `nacre stage status --job ID` follows it.
#
# The job names its output in its comment (see prolog.sh): nacre_stage_out=PATH[:PATH...]
# Site settings: NACRE_MOVER, NACRE_STAGE_OUT_POOL (default: capacity).
# Anything the job's stage-in left queued (the job was cancelled early) is cancelled.
set -eu
[ -r /etc/nacre/stage.conf ] && . /etc/nacre/stage.conf
: "${NACRE_STAGE_OUT_POOL:=capacity}"
export NACRE_MOVER
nacre stage cancel --job "$SLURM_JOB_ID" >/dev/null 2>&1 || true
comment=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/.*Comment=\(.*\)$/\1/p')
paths=$(printf '%s\n' "$comment" | tr ' ' '\n' | sed -n 's/^nacre_stage_out=//p' | tr ':' ' ')
[ -n "$paths" ] || exit 0
# shellcheck disable=SC2086 # one argument per path
exec nacre stage out --pool "$NACRE_STAGE_OUT_POOL" --job "$SLURM_JOB_ID" $paths
