#!/bin/sh
# Slurm prolog (PrologSlurmctld or Prolog on the first node): stages a job's input into
# the flash pool before it starts, through Nacre's data mover (docs/stage.md).
#
# A job names what to stage in its comment:
#   sbatch --comment "nacre_stage_in=/mnt/nacre/proj/in:/mnt/nacre/proj/model nacre_stage_out=/mnt/nacre/proj/out" job.sh
# Site settings (environment of slurmctld/slurmd, or /etc/nacre/stage.conf):
#   NACRE_MOVER       the data mover's NID (a `nacre server --mover DIR`)
#   NACRE_STAGE_IN_POOL   pool to stage into (default: flash)
#   NACRE_STAGE_TIMEOUT   seconds the prolog waits (default: 3600); past it the job fails
#                         to start rather than run on the capacity tier unnoticed.
set -eu
[ -r /etc/nacre/stage.conf ] && . /etc/nacre/stage.conf
: "${NACRE_STAGE_IN_POOL:=flash}"
: "${NACRE_STAGE_TIMEOUT:=3600}"
export NACRE_MOVER
comment=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/.*Comment=\(.*\)$/\1/p')
paths=$(printf '%s\n' "$comment" | tr ' ' '\n' | sed -n 's/^nacre_stage_in=//p' | tr ':' ' ')
[ -n "$paths" ] || exit 0
# shellcheck disable=SC2086 # one argument per path
exec timeout "$NACRE_STAGE_TIMEOUT" nacre stage in --pool "$NACRE_STAGE_IN_POOL" \
    --job "$SLURM_JOB_ID" --wait $paths
