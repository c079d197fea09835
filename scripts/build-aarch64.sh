#!/usr/bin/env bash
# Builds (and runs the tests of) Nacre for aarch64 — ARM servers and clients — on an x86-64
# Debian 12 machine, installing what is missing: Debian's rustc-web with its aarch64 standard
# library (libstd-rust-web-dev:arm64, after `dpkg --add-architecture arm64`), the aarch64
# cross linker and C library, and qemu-user-static, which runs aarch64 programs here.
#
#   scripts/build-aarch64.sh                 the `nacre` binary:
#                                            $NACRE_AARCH64_TARGET_DIR/aarch64-unknown-linux-gnu/release/nacre
#   scripts/build-aarch64.sh CARGO_ARGS...   any cargo command for aarch64, e.g.
#                                            `test --release -p nacre-wire` (tests run under
#                                            qemu-aarch64-static: the runner set below)
#
# The aarch64 build has its own target directory (NACRE_AARCH64_TARGET_DIR, default
# ~/.cache/nacre-target-aarch64): it is compiled by Debian's rustc, not the machine's own,
# and sharing the x86 cache would rebuild it each time one or the other runs.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
need=()
dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
[ -x /usr/bin/rustc ] || need+=(rustc-web)
[ -d /usr/lib/rustlib/aarch64-unknown-linux-gnu ] || need+=(libstd-rust-web-dev:arm64)
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
export RUSTC=/usr/bin/rustc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# No -L: libstd-rust-web-dev:arm64 brings libc6:arm64, whose loader is /lib/ld-linux-aarch64.so.1;
# -L /usr/aarch64-linux-gnu would pair the cross loader (libc6-arm64-cross, another glibc
# build) with that libc, and every program hangs at its first pthread_create.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="env NACRE_UNDER_QEMU=1 qemu-aarch64-static"
export CARGO_TARGET_DIR="${NACRE_AARCH64_TARGET_DIR:-$HOME/.cache/nacre-target-aarch64}"
if [ $# -eq 0 ]; then
  set -- build --release -p nacre-cli
fi
sub="$1"; shift
exec cargo "$sub" --target aarch64-unknown-linux-gnu "$@"
