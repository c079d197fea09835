#!/usr/bin/env bash
# Nacre on aarch64, tested on an x86-64 Debian 12 machine (issue 43):
#   1. every crate built for aarch64, and its unit, property and crate tests run under
#      qemu-user (scripts/build-aarch64.sh; NACRE_UNDER_QEMU=1 tells the tests);
#   2. the mixed-architecture subset of the integration suite, both ways: x86 servers with
#      an aarch64 client, then aarch64 servers with an x86 client — the wire and on-disk
#      formats read by both (a mount, IOR- and mdtest-like work, checksums, a kill -9 and
#      recovery).
# aarch64 programs run as if native (binfmt_misc, registered here if missing, with qemu's
# fix-binary flag), so a server that re-executes itself, or a test that spawns `nacre`,
# behaves as on ARM hardware. Needs root (binfmt_misc, FUSE mounts). Everything aarch64 is
# built with the `emulated` profile (Cargo.toml): release without debug info, at opt-level 1.
# scripts/test.sh runs this after the x86 suite (it is part of CI).
#   scripts/test-aarch64.sh [--mixed-only]
set -euo pipefail
cd "$(dirname "$0")/.."
mixed_only=0
[ "${1:-}" = "--mixed-only" ] && mixed_only=1
./scripts/install-deps.sh
# Builds the aarch64 binary (and installs the cross tools and qemu-user if missing).
all_start=$(date +%s)
./scripts/build-aarch64.sh build --profile emulated -p nacre-cli
a64="${NACRE_AARCH64_TARGET_DIR:-$HOME/.cache/nacre-target-aarch64}/aarch64-unknown-linux-gnu/emulated/nacre"
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  q="$(command -v qemu-aarch64-static)"
  printf ':qemu-aarch64:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:%s:F\n' "$q" >"$binfmt/register"
fi
"$a64" --version >/dev/null
if [ "$mixed_only" -eq 0 ]; then
  start=$(date +%s)
  # The integration suite (nacre-tests) is the mixed run below; the Python, C and preload
  # crates' tests build their artefacts for the host and are left to the x86 run.
  # Documentation examples are left to the x86 run (rustdoc would need the aarch64 std too).
  ./scripts/build-aarch64.sh test --profile emulated --workspace \
    --exclude nacre-tests --exclude nacre-python --exclude nacre-capi --exclude nacre-preload \
    --lib --bins --tests -- --test-threads "${NACRE_TEST_THREADS:-2}"
  echo "aarch64: unit, property and crate tests under emulation in $(( $(date +%s) - start )) s"
  # The page-size code with the 64 KiB pages of many aarch64 kernels: qemu-user reports the
  # page size it is told (sysconf), which nacre_types::page::page_bytes reads.
  QEMU_PAGESIZE=65536 NACRE_PAGE_BYTES_EXPECTED=65536 \
    ./scripts/build-aarch64.sh test --profile emulated -p nacre-types page:: -- --nocapture
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
export NACRE_TEST_DIR="${NACRE_TEST_DIR:-/var/tmp}"
export RUST_LOG="${RUST_LOG:-error}"
# The whole workspace with its tests' targets, as scripts/test.sh builds it: `-p nacre-cli`
# alone, or no tests' targets, unifies features differently and rebuilds it (2 minutes of CI).
cargo build --release --workspace --all-targets
x86="$CARGO_TARGET_DIR/release/nacre"
mixed=(
  posix::networked::files_read_write_truncate_append
  posix::networked::shared_mmap_reads_and_writes
  striping::networked::striped_file_is_spread_over_osts
  bench::networked::ior_checks_data_and_reports_every_phase
  bench::networked::mdtest_runs_all_phases_and_cleans_up
  bench::networked::ior_detects_corrupted_objects
  recovery::acknowledged_changes_lost_in_a_node_crash_are_replayed_in_order
  recovery::a_file_unlinked_while_open_survives_an_mds_restart
)
for pair in "$x86 $a64" "$a64 $x86"; do
  read -r servers client <<<"$pair"
  echo "mixed: servers $(file -b "$servers" | cut -d, -f2), client $(file -b "$client" | cut -d, -f2)"
  start=$(date +%s)
  NACRE_BIN="$servers" NACRE_CLIENT_BIN="$client" \
    cargo test --release --workspace --test suite -- --exact "${mixed[@]}" --test-threads 2
  echo "mixed run in $(( $(date +%s) - start )) s"
done
# The Debian package for arm64, unpacked and run as the x86 one is: a whole file system up,
# a file written and read back, then down.
deb="$(./scripts/build-deb.sh --bin "$a64" --arch arm64 --out "$(mktemp -d)")"
[ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ]
root="$(mktemp -d)"
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/nacre" --version
fs="$(mktemp -d "${NACRE_TEST_DIR}/nacre-arm64-pkg.XXXXXX")"
mkdir -p "$fs/mnt"
"$root/usr/bin/nacre" up "$fs/data" --mount "$fs/mnt" --osts 2
echo "arm64 package" >"$fs/mnt/hello"
[ "$(cat "$fs/mnt/hello")" = "arm64 package" ]
"$root/usr/bin/nacre" down "$fs/mnt"
rm -rf "$root" "$fs"
echo "arm64 package: $(basename "$deb") unpacked and run"
echo "aarch64: everything above in $(( $(date +%s) - all_start )) s"
