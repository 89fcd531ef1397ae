#!/usr/bin/env bash
# bench/snapshot.sh — a snapshot of a large workspace, against copying the same tree natively:
#
#   bash bench/snapshot.sh [--clawfs-bin PATH] [--mib N]        (default 1024)
#
# Fills the default workspace of a fresh store, through a ClawFS mount (--no-search, so the
# indexer does not compete), with N MiB: half text-like files (compressible, as notes and code
# are) and half random bytes (as media or archives are), in files of 4 MiB. Then times, with
# the page cache dropped before each: `cp -a` of the tree and `sqlite3 -A -c` of it into a fresh
# archive (the floors: a plain copy, and the same archive format built natively), then
# `clawfs snapshot create` while the mount serves the store. Prints seconds, MiB/s and the
# ratios. Needs root (mounts, drop_caches) and sqlite3. Cleans up on exit.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLAWFS="" MIB=1024
while (($#)); do
    case $1 in
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --mib) MIB=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "snapshot.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "snapshot.sh: run as root" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "snapshot.sh: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
CLAWFS=$(release_clawfs "$CLAWFS")
WORK=$(mktemp -d /var/tmp/clawfs-snapshot.XXXXXX)
cleanup() {
    set +e
    unmount_clawfs "$CLAWFS" "$WORK/mnt" >/dev/null 2>&1
    remove_unmounted "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/mnt"
"$CLAWFS" mount "$WORK/mnt" --store "$WORK/store" --no-search >/dev/null
WS="$WORK/mnt/workspaces/default"
FILES=$((MIB / 4))
# One 4 MiB text block of words, and random blocks: each file is its own bytes.
python3 - "$WS" "$FILES" <<'PY'
import os, random, sys
ws, n = sys.argv[1], int(sys.argv[2])
words = "the river bridge flood rain turbine budget profit server socket latency garden soil".split()
r = random.Random(7)
for i in range(n):
    d = os.path.join(ws, f"dir{i % 16:02d}")
    os.makedirs(d, exist_ok=True)
    if i % 2 == 0:
        lines = [" ".join(r.choice(words) for _ in range(12)) + f" {i}.{j}\n" for j in range(56000)]
        data = "".join(lines).encode()[: 4 << 20]
        name = f"note{i:04d}.md"
    else:
        data = os.urandom(4 << 20)
        name = f"blob{i:04d}.bin"
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
PY
sync
TREE="$WORK/store/workspaces/default"
BYTES=$(du -sb --exclude=snapshots "$TREE" | cut -f1)
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
timed() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
drop; T_CP=$(timed cp -a "$TREE" "$WORK/copy")
rm -rf "$WORK/copy"
drop; T_AR=$(cd "$TREE" && timed sqlite3 -A -c -f "$WORK/native.db" .)
AR_SIZE=$(stat -c %s "$WORK/native.db"); rm -f "$WORK/native.db"
drop; T_SNAP=$(timed "$CLAWFS" snapshot --store "$WORK/store" create default)
SNAP=$(ls "$TREE"/snapshots/*.db)
SNAP_SIZE=$(stat -c %s "$SNAP")
sqlite3 "$SNAP" "SELECT count(*) FROM sqlar WHERE sz > 0" >/dev/null
mibs() { echo "scale=1; $BYTES / 1048576 / $1" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo "## Snapshot of a $((BYTES >> 20)) MiB workspace ($FILES files, half text, half random) — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$REPO" rev-parse --short HEAD)"
echo
echo "| | seconds | MiB/s | on disk | × cp -a |"
echo "|---|---:|---:|---:|---:|"
printf '| cp -a of the tree (native floor) | %.2f | %s | — | 1.00 |\n' "$T_CP" "$(mibs "$T_CP")"
printf '| sqlite3 -A -c of the tree (native archive) | %.2f | %s | %d MiB | %s |\n' "$T_AR" "$(mibs "$T_AR")" $((AR_SIZE >> 20)) "$(ratio "$T_AR" "$T_CP")"
printf '| clawfs snapshot create (mounted) | %.2f | %s | %d MiB | %s |\n' "$T_SNAP" "$(mibs "$T_SNAP")" $((SNAP_SIZE >> 20)) "$(ratio "$T_SNAP" "$T_CP")"
