#!/usr/bin/env bash
# bench/indexing.sh — what workspace indexing costs the writer: the create benchmark
# (create+write+close of N files of 4 KiB, one process) on two ClawFS mounts of this build, one
# indexing (the default) and one with --no-search, in interleaved rounds.
#
#   bash bench/indexing.sh [--clawfs-bin PATH] [--files N] [--rounds N]
#
# Indexing runs in the daemon's background thread; between rounds the script waits until that
# thread has been idle for 7 s (it saves its graphs after 5 s of quiet), so each round starts
# alike. Prints the median time per side, their ratio, and the median of the rounds' on/off
# ratios. Needs root (mounts) and the model (scripts/fetch-model.sh). Cleans up on exit.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLAWFS="" FILES=5000 ROUNDS=5
while (($#)); do
    case $1 in
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "indexing.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "indexing.sh: run as root" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
CLAWFS=$(release_clawfs "$CLAWFS")
WORK=$(mktemp -d /tmp/clawfs-indexing.XXXXXX)
cleanup() {
    set +e
    for s in on off; do unmount_clawfs "$CLAWFS" "$WORK/$s/mnt" >/dev/null 2>&1; done
    remove_unmounted "$WORK"
}
trap cleanup EXIT
cc -O2 -o "$WORK/helper" "$REPO/bench/helper.c"
for s in on off; do mkdir -p "$WORK/$s/mnt"; done
"$CLAWFS" mount "$WORK/on/mnt" --store "$WORK/on/store" >/dev/null
"$CLAWFS" mount "$WORK/off/mnt" --store "$WORK/off/store" --no-search >/dev/null
PID_ON=$(python3 -c "import json,sys; print(json.load(open('$WORK/on/store/.clawfs/daemon.json'))['pid'])")

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
    for s in on off; do
        idle
        d=$WORK/$s/mnt/workspaces/default/r$i
        mkdir "$d"
        t0=$(date +%s%N)
        "$WORK/helper" create "$d" "$FILES" 4096
        t1=$(date +%s%N)
        T[$s]+="$(((t1 - t0) / 1000000)) "
    done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
on=$(med "${T[on]}") off=$(med "${T[off]}")
echo "## Indexing cost — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo "create+write+close of $FILES files × 4 KiB, median of $ROUNDS interleaved rounds"
echo "indexing on:  $on ms (rounds: ${T[on]})"
echo "indexing off: $off ms (rounds: ${T[off]})"
awk -v a="$on" -v b="$off" 'BEGIN { printf "on / off: %.3f (%+.1f%%)\n", a / b, (a / b - 1) * 100 }'
# Each round's "on" against the "off" that ran right after it: the machine's drift (2x within
# minutes on a shared host) moves both of a pair alike, and the median pair says what it leaves.
paste <(tr ' ' '\n' <<<"${T[on]}" | grep .) <(tr ' ' '\n' <<<"${T[off]}" | grep .) |
    awk '{print $1 / $2}' | sort -n |
    awk '{r[NR] = $1} END {m = r[int((NR + 1) / 2)]; printf "on / off, median of the rounds'"'"' pairs: %.3f (%+.1f%%)\n", m, (m - 1) * 100}'
