#!/usr/bin/env bash
# Runs the pjdfstest POSIX conformance suite against a workspace directory of a fresh ClawFS
# mount, as root, and prints its summary. Exits non-zero if any test fails.
#   tests/pjdfstest/run.sh [CLAWFS_BIN] [extra pjdfstest args...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-$here/../../target/debug/clawfs}")
shift || true
command -v pjdfstest >/dev/null || { echo "pjdfstest not installed (cargo install pjdfstest --locked)" >&2; exit 2; }
# pjdfstest switches to these users.
getent group tests >/dev/null || groupadd tests
getent passwd tests >/dev/null || useradd -M -g tests tests

# Short paths: pjdfstest binds unix sockets, whose paths are limited to 108 bytes.
work=$(mktemp -d /tmp/cpjd.XXXXXX)
chmod 755 "$work"
cleanup() {
  cd /
  # Through clawfs, which waits for the daemon to finish writing into the store: a bare
  # `umount -l` returns while it still does, and the removal below would race it. Lazily, as
  # a process a test left behind may still hold the mount.
  "$bin" umount --lazy "$work/m" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/m"
"$bin" mount "$work/m" --store "$work/store" ${CLAWFS_MOUNT_ARGS:-}
# The admin opens the workspace to the test users, as an admin would for a group.
chmod 755 "$work/m/workspaces"
chmod 1777 "$work/m/workspaces/default"
dir="$work/m/workspaces/default/p"
mkdir -m 0777 "$dir"
cd "$dir"
status=0
pjdfstest -c "$here/pjdfstest.toml" -p "$dir" "$@" > "$work/pjdfstest.log" 2>&1 || status=$?
grep -E '^[a-z_0-9]+::.*(FAILED)$' -A3 "$work/pjdfstest.log" | grep -v '^\s*[0-9]*: \|^\s*at ' || true
summary=$(grep '^Summary:' "$work/pjdfstest.log" || echo "Summary: pjdfstest did not finish")
echo "pjdfstest on ClawFS: $summary"
# The plain closing line CI reads.
echo "$summary" | sed -E 's/^Summary: ([0-9]+) failed, ([0-9]+) skipped, ([0-9]+) passed.*/pjdfstest: \3 passed, \1 failed, \2 skipped/'
exit $status
