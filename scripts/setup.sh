#!/usr/bin/env bash
# One command from a fresh clone to a mounted ClawFS at /clawfs (or $1):
# installs system packages, builds the release binary, installs it as /usr/local/bin/clawfs,
# creates the clawos-agents and clawos-users groups, and mounts the default store
# (/var/lib/clawfs, initialised on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
clawfs_require_root
clawfs_install_packages
clawfs_require_cargo
mountpoint=${1:-/clawfs}

cargo build --release --locked -p clawfs-fuse
install -m 0755 target/release/clawfs /usr/local/bin/clawfs
clawfs_create_groups

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
