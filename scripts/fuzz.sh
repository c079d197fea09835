#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/fuzz_targets: each decoder of bytes from the network or
# the disk) for FUZZ_SECONDS each (default 10, as CI runs them); fails on any crash, and
# leaves the crashing input under fuzz/artifacts/TARGET/. Installs cargo-fuzz if missing.
# Runs on the stable toolchain, without a sanitizer (-s none): a decoder that panics,
# overflows in arithmetic or allocates without bound is what is looked for.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-10}"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$HOME/.cache/nacre-fuzz-target}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz --version 0.13.2
fi
cargo fuzz build -s none
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for t in $(cargo fuzz list); do
  echo "fuzz: $t for ${seconds}s"
  # -rss_limit_mb bounds what one input may allocate: a length field trusted from the input
  # shows up as an out-of-memory crash.
  rc=0
  cargo fuzz run -s none "$t" -- -max_total_time="$seconds" -rss_limit_mb=1024 >"$log" 2>&1 || rc=$?
  grep -E "^Done" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log" >&2
    echo "fuzz: $t failed (exit $rc); the input is under fuzz/artifacts/$t/" >&2
    exit 1
  fi
done
