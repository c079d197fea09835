#!/usr/bin/env bash
# Installs what Nacre needs on a fresh Debian machine; each step only when missing.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v fio >/dev/null 2>&1 || need+=(fio)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v attr >/dev/null 2>&1 || need+=(attr)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
command -v git >/dev/null 2>&1 || need+=(git)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-pip)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v cargo >/dev/null 2>&1; then
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
# A real OpenMetrics parser for the /metrics test.
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import prometheus_client" 2>/dev/null; then
  python3 -m pip install --quiet prometheus-client 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages prometheus-client 2>/dev/null \
    || { SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-prometheus-client; }
fi
# numpy, for the Python package's tests (numpy.save straight into Nacre).
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import numpy" 2>/dev/null; then
  python3 -m pip install --quiet numpy 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages numpy 2>/dev/null \
    || { SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-numpy; }
fi
# Allow other users to reach mounts made with allow_other (permission tests run as non-root).
if [ -f /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
  echo user_allow_other >> /etc/fuse.conf || true
fi
[ -e /dev/fuse ] || { echo "install-deps: /dev/fuse is missing; load the fuse module" >&2; exit 1; }
