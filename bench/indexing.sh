#!/usr/bin/env bash
# bench/indexing.sh — what workspace indexing costs the writer: the create benchmark
# (create+write+close of N files of 4 KiB, one process) on two ClawFS mounts of this build, one
# indexing (the default) and one with --no-search, in interleaved rounds.
#
#   bash bench/indexing.sh [--clawfs-bin PATH] [--files N] [--rounds N] [--image-dir DIR]
#
# Both stores live on one fresh journaled ext4 image, made in /tmp or in --image-dir (on a tmpfs
# such as /dev/shm the host disk's own variation, often 2x between rounds, is out of the figures
# and what is left is the indexer's competition for the CPUs). Rounds alternate which side goes
# first (on-off, off-on, ...), and runs a round's two turns back to back, so that the machine's
# drift (often 2x within minutes on a shared host) hits both alike. Indexing runs in the
# daemon's background thread: before each round the script waits until that thread has been idle
# for 7 s (it saves its graphs after 5 s of quiet), and when the "off" turn follows the "on" one,
# the indexing daemon is stopped (SIGSTOP) for it, so that the indexing of the files just written,
# which follows any write burst, does not compete with the other side's turn. Prints
# the median time per side, their ratio, the median of the rounds' on/off ratios and a 95%
# bootstrap interval for it. Needs root (mounts) and the model (scripts/fetch-model.sh). Cleans up
# on exit.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLAWFS="" FILES=5000 ROUNDS=5 IMAGE_DIR=""
while (($#)); do
    case $1 in
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --image-dir) IMAGE_DIR=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "indexing.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "indexing.sh: run as root" >&2; exit 1; }
[[ -z $IMAGE_DIR || -d $IMAGE_DIR ]] || { echo "indexing.sh: --image-dir: $IMAGE_DIR is not a directory" >&2; exit 2; }
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
CLAWFS=$(release_clawfs "$CLAWFS")
WORK=$(mktemp -d /tmp/clawfs-indexing.XXXXXX)
IMG=$WORK/img
[[ -z $IMAGE_DIR ]] || IMG=$(mktemp "$IMAGE_DIR/clawfs-indexing-img.XXXXXX")
LOOPDEV=""
PID_ON=""
cleanup() {
    set +e
    [[ -z $PID_ON ]] || kill -CONT "$PID_ON" 2>/dev/null
    for s in on off; do unmount_clawfs "$CLAWFS" "$WORK/fs/$s/mnt" >/dev/null 2>&1; done
    sleep 0.5
    release_loop "$WORK/fs" "$LOOPDEV"
    rm -f "$IMG"
    remove_unmounted "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/fs"
# One inode per 16 KiB (mke2fs's default) and room for every round's files on both sides, with
# half again for the indexes; at least 4 GiB. Sparse: only what is written takes space.
GIB=$(((FILES * ROUNDS * 2 * 16 * 3 / 2 + 1048575) / 1048576))
((GIB >= 4)) || GIB=4
journaled_loop "$IMG" "${GIB}G" "$WORK/fs" || { echo "indexing.sh: cannot set up the ext4 image" >&2; exit 1; }
cc -O2 -o "$WORK/helper" "$REPO/bench/helper.c"
for s in on off; do mkdir -p "$WORK/fs/$s/mnt"; done
"$CLAWFS" mount "$WORK/fs/on/mnt" --store "$WORK/fs/on/store" >/dev/null
"$CLAWFS" mount "$WORK/fs/off/mnt" --store "$WORK/fs/off/store" --no-search >/dev/null
PID_ON=$(python3 -c "import json,sys; print(json.load(open('$WORK/fs/on/store/.clawfs/daemon.json'))['pid'])")

# Waits until the indexing daemon's indexer thread used no CPU for 7 seconds: nothing is left of
# the last round, not even the graph save that follows 5 s of quiet. (The thread and those it
# starts are named "indexer".)
indexer_ticks() {
    cat /proc/"$PID_ON"/task/*/stat 2>/dev/null | awk '$2 == "(indexer)" {t += $14 + $15} END {print t + 0}'
}
idle() {
    local a b quiet=0
    a=$(indexer_ticks)
    while ((quiet < 7)); do
        sleep 1
        b=$(indexer_ticks)
        if [[ $a == "$b" ]]; then quiet=$((quiet + 1)); else quiet=0; fi
        a=$b
    done
}

declare -A T=([on]="" [off]="")
for ((i = 0; i < ROUNDS; i++)); do
    order="on off"
    ((i % 2 == 0)) || order="off on"
    for s in on off; do mkdir "$WORK/fs/$s/mnt/workspaces/default/r$i"; done
    idle
    for s in $order; do
        t0=$(date +%s%N)
        "$WORK/helper" create "$WORK/fs/$s/mnt/workspaces/default/r$i" "$FILES" 4096
        t1=$(date +%s%N)
        T[$s]+="$(((t1 - t0) / 1000000)) "
        if [[ $s == on && $order == "on off" ]]; then kill -STOP "$PID_ON"; fi
    done
    kill -CONT "$PID_ON"
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
on=$(med "${T[on]}") off=$(med "${T[off]}")
echo "## Indexing cost — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, image in ${IMAGE_DIR:-/tmp}"
echo "create+write+close of $FILES files × 4 KiB, median of $ROUNDS interleaved rounds"
echo "indexing on:  $on ms (rounds: ${T[on]})"
echo "indexing off: $off ms (rounds: ${T[off]})"
awk -v a="$on" -v b="$off" 'BEGIN { printf "on / off: %.3f (%+.1f%%)\n", a / b, (a / b - 1) * 100 }'
# Each round's "on" against its "off": the machine's drift (2x within minutes on a shared host)
# moves both of a round alike, and the median pair says what it leaves. The interval is the
# 2.5th and 97.5th percentiles of that median over 10,000 resamplings of the rounds.
python3 - "${T[on]}" "${T[off]}" <<'PY'
import random, statistics, sys
pairs = [a / b for a, b in zip(map(int, sys.argv[1].split()), map(int, sys.argv[2].split()))]
m = statistics.median(pairs)
rng = random.Random(1)
boot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(10000))
lo, hi = boot[250], boot[9749]
print(f"on / off, median of the rounds' pairs: {m:.3f} ({(m - 1) * 100:+.1f}%), "
      f"95% interval {lo:.3f}-{hi:.3f}")
PY
