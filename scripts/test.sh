#!/usr/bin/env bash
# Runs Nacre's whole test suite on a fresh Debian machine: installs what is missing, checks
# formatting and lints, builds, and runs every unit, crate and integration test (the
# integration tests mount real FUSE file systems and start real server processes: run as root),
# then runs every fuzz target briefly (scripts/fuzz.sh), and last the aarch64 build with its
# tests under qemu-user and the x86 <-> aarch64 runs (scripts/test-aarch64.sh, ~9 minutes
# cold; NACRE_SKIP_AARCH64=1 leaves it out of a local run, never out of CI).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
export NACRE_TEST_DIR="${NACRE_TEST_DIR:-/var/tmp}"
export RUST_LOG="${RUST_LOG:-error}"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
# With the tests' own targets: their dev-dependencies unify features differently, and a
# build without them compiles every crate a second time for `cargo test` (2 minutes of CI).
cargo build --workspace --release --all-targets
cargo test --workspace --release -- --test-threads "${NACRE_TEST_THREADS:-2}"
# Every decoder of network and disk bytes under libFuzzer for a short time.
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" ./scripts/fuzz.sh
# Nacre for aarch64: built, its tests under emulation, x86 and aarch64 processes together.
if [ "${NACRE_SKIP_AARCH64:-0}" != 1 ]; then
  ./scripts/test-aarch64.sh
fi
