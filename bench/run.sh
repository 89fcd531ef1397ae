#!/usr/bin/env bash
# bench/run.sh — ClawFS vs native ext4, in one run, on one journaled filesystem.
#
#   bash bench/run.sh [options]          (run from anywhere; needs root)
#
# Builds an ext4 image (with a journal) on a loop device under --workdir, puts a native
# directory and a ClawFS store on it, mounts ClawFS, runs every workload against both, and
# prints a markdown table (ratio = ClawFS throughput / native throughput; >1 means ClawFS is
# faster). Everything it creates is removed on exit, also on failure or Ctrl-C.
# See bench/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bash bench/run.sh [options]

  --workdir DIR        scratch directory (default /tmp/clawfs-bench); must not contain spaces
  --clawfs-bin PATH    use this clawfs binary instead of building target/release/clawfs
  --mount-args "ARGS"  extra arguments for `clawfs mount` (e.g. "--no-passthrough")
  --agent-running A    keep agent A sandboxed and asleep on the mount (`clawfs run --agent A --
                       sleep`) while everything runs: what an agent's presence costs the host's
                       other processes (compare with a run without it)
  --native-only        benchmark the native directory only (no ClawFS build or mount)
  --files N            files for create/stat/readdir and files in the git repo (default 10000)
  --seq-mb N           size of the sequential file in MiB (default 1024)
  --runs N             timed runs per measurement, median reported (default 5; 3 for create/dd)
  --fio-seconds N      duration of each random-read measurement (default 10)
  --fio-rounds N       random-read rounds per target, alternating, median reported (default 3)
  --image-size SIZE    size of the ext4 image (default 8G)
  --no-hyperfine       time with the built-in loop even if hyperfine is installed
  --out FILE           also write the markdown report to FILE
  --quick              small sizes for testing the harness (1000 files, 64 MiB, 2 runs, 1 × 2 s fio)
  -h, --help           this text
EOF
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=/tmp/clawfs-bench
CLAWFS=""
MOUNT_ARGS=""
AGENT_RUNNING=""
AGENT_PID=""
NATIVE_ONLY=0
NFILES=10000
SEQ_MB=1024
RUNS=5
FIO_SECONDS=10
FIO_ROUNDS=3
IMG_SIZE=8G
USE_HYPERFINE=1
OUT=""

while (($#)); do
    case $1 in
        --workdir) WORK=$2; shift 2 ;;
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --mount-args) MOUNT_ARGS=$2; shift 2 ;;
        --agent-running) AGENT_RUNNING=$2; shift 2 ;;
        --native-only) NATIVE_ONLY=1; shift ;;
        --files) NFILES=$2; shift 2 ;;
        --seq-mb) SEQ_MB=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --fio-seconds) FIO_SECONDS=$2; shift 2 ;;
        --fio-rounds) FIO_ROUNDS=$2; shift 2 ;;
        --image-size) IMG_SIZE=$2; shift 2 ;;
        --no-hyperfine) USE_HYPERFINE=0; shift ;;
        --out) OUT=$2; shift 2 ;;
        --quick) NFILES=1000; SEQ_MB=64; RUNS=2; FIO_SECONDS=2; FIO_ROUNDS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

