#!/usr/bin/env bash
# Installs Nacre on a fresh Debian machine and mounts a file system:
#   ./scripts/install-and-run.sh [DATA_DIR] [MOUNT_POINT] [OSTS]
# Defaults: /var/lib/nacre, /mnt/nacre, 4 OSTs. Stop it with `nacre down MOUNT_POINT`.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-/var/lib/nacre}"
MNT="${2:-/mnt/nacre}"
OSTS="${3:-4}"
./scripts/install-deps.sh
# shellcheck disable=SC1091
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
cargo build --release -p nacre-cli -p nacre-capi -p nacre-preload
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
R="$CARGO_TARGET_DIR/release"
$SUDO install -m 0755 "$R/nacre" /usr/local/bin/nacre
# The node API for C (docs/api.md) and LD_PRELOAD for unmodified programs (docs/preload.md).
$SUDO install -D -m 0755 "$R/libnacre.so" /usr/local/lib/libnacre.so
$SUDO install -D -m 0644 "$R/include/nacre.h" /usr/local/include/nacre.h
$SUDO install -D -m 0755 "$R/libnacre_preload.so" /usr/local/lib/nacre/libnacre_preload.so
command -v ldconfig >/dev/null && $SUDO ldconfig
$SUDO mkdir -p "$MNT"
$SUDO nacre up "$DATA" --mount "$MNT" --osts "$OSTS"
nacre df -h "$MNT"
