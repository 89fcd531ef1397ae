#!/usr/bin/env bash
# bench/floor.sh — what one FUSE round trip costs on this machine, against native and ClawFS.
#
#   bash bench/floor.sh [--clawfs-bin PATH] [--floor-bin PATH] [--uring-floor-bin PATH]
#                       [--calls N] [--rounds N]
#
# Mounts the do-nothing FUSE file system `fuse_floor` (clawfs-fuse/examples/fuse_floor.rs: same
# crate, threads and options as ClawFS, no work per call), the same file system speaking
# FUSE-over-io_uring (examples/fuse_uring_floor.rs; the script sets the fuse module's
# enable_uring parameter for the run and puts it back) and a fresh ClawFS store, and times, in
# one run, two calls on native ext4, on both floor mounts and on ClawFS:
#   - stat of a missing name: one LOOKUP round trip on FUSE, a dentry miss natively;
#   - open+close of a small file: an OPEN round trip (and an asynchronous RELEASE) on FUSE;
# and, for the LOOKUP, the one thing ClawFS must do that the floor does not: look the missing name
# up in its store (a single-name fstatat beneath the store's open directory). ClawFS's names are
# in a folder the script makes through the mount. With the io_uring floor, both io_uring sides run
# again with the caller pinned to CPU 0, which shows what the scheduler's moves of the caller cost.
# No FUSE file system can answer faster than the floor mount, so the floor bounds the ratio any
# per-file workload can reach here (docs/benchmarks.md). Needs root (mounts). Cleans up on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLAWFS=""
FLOOR=""
URING=""
CALLS=20000
ROUNDS=5

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --floor-bin) FLOOR=$2; shift 2 ;;
        --uring-floor-bin) URING=$2; shift 2 ;;
        --calls) CALLS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "floor.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