die() { echo "run.sh: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

[[ $EUID -eq 0 ]] || die "must run as root (loop mount, drop_caches)"
[[ $WORK == /* ]] || WORK=$PWD/$WORK
[[ $WORK != *[[:space:]]* ]] || die "--workdir must not contain whitespace"
for n in "$NFILES" "$SEQ_MB" "$RUNS" "$FIO_SECONDS" "$FIO_ROUNDS"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "numeric option expected, got '$n'"
done
for tool in cc python3 git dd mkfs.ext4 losetup mount umount awk; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done
if ((USE_HYPERFINE)) && ! command -v hyperfine >/dev/null; then
    log "hyperfine not found (apt-get install -y hyperfine); using the built-in timing loop"
    USE_HYPERFINE=0
fi
HAVE_FIO=0
command -v fio >/dev/null && HAVE_FIO=1
((HAVE_FIO)) || log "fio not found (apt-get install -y fio); random reads use the C helper"

# Short runs for the expensive workloads (each one rewrites 10k files or 1 GiB).
SLOW_RUNS=$((RUNS < 3 ? RUNS : 3))

# ---------------------------------------------------------------- ClawFS binary
if ((!NATIVE_ONLY)); then
    if [[ -z $CLAWFS ]]; then
        log "building the release binary (cargo build --release -p clawfs-cli)"
        (cd "$REPO" && cargo build --release -p clawfs-cli) >&2 || die "cargo build failed"
        CLAWFS=$REPO/target/release/clawfs
    fi
    [[ -x $CLAWFS ]] || die "clawfs binary not executable: $CLAWFS"
    CLAWFS=$(realpath "$CLAWFS")
    CLAWFS_VERSION=$("$CLAWFS" --version 2>&1 | head -n1) || die "'$CLAWFS --version' failed: $CLAWFS_VERSION"
fi

# ---------------------------------------------------------------- layout + cleanup
IMG=$WORK/img
FS=$WORK/fs
BIN=$WORK/bin
RES=$WORK/results
LOG=$WORK/bench.log
NATIVE=$FS/native
STORE=$FS/store
MNT=$FS/mnt
CLAWDIR=$MNT/workspaces/default/bench
LOOPDEV=""
DAEMON_PID=""
MOUNTED_FS=0
MOUNTED_CLAWFS=0
MOUNT_PID=""
CLAWFS_STATUS=""

# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

stop_clawfs() {
    local i
    if [[ -n $AGENT_PID ]]; then
        kill "$AGENT_PID" 2>/dev/null || true
        wait "$AGENT_PID" 2>/dev/null || true
        AGENT_PID=""
    fi
    unmount_clawfs "$CLAWFS" "$MNT" >>"$LOG" 2>&1 || true
    # The daemon should exit on its own once unmounted; give it 10 s, then stop it (by pid).
    if [[ -n $DAEMON_PID ]]; then
        for ((i = 0; i < 100; i++)); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$DAEMON_PID" 2>/dev/null; then
            log "clawfs daemon $DAEMON_PID still running after unmount; sending SIGTERM"
            kill "$DAEMON_PID" 2>/dev/null || true
            sleep 1
            if kill -0 "$DAEMON_PID" 2>/dev/null; then kill -9 "$DAEMON_PID" 2>/dev/null || true; fi
        fi
        DAEMON_PID=""
    fi
    MOUNTED_CLAWFS=0
}

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if ((MOUNTED_CLAWFS)) || { [[ -n $CLAWFS ]] && is_mounted "$MNT"; }; then
        stop_clawfs
    fi
    if ((MOUNTED_FS)); then
        [[ -f $STORE/.clawfs/daemon.log ]] && cp "$STORE/.clawfs/daemon.log" "$RES/daemon.log"
        sync
        release_loop "$FS" "$LOOPDEV" 2>>"$LOG"
    fi
    rm -f "$IMG"
    rm -rf "$BIN"
    rmdir "$FS" 2>/dev/null
    report_failure "$rc" "$LOG"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK"
if is_mounted "$MNT" || is_mounted "$FS"; then
    die "$FS (or $MNT) is still mounted from an earlier run; unmount it first"
fi
rm -rf "$BIN" "$RES"
mkdir -p "$FS" "$BIN" "$RES"
: >"$LOG"

# ---------------------------------------------------------------- journaled ext4 on a loop device
log "creating a $IMG_SIZE journaled ext4 image in $WORK"
MOUNTED_FS=1
journaled_loop "$IMG" "$IMG_SIZE" "$FS" 2>>"$LOG" || die "cannot set up the ext4 image (see $LOG)"
FS_OPTS=$(awk -v p="$FS" '$5 == p { print $6 }' /proc/self/mountinfo)
FEATURES=$(dumpe2fs -h "$LOOPDEV" 2>/dev/null | awk -F: '/^Filesystem features/ { print $2 }')
[[ $FEATURES == *has_journal* ]] || die "the image has no journal (features:$FEATURES)"
mkdir -p "$NATIVE" "$STORE" "$MNT"

# ---------------------------------------------------------------- helpers
cc -O2 -Wall -o "$BIN/helper" "$REPO/bench/helper.c" 2>>"$LOG" || die "cannot compile bench/helper.c"
H=$BIN/helper

DROP_OK=1
sync
if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    DROP_OK=0
    log "cannot write /proc/sys/vm/drop_caches: 'cold' measurements are warm-cache"
fi
cat >"$BIN/dropcaches" <<EOF
#!/bin/sh
sync
[ $DROP_OK = 1 ] && echo 3 > /proc/sys/vm/drop_caches
exit 0
EOF
cat >"$BIN/fresh" <<'EOF'
#!/bin/sh
# fresh DIR: empty DIR (untimed), flush, settle.
rm -rf "$1" && mkdir "$1" && sync
EOF
cat >"$BIN/rmsync" <<'EOF'
#!/bin/sh
rm -f "$1" && sync
EOF
cat >"$BIN/warm" <<'EOF'
#!/bin/sh
# warm FILE: read it once so it is in the page cache.
cat "$1" > /dev/null
EOF
chmod +x "$BIN"/*
COLD=cold
((DROP_OK)) || COLD="warm (no drop_caches)"

# Reproducible git: ignore the user's and the system's config.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
GIT=(git -c user.name=bench -c user.email=bench@localhost -c init.defaultBranch=main)

# measure NAME RUNS WARMUP PREPARE CMD...  → median wall time in seconds on stdout.
# PREPARE (a command line, may be empty) runs untimed before every run. Commands are run
# without a shell, so PREPARE and CMD must be plain words (no redirections).
measure() {
    local name=$1 runs=$2 warmup=$3 prepare=$4
    shift 4
    echo "== $name: $*" >>"$LOG"
    if ((USE_HYPERFINE)); then
        local args=(-N --style basic --runs "$runs" --warmup "$warmup" --export-json "$RES/$name.json")
        [[ -n $prepare ]] && args+=(--prepare "$prepare")
        hyperfine "${args[@]}" "$*" >>"$LOG" 2>&1 || return 1
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["median"])' \
            "$RES/$name.json" || return 1
    else
        local i t0 t1 times=()
        for ((i = 0; i < warmup + runs; i++)); do
            if [[ -n $prepare ]]; then $prepare >>"$LOG" 2>&1 || return 1; fi
            t0=$(date +%s%N)
            "$@" >/dev/null 2>>"$LOG" || return 1
            t1=$(date +%s%N)
            ((i < warmup)) || times+=("$(((t1 - t0) / 1000))")
        done
        printf '%s\n' "${times[@]}" | sort -n |
            awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.6f\n", m / 1e6 }'
        echo "   median of ${#times[@]} runs (µs): ${times[*]}" >>"$LOG"
    fi
}

# fio_iops NAME FILE DIRECT(0|1) → IOPS of QD1 4 KiB random reads over the file.
fio_iops() {
    local name=$1 file=$2 direct=$3
    echo "== $name: fio randread direct=$direct $file" >>"$LOG"
    if ((HAVE_FIO)); then
        fio --name="$name" --filename="$file" --rw=randread --bs=4k --size="${SEQ_MB}M" \
            --ioengine=psync --iodepth=1 --numjobs=1 --direct="$direct" --invalidate=0 \
            --norandommap --randrepeat=0 --time_based --runtime="$FIO_SECONDS" --ramp_time=1 \
            --output-format=json --output="$RES/$name.json" >>"$LOG" 2>&1 || return 1
        python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' \
            "$RES/$name.json" || return 1
    else
        local mode=""
        ((direct)) && mode=direct
        "$H" randread "$file" "$FIO_SECONDS" 4096 $mode 2>>"$LOG" || return 1
    fi
}

# ---------------------------------------------------------------- ClawFS mount
if ((!NATIVE_ONLY)); then
    log "mounting ClawFS: $CLAWFS mount $MNT --store $STORE $MOUNT_ARGS"
    # `clawfs mount` daemonizes; run it in the background anyway so a foreground daemon
    # cannot hang the harness (then that process is the daemon).
    # shellcheck disable=SC2086  # MOUNT_ARGS is split on purpose
    "$CLAWFS" mount "$MNT" --store "$STORE" $MOUNT_ARGS >>"$LOG" 2>&1 &
    MOUNT_PID=$!
    MOUNTED_CLAWFS=1
    for ((i = 0; i < 300; i++)); do
        is_mounted "$MNT" && [[ -d $MNT/workspaces/default ]] && break
        if [[ -n $MOUNT_PID ]] && ! kill -0 "$MOUNT_PID" 2>/dev/null; then
            wait "$MOUNT_PID" || die "clawfs mount failed (exit $?)"
            MOUNT_PID=""
            is_mounted "$MNT" || die "clawfs mount exited but nothing is mounted at $MNT"
        fi
        sleep 0.1
    done
    is_mounted "$MNT" || die "ClawFS did not appear at $MNT within 30 s"
    [[ -d $MNT/workspaces/default ]] || die "$MNT/workspaces/default does not exist"
    if [[ -n $MOUNT_PID ]] && kill -0 "$MOUNT_PID" 2>/dev/null; then
        DAEMON_PID=$MOUNT_PID # stayed in the foreground
    else
        [[ -n $MOUNT_PID ]] && { wait "$MOUNT_PID" || true; }
        # Remember the daemon's pid (the clawfs process whose command line names our mount
        # point), so cleanup can stop exactly that process if unmounting does not end it.
        for p in /proc/[0-9]*; do
            [[ $(readlink "$p/exe" 2>/dev/null) == "$CLAWFS" ]] || continue
            cmdline=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
            [[ " $cmdline " == *" $MNT "* ]] && { DAEMON_PID=${p#/proc/}; break; }
        done
    fi
    log "ClawFS mounted (daemon pid ${DAEMON_PID:-unknown})"
    if [[ -n $AGENT_RUNNING ]]; then
        "$CLAWFS" run --store "$STORE" --mount "$MNT" --agent "$AGENT_RUNNING" -- \
            sleep infinity >>"$LOG" 2>&1 &
        AGENT_PID=$!
        for ((i = 0; i < 100; i++)); do
            pgrep -P "$AGENT_PID" -x sleep >/dev/null && break
            kill -0 "$AGENT_PID" 2>/dev/null || die "agent $AGENT_RUNNING did not start (see $LOG)"
            sleep 0.1
        done
        log "agent $AGENT_RUNNING running on the mount (clawfs run pid $AGENT_PID)"
    fi
    CLAWFS_STATUS=$("$CLAWFS" status 2>&1) || true
    echo "$CLAWFS_STATUS" >>"$LOG"
    mkdir -p "$CLAWDIR"
    TARGETS=(native clawfs)
else
    TARGETS=(native)
fi
declare -A DIR=([native]=$NATIVE/bench [clawfs]=$CLAWDIR)
mkdir -p "${DIR[native]}"

# ---------------------------------------------------------------- results
# VAL[w,t]: throughput-like number (higher is better) used for the ratio; FIG[w,t]: display text.
declare -A VAL FIG
WORKLOADS=()
declare -A LABEL GOAL

record() { # record WORKLOAD TARGET VALUE FIGURE
    VAL[$1,$2]=$3
    FIG[$1,$2]=$4
    log "  $1 [$2]: $4"
}
failed() { # failed WORKLOAD TARGET
    VAL[$1,$2]=""
    FIG[$1,$2]="error (see log)"
    log "  $1 [$2]: FAILED, see $LOG"
}
workload() { # workload KEY GOAL LABEL
    WORKLOADS+=("$1")
    GOAL[$1]=$2
    LABEL[$1]=$3
}
fmt() { awk -v x="$1" -v d="${2:-1}" 'BEGIN { printf "%.*f", d, x }'; }
# by_time W T SECONDS UNITS UNIT: throughput = UNITS/SECONDS, display "N UNIT/s (T ms|s)"
by_time() {
    local w=$1 t=$2 s=$3 n=$4 unit=$5 rate shown
    rate=$(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.1f", n / s }')
    shown=$(awk -v s="$s" 'BEGIN { if (s < 1) printf "%.1f ms", s * 1000; else printf "%.2f s", s }')
    case $unit in
        MiB) record "$w" "$t" "$rate" "$(fmt "$rate" 0) MiB/s" ;;
        run) record "$w" "$t" "$rate" "$shown" ;;
        *) record "$w" "$t" "$rate" "$(awk -v r="$rate" 'BEGIN { printf "%.0f", r }') $unit/s ($shown)" ;;
    esac
}

N=$NFILES
K=$((N / 1000))k
((N % 1000 == 0)) || K=$N
SEQ_LABEL="${SEQ_MB} MiB"
((SEQ_MB % 1024 == 0)) && SEQ_LABEL="$((SEQ_MB / 1024)) GiB"

workload create 0.4 "create+write+close $K files × 4 KiB (one process)"
workload stat_cold 0.5 "stat $K files, $COLD"
workload stat_warm 0.5 "stat $K files, warm cache"
workload readdir_cold 0.5 "readdir of a $K-entry dir, $COLD"
workload readdir_warm 0.5 "readdir of a $K-entry dir, warm cache"
workload seqwrite 0.9 "sequential write $SEQ_LABEL (dd bs=1M conv=fsync)"
workload seqread 0.9 "sequential read $SEQ_LABEL, $COLD (dd bs=1M)"
workload randread_warm 0.8 "random 4 KiB reads, QD1, warm page cache (IOPS)"
workload randread_direct 0.8 "random 4 KiB reads, QD1, O_DIRECT (IOPS)"
workload repo_setup - "build git repo: write $K files + git add + commit"
workload git_status 0.5 "git status, $K-file repo, warm"
workload grep 0.5 "grep -r (working tree, .git excluded), warm"

T_START=$(date +%s)
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
log "workloads: ${#WORKLOADS[@]} × ${TARGETS[*]}; log: $LOG"

# Workloads are interleaved (native, then clawfs, for each) so slow drift on the shared
# machine hits both sides alike.
for t in "${TARGETS[@]}"; do mkdir -p "${DIR[$t]}/files"; done

log "create: $N files × 4 KiB, $SLOW_RUNS runs"
for t in "${TARGETS[@]}"; do
    d=${DIR[$t]}
    if s=$(measure "create-$t" "$SLOW_RUNS" 0 "$BIN/fresh $d/files" "$H" create "$d/files" "$N" 4096); then
        by_time create "$t" "$s" "$N" files
    else failed create "$t"; fi
    sync
done

# cold_and_warm PROBE TARGET UNIT: `helper PROBE` over the N files of TARGET, timed after
# drop_caches (PROBE_cold) and with warm caches after one untimed run (PROBE_warm).
cold_and_warm() {
    local probe=$1 t=$2 unit=$3 s
    local files=${DIR[$t]}/files
    if s=$(measure "${probe}_cold-$t" "$RUNS" 0 "$BIN/dropcaches" "$H" "$probe" "$files" "$N"); then
        by_time "${probe}_cold" "$t" "$s" "$N" "$unit"
    else failed "${probe}_cold" "$t"; fi
    if s=$(measure "${probe}_warm-$t" "$RUNS" 1 "" "$H" "$probe" "$files" "$N"); then
        by_time "${probe}_warm" "$t" "$s" "$N" "$unit"
    else failed "${probe}_warm" "$t"; fi
}

log "stat: $N files"
for t in "${TARGETS[@]}"; do cold_and_warm stat "$t" stats; done

log "readdir: $N entries"
for t in "${TARGETS[@]}"; do cold_and_warm readdir "$t" entries; done

log "sequential write/read: $SEQ_LABEL, $SLOW_RUNS runs each"
for t in "${TARGETS[@]}"; do
    f=${DIR[$t]}/big
    if s=$(measure "seqwrite-$t" "$SLOW_RUNS" 0 "$BIN/rmsync $f" \
        dd if=/dev/zero of="$f" bs=1M count="$SEQ_MB" conv=fsync status=none); then
        by_time seqwrite "$t" "$s" "$SEQ_MB" MiB
    else failed seqwrite "$t"; fi
    if [[ -f $f ]] && s=$(measure "seqread-$t" "$SLOW_RUNS" 0 "$BIN/dropcaches" \
        dd if="$f" of=/dev/null bs=1M status=none); then
        by_time seqread "$t" "$s" "$SEQ_MB" MiB
    else failed seqread "$t"; fi
done

log "random 4 KiB reads: ${FIO_SECONDS}s each, $FIO_ROUNDS rounds alternating targets, $([[ $HAVE_FIO = 1 ]] && echo fio || echo helper)"
# One 10 s run per side swung ±25% between runs on this shared machine; alternating rounds and
# taking each side's median keeps drift from landing on one side only.
for mode in warm direct; do
    declare -A IOPS=()
    for ((round = 1; round <= FIO_ROUNDS; round++)); do
        for t in "${TARGETS[@]}"; do
            f=${DIR[$t]}/big
            [[ -f $f ]] || continue
            if [[ $mode == warm ]]; then "$BIN/warm" "$f" || continue; else "$BIN/dropcaches" || continue; fi
            direct=0
            [[ $mode == direct ]] && direct=1
            iops=$(fio_iops "randread_$mode-$t-$round" "$f" "$direct") && IOPS[$t]+="$iops "
        done
    done
    for t in "${TARGETS[@]}"; do
        read -ra got <<<"${IOPS[$t]:-}"
        if ((${#got[@]} == FIO_ROUNDS)); then
            med=$(printf '%s\n' "${got[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
            echo "   randread_$mode [$t] IOPS per round: ${got[*]}" >>"$LOG"
            record "randread_$mode" "$t" "$med" "$med IOPS"
        else failed "randread_$mode" "$t"; fi
    done
    unset IOPS
done
for t in "${TARGETS[@]}"; do rm -f "${DIR[$t]}/big"; done

log "git repository: $N files"
for t in "${TARGETS[@]}"; do
    r=${DIR[$t]}/repo
    rm -rf "$r"
    t0=$(date +%s%N)
    if "$H" tree "$r" "$(((N + 99) / 100))" "$N" 2>>"$LOG" &&
        "${GIT[@]}" -C "$r" init -q >>"$LOG" 2>&1 &&
        "${GIT[@]}" -C "$r" add -A >>"$LOG" 2>&1 &&
        "${GIT[@]}" -C "$r" commit -q -m bench >>"$LOG" 2>&1; then
        sync
        t1=$(date +%s%N)
        # Let a second pass, then refresh the index once (untimed): entries whose mtime is
        # not older than the index are "racily clean" and git would re-read them every time.
        sleep 1.1
        git -C "$r" status >/dev/null 2>>"$LOG" || true
        by_time repo_setup "$t" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')" 1 run
    else
        failed repo_setup "$t"
        continue
    fi
    if s=$(measure "git_status-$t" "$RUNS" 1 "" git -C "$r" status); then
        by_time git_status "$t" "$s" 1 run
    else failed git_status "$t"; fi
    if s=$(measure "grep-$t" "$RUNS" 1 "" grep -r --exclude-dir=.git CLAWFS_NEEDLE "$r"); then
        by_time grep "$t" "$s" 1 run
    else failed grep "$t"; fi
done
T_END=$(date +%s)
LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report
if ((!NATIVE_ONLY)); then
    if [[ " $MOUNT_ARGS " == *" --no-passthrough "* ]]; then
        PASSTHROUGH="off (--no-passthrough)"
    else
        PASSTHROUGH="on (default; used where the kernel allows)"
    fi
    # What the daemon itself reports, e.g. "passthrough: requested".
    pt=$(awk -v m="$MNT" '$1 == m":" { f = 1; next } /^[^ ]/ { f = 0 } f && /passthrough:/ { sub(/^ *passthrough: */, ""); print; exit }' <<<"${CLAWFS_STATUS:-}")
    [[ -n $pt ]] && PASSTHROUGH="$PASSTHROUGH; clawfs status says: $pt"
fi

report() {
    local w nv cv ratio res passes=0 misses=0
    echo "## ClawFS benchmark — $(date -u +%Y-%m-%d)"
    echo
    echo "Ratio = ClawFS throughput / native throughput (for timed workloads: native time / ClawFS time)."
    echo "Above 1 means ClawFS is faster; Goal is the minimum ratio. Figures are medians (see notes below)."
    echo
    echo "| Workload | Native | ClawFS | Ratio | Goal | Result |"
    echo "|---|---:|---:|---:|---:|:---:|"
    for w in "${WORKLOADS[@]}"; do
        nv=${VAL[$w,native]:-}
        cv=${VAL[$w,clawfs]:-}
        ratio="—"
        res="—"
        if [[ -n $nv && -n $cv ]]; then
            ratio=$(awk -v a="$cv" -v b="$nv" 'BEGIN { printf "%.2f", a / b }')
            if [[ ${GOAL[$w]} != - ]]; then
                if awk -v r="$ratio" -v g="${GOAL[$w]}" 'BEGIN { exit !(r >= g) }'; then
                    res=PASS; passes=$((passes + 1))
                else
                    res=MISS; misses=$((misses + 1))
                fi
            fi
            ratio="${ratio}×"
        elif ((!NATIVE_ONLY)) && [[ ${GOAL[$w]} != - ]]; then
            res=MISS; misses=$((misses + 1))
        fi
        local goal="≥${GOAL[$w]}×"
        [[ ${GOAL[$w]} == - ]] && goal="—"
        printf '| %s | %s | %s | %s | %s | %s |\n' "${LABEL[$w]}" "${FIG[$w,native]:-—}" \
            "${FIG[$w,clawfs]:-—}" "$ratio" "$goal" "$res"
    done
    echo
    ((NATIVE_ONLY)) || echo "**$passes PASS, $misses MISS.**"
    echo
    echo "Machine and setup:"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) CPUs" \
        "($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)); RAM $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "- filesystem: ext4 with journal, mounted $FS_OPTS, on a $IMG_SIZE image via loop device" \
        "(direct-io=$LOOP_DIO) on the host root fs; native dir and ClawFS store on the same fs"
    if ((NATIVE_ONLY)); then
        echo "- ClawFS: not run (--native-only)"
    else
        echo "- ClawFS: $CLAWFS_VERSION; mount args: ${MOUNT_ARGS:-(none)}; passthrough: $PASSTHROUGH"
        [[ -z $AGENT_RUNNING ]] || echo "- agent $AGENT_RUNNING asleep on the mount, sandboxed, throughout"
    fi
    echo "- timing: $( ((USE_HYPERFINE)) && hyperfine --version || echo 'built-in loop (date +%s%N)'), median of $RUNS runs" \
        "($SLOW_RUNS for create and dd; 1 warm-up run for warm workloads); random reads:" \
        "$( ((HAVE_FIO)) && fio --version || echo 'C helper') psync QD1, ${FIO_SECONDS} s, median of $FIO_ROUNDS alternating rounds"
    echo "- cold = \`sync; echo 3 > /proc/sys/vm/drop_caches\` before every run$( ((DROP_OK)) || echo ' (NOT possible here: all runs warm)')"
    echo "- create: one C process does open(O_CREAT)+write(4 KiB)+close per file, no fsync;" \
        "the directory is emptied and synced (untimed) before each run"
    echo "- stat = lstat of every file by path; readdir = opendir+readdir of the whole directory (no stat)"
    echo "- warm random reads: the file is read once through the mount first; O_DIRECT: caches dropped first"
    echo "- git repo: $N files (~1–3 KiB) in $(((N + 99) / 100)) directories two levels deep; grep pattern matches ~1% of files"
    echo "- wall time of the run: $((T_END - T_START)) s; load average at start $LOAD_START, at end $LOAD_END" \
        "(other load on the $(nproc) CPUs skews both sides; rerun when it is high)"
}

REPORT=$(report)
echo
echo "$REPORT"
if [[ -n $OUT ]]; then
    echo "$REPORT" >"$OUT"
    log "report written to $OUT"
fi
