#!/usr/bin/env bash
# The cost of the audit trail on small-file create (target: under 15%; docs/benchmarks.md,
# "Audit cost"), measured A/B: rounds alternate a mount with the trail and one with `--no-audit`,
# on the same journaled ext4 image, each creating N files of 4 KiB in one process; prints each
# round and the medians.
#   bash bench/audit_cost.sh [--clawfs-bin PATH] [--rounds R] [--files N] [--workdir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=""; ROUNDS=5; FILES=10000; WORK=/tmp/clawfs-audit-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --clawfs-bin) BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --files) FILES=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
BIN=$(release_clawfs "$BIN")
LOOPDEV=""
trap 'take_down "$BIN" "$WORK"' EXIT
is_mounted "$WORK/fs" && { echo "$WORK/fs is still mounted from an earlier run" >&2; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK/fs"
cc -O2 -o "$WORK/helper" "$here/helper.c"
journaled_loop "$WORK/img" 4G "$WORK/fs"
mkdir -p "$WORK/fs/mnt"

one() { # $1 = extra mount args; prints files/s
  "$BIN" mount "$WORK/fs/mnt" --store "$WORK/fs/store" $1 >/dev/null
  local d="$WORK/fs/mnt/workspaces/default/b"
  rm -rf "$d"; mkdir "$d"; sync
  local t0 t1
  t0=$(date +%s%N)
  "$WORK/helper" create "$d" "$FILES" 4096
  t1=$(date +%s%N)
  rm -rf "$d"
  "$BIN" umount "$WORK/fs/mnt" >/dev/null
  echo $(( FILES * 1000000000 / (t1 - t0) ))
}
on=(); off=()
for r in $(seq 1 "$ROUNDS"); do
  a=$(one ""); b=$(one "--no-audit")
  on+=("$a"); off+=("$b")
  echo "round $r: audit on $a files/s, off $b files/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
mon=$(median "${on[@]}"); moff=$(median "${off[@]}")
echo "median: audit on $mon files/s, off $moff files/s; cost $(awk -v a="$mon" -v b="$moff" 'BEGIN {printf "%.1f%%", (b-a)*100/b}')"
