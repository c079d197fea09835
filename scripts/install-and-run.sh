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
cargo build --release -p nacre-cli
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO install -m 0755 "$CARGO_TARGET_DIR/release/nacre" /usr/local/bin/nacre
$SUDO mkdir -p "$MNT"
$SUDO nacre up "$DATA" --mount "$MNT" --osts "$OSTS"
nacre df -h "$MNT"
