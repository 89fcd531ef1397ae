#!/usr/bin/env bash
# bench/index_beside_make.sh — what indexing costs a build that runs while the index catches up.
# Root clones a 10,500-file repository (bench/make_repo.py: 10,458 small Go files, 40 C sources
# and a Makefile) into the default workspace, and at once runs `make -s -B -j2` of it: the
# indexer is catching up on the clone while make runs ("busy"). Then, once the daemon's
# `indexer` threads have used no CPU for 6 s, the same `make -B -j2` again ("idle"). Per round
# it prints both times, their ratio,
# the indexer's CPU during each make (from /proc/PID/task/*/stat) and how long after the busy
# make the index caught up. With several --clawfs-bin, the builds take turns round by round,
# each on a fresh store on one journaled loop ext4 (direct I/O), so their figures compare.
#
#   bash bench/index_beside_make.sh --clawfs-bin BIN [--clawfs-bin BIN2]... [--rounds N]
#                                   [--workdir DIR]
#
# Run as root. Needs git, make, cc, python3, bc.
set -euo pipefail

bins=()
rounds=3
work=/tmp/clawfs-index-make
while [ $# -gt 0 ]; do
    case $1 in
        --clawfs-bin) bins+=("$2"); shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "index_beside_make.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#bins[@]} -gt 0 ] || { echo "index_beside_make.sh: give --clawfs-bin BIN (see --help)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "index_beside_make.sh: run as root" >&2; exit 1; }

mnt=$work/mnt
fs=$work/fs
dev=
cleanup() {
    for b in "${bins[@]}"; do "$b" umount "$mnt" >/dev/null 2>&1 || true; done
    umount "$fs" 2>/dev/null || umount -l "$fs" 2>/dev/null || true
    [ -n "$dev" ] && losetup -d "$dev" 2>/dev/null || true
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$fs" "$mnt"
truncate -s 6G "$work/fs.img"
mkfs.ext4 -q "$work/fs.img"
dev=$(losetup --direct-io=on -f --show "$work/fs.img")
mount "$dev" "$fs"

python3 "$(dirname "$0")/make_repo.py" "$fs/repo"
export GIT_CONFIG_NOSYSTEM=1 HOME=$work

# The CPU ticks of the daemon's indexer threads.
indexer_ticks() {
    local t sum=0
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = indexer ]; then
            sum=$((sum + $(awk '{print $14 + $15}' "$t/stat")))
        fi
    done
    echo "$sum"
}
# Waits until the indexer has used no CPU for 6 s in a row.
indexer_quiet() {
    local last now still=0
    last=$(indexer_ticks "$1")
    while [ $still -lt 6 ]; do
        sleep 1
        now=$(indexer_ticks "$1")
        if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; last=$now; fi
    done
}
now() { date +%s.%N; }

printf '| round | build | make, index catching up (s) | make, index idle (s) | busy / idle | indexer CPU during busy make (s) | caught up after (s) |\n'
printf '|---:|---|---:|---:|---:|---:|---:|\n'
for r in $(seq 1 "$rounds"); do
    for b in "${bins[@]}"; do
        rm -rf "$fs/store"
        "$b" init --store "$fs/store" >/dev/null
        "$b" mount --store "$fs/store" "$mnt" >/dev/null
        pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$fs/store/.clawfs/daemon.json")
        ws=$mnt/workspaces/default
        indexer_quiet "$pid"
        git clone -q "$fs/repo" "$ws/c"
        c0=$(indexer_ticks "$pid"); t0=$(now)
        make -s -B -j2 -C "$ws/c" >/dev/null
        t1=$(now); c1=$(indexer_ticks "$pid")
        indexer_quiet "$pid"
        t2=$(now)
        make -s -B -j2 -C "$ws/c" >/dev/null
        t3=$(now)
        busy=$(echo "$t1 - $t0" | bc -l); idle=$(echo "$t3 - $t2 - 0" | bc -l)
        caught=$(echo "$t2 - $t1 - 6" | bc -l)
        printf '| %d | %s | %.2f | %.2f | %.2fx | %.2f | %.1f |\n' "$r" "$(basename "$b")" \
            "$busy" "$idle" "$(echo "$busy / $idle" | bc -l)" "$(echo "($c1 - $c0) / 100" | bc -l)" "$caught"
        "$b" umount "$mnt" >/dev/null
    done
done
