#!/usr/bin/env bash
# bench/compare.sh — two clawfs binaries side by side on one journaled ext4, same run.
#
#   bash bench/compare.sh --old PATH --new PATH [--old-args ARGS] [--new-args ARGS] [--files N]
#                         [--rounds N] [--image-dir DIR]
#
# Mounts a store with each binary on one loop-device ext4 image, writes the same source-like
# tree (bench/helper.c `tree`) into each, makes it a git repository, and then, alternating the
# two mounts each round, times a warm `grep -r`, a `git status` and a sequential write of 1 GiB
# (`dd bs=1M conv=fsync`, as bench/run.sh), so that the machine's drifting load hits both
# alike. --image-dir puts the image elsewhere than /tmp: on a tmpfs (/dev/shm) the host disk's
# own variation (often 2x between rounds) is out of the figures, and what is left is the binaries'
# doing. Needs root; cleans up on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OLD="" NEW="" OLD_ARGS="" NEW_ARGS="" FILES=10000 ROUNDS=7 IMAGE_DIR=""
while (($#)); do
    case $1 in
        --old) OLD=$2; shift 2 ;;
        --new) NEW=$2; shift 2 ;;
        --old-args) OLD_ARGS=$2; shift 2 ;;
        --new-args) NEW_ARGS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --image-dir) IMAGE_DIR=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare.sh: unknown option: $1" >&2; exit 2 ;;
    esac
done
die() { echo "compare.sh: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "must run as root (loop mount)"
[[ -x $OLD && -x $NEW ]] || die "--old and --new must name clawfs binaries"
[[ -z $IMAGE_DIR || -d $IMAGE_DIR ]] || die "--image-dir: $IMAGE_DIR is not a directory"
for n in "$FILES" "$ROUNDS"; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "numeric option expected, got '$n'"; done

# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"
W=$(mktemp -d /tmp/clawfs-compare.XXXXXX)
IMG=$W/img
[[ -z $IMAGE_DIR ]] || IMG=$(mktemp "$IMAGE_DIR/clawfs-compare-img.XXXXXX")
LOOPDEV=""
declare -A BIN=([old]=$OLD [new]=$NEW) ARGS=([old]=$OLD_ARGS [new]=$NEW_ARGS)
cleanup() {
    set +e
    for t in old new; do unmount_clawfs "${BIN[$t]}" "$W/fs/$t" 2>/dev/null; done
    sleep 0.5
    release_loop "$W/fs" "$LOOPDEV"
    rm -f "$IMG"
    remove_unmounted "$W"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$W/fs"
journaled_loop "$IMG" 4G "$W/fs" || die "cannot set up the ext4 image"
cc -O2 -Wall -o "$W/helper" "$REPO/bench/helper.c" || die "cannot compile bench/helper.c"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
for t in old new; do
    mkdir -p "$W/fs/$t"
    # shellcheck disable=SC2086 # extra mount options, split as words
    "${BIN[$t]}" mount "$W/fs/$t" --store "$W/fs/store-$t" ${ARGS[$t]} >/dev/null || die "$t: mount failed"
    r=$W/fs/$t/workspaces/default/repo
    "$W/helper" tree "$r" $(((FILES + 99) / 100)) "$FILES"
    git -C "$r" -c init.defaultBranch=main init -q
    git -C "$r" add -A
    git -C "$r" -c user.name=bench -c user.email=bench@localhost commit -qm bench
done
sleep 1.1 # past git's racy-clean window
ms() {
    local s
    s=$(date +%s%N)
    "$@" >/dev/null
    echo $((($(date +%s%N) - s) / 1000000))
}
declare -A G S D
for t in old new; do git -C "$W/fs/$t/workspaces/default/repo" status >/dev/null; done
for ((i = 0; i < ROUNDS; i++)); do
    for t in old new; do
        r=$W/fs/$t/workspaces/default/repo
        G[$t]+="$(ms grep -r --exclude-dir=.git CLAWFS_NEEDLE "$r") "
        S[$t]+="$(ms git -C "$r" status) "
        f=$W/fs/$t/workspaces/default/seqwrite
        D[$t]+="$(ms dd if=/dev/zero of="$f" bs=1M count=1024 conv=fsync status=none) "
        # Freeing 1 GiB goes on after rm returns (the backing file's last close comes with the
        # kernel's asynchronous RELEASE, then the journal commits): let it end here, untimed,
        # or it lands in the other binary's next write.
        rm -f "$f"
        sleep 0.2
        sync -f "$W/fs"
    done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "| binary | grep -r, median ms | git status, median ms | sequential write 1 GiB, median ms |"
echo "|---|---:|---:|---:|"
for t in old new; do
    echo "| $t (${BIN[$t]}) | $(median <<<"${G[$t]}") | $(median <<<"${S[$t]}") | $(median <<<"${D[$t]}") |"
done
echo
echo "$FILES files, $ROUNDS alternating rounds; grep times: old ${G[old]}/ new ${G[new]}; git status: old ${S[old]}/ new ${S[new]}; sequential write: old ${D[old]}/ new ${D[new]}"