die() { echo "floor.sh: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "must run as root (mounts)"
for n in "$CALLS" "$ROUNDS"; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "numeric option expected, got '$n'"; done

if [[ -z $CLAWFS || -z $FLOOR || -z $URING ]]; then
    (cd "$REPO" && cargo build --release -p clawfs-cli --bin clawfs -p clawfs-fuse --example fuse_floor \
        --example fuse_uring_floor) >&2 || die "cargo build failed"
fi
CLAWFS=$(realpath "${CLAWFS:-$REPO/target/release/clawfs}")
FLOOR=$(realpath "${FLOOR:-$REPO/target/release/examples/fuse_floor}")
URING=$(realpath "${URING:-$REPO/target/release/examples/fuse_uring_floor}")
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=""

# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d /tmp/clawfs-floor.XXXXXX)
FLOOR_PID=""
URING_PID=""
cleanup() {
    set +e
    unmount_clawfs "$CLAWFS" "$WORK/clawfs" >/dev/null 2>&1
    fusermount3 -u "$WORK/floor" 2>/dev/null || umount "$WORK/floor" 2>/dev/null
    umount "$WORK/uring" 2>/dev/null
    [[ -n $FLOOR_PID ]] && { kill "$FLOOR_PID" 2>/dev/null; wait "$FLOOR_PID" 2>/dev/null; }
    [[ -n $URING_PID ]] && { kill "$URING_PID" 2>/dev/null; wait "$URING_PID" 2>/dev/null; }
    [[ -n $URING_WAS ]] && echo "$URING_WAS" >"$URING_PARAM"
    remove_unmounted "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK"/{native,floor,uring,clawfs,bin}
cc -O2 -Wall -o "$WORK/bin/helper" "$REPO/bench/helper.c" || die "cannot compile bench/helper.c"
H=$WORK/bin/helper
"$FLOOR" "$WORK/floor" 2>"$WORK/floor.log" &
FLOOR_PID=$!
for _ in $(seq 100); do [[ -f $WORK/floor/f ]] && break; sleep 0.1; done
[[ -f $WORK/floor/f ]] || die "fuse_floor did not mount (see $WORK/floor.log)"

# FUSE-over-io_uring needs the module parameter, which only root can set and which the kernel
# reads when a file system mounts.
if [[ -w $URING_PARAM ]]; then
    URING_WAS=$(cat "$URING_PARAM")
    echo Y >"$URING_PARAM"
    "$URING" "$WORK/uring" 2>"$WORK/uring.log" &
    URING_PID=$!
    for _ in $(seq 100); do [[ -f $WORK/uring/f ]] && break; sleep 0.1; done
    [[ -f $WORK/uring/f ]] || die "fuse_uring_floor did not mount (see $WORK/uring.log)"
    ! grep -q "serving /dev/fuse" "$WORK/uring.log" || die "the kernel refused FUSE-over-io_uring"
fi
# Mounted after the parameter is set: ClawFS serves over the transport the io_uring floor uses.
"$CLAWFS" mount "$WORK/clawfs" --store "$WORK/store" >/dev/null || die "clawfs mount failed"
# The folder the names are looked up in is the benchmark's own, made through the mount.
mkdir "$WORK/clawfs/workspaces/default/floor"

head -c 4096 /dev/zero >"$WORK/native/f"
head -c 4096 /dev/zero >"$WORK/clawfs/workspaces/default/floor/f"
declare -A DIR=([native]=$WORK/native [floor]=$WORK/floor [uring]=$WORK/uring
    [clawfs]=$WORK/clawfs/workspaces/default/floor)
DIR[uringpin]=${DIR[uring]} DIR[clawfspin]=${DIR[clawfs]}
SIDES="native floor clawfs"
# Over io_uring, a caller woken on the other CPU pays for the move (docs/benchmarks.md): the
# "pin" sides run the caller on CPU 0 only, to tell the scheduler's share from the daemon's.
[[ -n $URING_PID ]] && SIDES="native floor uring clawfs uringpin clawfspin"


# Median of ROUNDS runs of `helper PROBE TARGET CALLS` per side. The rounds are interleaved
# (round 1 on every side, then round 2, ...), so a drift of the machine's speed during the run
# hits all sides alike instead of whichever side ran last.
declare -A R
for probe in statmiss openclose; do
    declare -A RUNS=()
    for ((i = 0; i < ROUNDS; i++)); do
        for t in $SIDES; do
            target=${DIR[$t]}
            [[ $probe == openclose ]] && target=$target/f
            pin=()
            [[ $t == *pin ]] && pin=(taskset -c 0)
            RUNS[$t]+="$("${pin[@]}" "$H" "$probe" "$target" "$CALLS") "
        done
        if [[ $probe == statmiss ]]; then
            RUNS[store]+="$("$H" statmissat "$WORK/store/workspaces/default/floor" "$CALLS") "
        fi
    done
    for t in $SIDES store; do
        [[ -n ${RUNS[$t]:-} ]] || continue
        R[$probe,$t]=$(tr ' ' '\n' <<<"${RUNS[$t]}" | grep . | sort -n |
            awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    done
    unset RUNS
done

echo "## FUSE round-trip floor — $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs"
echo
echo "µs per call, median of $ROUNDS interleaved runs of $CALLS calls; native = the directory's own fs ($(df -T "$WORK" | awk 'NR == 2 { print $2 }'))."
echo
echo "ClawFS serves over io_uring when the io_uring floor runs, and is set against that floor; otherwise against /dev/fuse's."
echo
echo "| Call | Native | FUSE floor (/dev/fuse) | FUSE floor (io_uring) | ClawFS | ClawFS − floor | store's own lookup | ClawFS − floor − store | floor, caller pinned | ClawFS, caller pinned | pinned: ClawFS − floor |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for probe in statmiss openclose; do
    label="stat of a missing name (1 LOOKUP)"
    [[ $probe == openclose ]] && label="open+close of a 4 KiB file (OPEN, async RELEASE)"
    awk -v l="$label" -v n="${R[$probe,native]}" -v f="${R[$probe,floor]}" -v u="${R[$probe,uring]:-}" \
        -v c="${R[$probe,clawfs]}" -v s="${R[$probe,store]:-}" -v up="${R[$probe,uringpin]:-}" \
        -v cp="${R[$probe,clawfspin]:-}" 'BEGIN {
            same = (u == "" ? f : u)
            printf "| %s | %.2f | %.2f | %s | %.2f | %.2f | %s | %s | %s | %s | %s |\n", l, n, f,
                (u == "" ? "n/a" : sprintf("%.2f", u)), c, c - same,
                (s == "" ? "—" : sprintf("%.2f", s)), (s == "" ? "—" : sprintf("%.2f", c - same - s)),
                (up == "" ? "n/a" : sprintf("%.2f", up)), (cp == "" ? "n/a" : sprintf("%.2f", cp)),
                (up == "" ? "n/a" : sprintf("%.2f", cp - up)) }'
done
[[ -n $URING_PID ]] || echo "(io_uring floor not run: $URING_PARAM is missing or not writable)"
