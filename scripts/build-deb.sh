#!/usr/bin/env bash
# Builds Nacre's Debian package: /usr/bin/nacre, /sbin/mount.nacre (mount -t nacre, fstab),
# systemd units (nacre-server@NAME reads /etc/nacre/NAME.conf; nacre-mount@NAME), man pages
# and shell completions generated from the command line's definitions, example configs.
#   scripts/build-deb.sh [--bin PATH_TO_NACRE] [--out DIR]     (prints the package's path)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=""
out="${OUT:-${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}/deb}"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done
command -v dpkg-deb >/dev/null || { echo "build-deb: dpkg-deb is missing" >&2; exit 1; }
if [ -z "$bin" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nacre-target}"
  cargo build --release -p nacre-cli -q
  bin="$CARGO_TARGET_DIR/release/nacre"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -D -m 0755 "$bin" "$stage/usr/bin/nacre"
mkdir -p "$stage/sbin"
ln -s /usr/bin/nacre "$stage/sbin/mount.nacre"
for unit in nacre-server@.service nacre-mount@.service nacre-policy@.service; do
  install -D -m 0644 "contrib/debian/$unit" "$stage/lib/systemd/system/$unit"
done
install -D -m 0644 contrib/debian/server.conf.example "$stage/usr/share/doc/nacre/examples/server.conf"
install -D -m 0644 contrib/debian/mount.conf.example "$stage/usr/share/doc/nacre/examples/mount.conf"
install -D -m 0644 contrib/debian/policy.toml.example "$stage/usr/share/doc/nacre/examples/policy.toml"
for s in prolog.sh epilog.sh; do
  install -D -m 0755 "contrib/slurm/$s" "$stage/usr/share/nacre/slurm/$s"
done
install -D -m 0644 contrib/slurm/README.md "$stage/usr/share/nacre/slurm/README.md"
install -D -m 0644 README.md "$stage/usr/share/doc/nacre/README.md"
"$bin" gen-docs --man "$stage/usr/share/man/man1" --completions "$stage/completions"
gzip -9n "$stage"/usr/share/man/man1/*.1
install -D -m 0644 "$stage/completions/nacre.bash" "$stage/usr/share/bash-completion/completions/nacre"
install -D -m 0644 "$stage/completions/_nacre" "$stage/usr/share/zsh/vendor-completions/_nacre"
install -D -m 0644 "$stage/completions/nacre.fish" "$stage/usr/share/fish/vendor_completions.d/nacre.fish"
rm -r "$stage/completions"
mkdir -p "$stage/DEBIAN" "$stage/etc/nacre"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: nacre
Version: $version
Architecture: $arch
Maintainer: Nacre developers <nacre@localhost>
Depends: fuse3
Installed-Size: $(du -sk "$stage" | cut -f1)
Section: admin
Priority: optional
Homepage: https://localhost/nacre
Description: parallel distributed file system in user space, in the manner of Lustre
 One binary hosts any set of roles (MGS, MDS, OSS, client): nacre-server@NAME runs the
 targets of /etc/nacre/NAME.conf; clients mount with `mount -t nacre MGS_NID:/FS DIR`
 (fstab works) or nacre-mount@NAME.
CONTROL
cat > "$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
POSTINST
chmod 0755 "$stage/DEBIAN/postinst"
mkdir -p "$out"
deb="$out/nacre_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
echo "$deb"
