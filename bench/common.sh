# Sourced by the bench scripts: builds nacre (dependencies installed by the project) and
# defines the helpers they share. Sets NACRE to the binary.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
./scripts/install-deps.sh >/dev/null
cargo build --release -p nacre-cli -q
NACRE="$CARGO_TARGET_DIR/release/nacre"

# json EXPR: evaluates a Python expression over the JSON document on stdin (`d`).
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# pct A B: A as a percentage of B ('-' when B is 0).
pct() { python3 -c "print(f'{$1/$2*100:.0f}%' if $2 else '-')"; }
# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# fio_bw DIR RW SIZE JOBS: sequential 1 MiB O_DIRECT fio bandwidth in MiB/s.
fio_bw() {
  fio --name=seq --directory="$1" --rw="$2" --bs=1m --size="$3" --numjobs="$4" --direct=1 \
      --ioengine=psync --group_reporting --output-format=json 2>/dev/null \
    | json "round(d['jobs'][0]['$([ "$2" = read ] && echo read || echo write)']['bw']/1024)"
}
