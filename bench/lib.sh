# bench/lib.sh — what the bench scripts share: the journaled ext4 they measure on, and taking
# mounts down on exit. Source it (bash); it runs nothing by itself.
# shellcheck shell=bash

# journaled_loop IMG SIZE DIR: makes a SIZE ext4 image at IMG with a journal, inode tables and
# journal initialised now (so ext4lazyinit does not write while we measure), attaches it with
# direct I/O where the loop driver allows it (no second page cache in the host filesystem) and
# mounts it at DIR. Sets LOOPDEV, and LOOP_DIO to on or off. Tool output goes to stderr.
# shellcheck disable=SC2034  # LOOP_DIO is read by the scripts that source this file
journaled_loop() {
    local img=$1 size=$2 dir=$3
    LOOPDEV=""
    rm -f "$img"
    truncate -s "$size" "$img"
    mkfs.ext4 -q -F -O has_journal -E lazy_itable_init=0,lazy_journal_init=0 "$img" >&2 || return 1
    LOOP_DIO=on
    LOOPDEV=$(losetup -f --show --direct-io=on "$img") || {
        LOOP_DIO=off
        LOOPDEV=$(losetup -f --show "$img")
    } || return 1
    mount -t ext4 "$LOOPDEV" "$dir"
}

# release_clawfs BIN: BIN when given, else a release build of this checkout (built now); the
# path on stdout.
release_clawfs() {
    if [[ -n $1 ]]; then echo "$1"; return; fi
    local repo
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    (cd "$repo" && cargo build --release -q -p clawfs-cli) >&2 || return 1
    echo "$repo/target/release/clawfs"
}

# take_down BIN WORK: unmounts the ClawFS at WORK/fs/mnt and the image at WORK/fs (loop device
# $LOOPDEV), then removes WORK: the EXIT trap of a bench script.
take_down() {
    set +e
    unmount_clawfs "$1" "$2/fs/mnt" 2>/dev/null
    release_loop "$2/fs" "$LOOPDEV" 2>/dev/null
    remove_unmounted "$2"
}

# is_mounted DIR: whether something is mounted at DIR.
is_mounted() { awk -v p="$1" '$5 == p { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# unmount_clawfs CLAWFS MNT: ClawFS's own umount; again a second later (the kernel may still
# be sending the last RELEASEs); then fusermount3; then lazily. Quiet when MNT is not mounted.
unmount_clawfs() {
    is_mounted "$2" || return 0
    "$1" umount "$2" >&2 || { sleep 1; "$1" umount "$2" >&2; } ||
        fusermount3 -u "$2" >&2 || umount -l "$2" >&2
}

# release_loop DIR DEV: unmounts DIR (again a second later, then lazily) and detaches DEV.
release_loop() {
    if is_mounted "$1"; then
        umount "$1" >&2 || { sleep 1; umount "$1" >&2; } || umount -l "$1" >&2
    fi
    [[ -z $2 ]] || losetup -d "$2" >&2
}

# remove_unmounted DIR: removes DIR unless a file system is still mounted below it (then says
# so): a recursive remove must never walk into a live mount.
remove_unmounted() {
    if awk -v p="$1/" 'index($5, p) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
        echo "${0##*/}: $1 still has a mount below it; left in place" >&2
    else
        rm -rf "$1"
    fi
}

# report_failure RC LOG: after a failed run (RC non-zero), says where the log is and shows
# its end.
report_failure() {
    if (($1 != 0)); then
        echo "${0##*/}: failed (exit $1); log kept in $2" >&2
        if [[ -f $2 ]]; then tail -n 20 "$2" >&2; fi
    fi
}
