#!/usr/bin/env bash
# bench/agent_tools.sh — latency of the agent tools through a ClawFS mount, against `cat`.
#
#   bash bench/agent_tools.sh [options]        (run from anywhere; needs root)
#
# Same setup as bench/run.sh: a journaled ext4 image on a loop device, a ClawFS store on it,
# mounted with the release binary. Then p50/p99 of each call through tools/call/<tool> (one
# descriptor: open, write the request, read the response, close), timed in-process by
# bench/tools_helper.c, next to the same process reading the same file (open, read to EOF,
# close: what `cat` does, without the process start):
#
#   info, read_range (100 lines)   on a 1 MiB Markdown file      vs cat of that file (goal ≤ 2×)
#   outline                        of a 100,000-line file        vs cat of that file
#   apply_patch (3 hunks)          on the 1 MiB file             vs cat of that file
#   search_files                   over a 10,000-file workspace  vs grep -rl of the same tree
#
# Everything it creates is removed on exit, also on failure or Ctrl-C. See bench/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bash bench/agent_tools.sh [options]

  --workdir DIR        scratch directory (default /tmp/clawfs-bench-tools); no spaces
  --clawfs-bin PATH    use this clawfs binary instead of building target/release/clawfs
  --mount-args "ARGS"  extra arguments for `clawfs mount`
  --runs N             timed calls per small measurement (default 300)
  --files N            files in the search_files workspace (default 10000)
  --image-size SIZE    size of the ext4 image (default 4G)
  --out FILE           also write the markdown report to FILE
  --quick              100 runs, 1000 files: for testing the harness
  -h, --help           this text
EOF
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=/tmp/clawfs-bench-tools
CLAWFS=""
MOUNT_ARGS=""
RUNS=300
NFILES=10000
IMG_SIZE=4G
OUT=""

while (($#)); do
    case $1 in
        --workdir) WORK=$2; shift 2 ;;
        --clawfs-bin) CLAWFS=$2; shift 2 ;;
        --mount-args) MOUNT_ARGS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --files) NFILES=$2; shift 2 ;;
        --image-size) IMG_SIZE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --quick) RUNS=100; NFILES=1000; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "tools.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

die() { echo "tools.sh: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

[[ $EUID -eq 0 ]] || die "must run as root (loop mount)"
[[ $WORK == /* ]] || WORK=$PWD/$WORK
[[ $WORK != *[[:space:]]* ]] || die "--workdir must not contain whitespace"
for n in "$RUNS" "$NFILES"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "numeric option expected, got '$n'"
done
for tool in cc python3 grep mkfs.ext4 losetup mount umount awk sha256sum; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done
# Few runs for the slow calls (a whole-tree search, an fsynced rewrite of 1 MiB).
SLOW_RUNS=$((RUNS / 5 > 20 ? RUNS / 5 : 20))
PATCH_RUNS=$((RUNS / 3 > 20 ? RUNS / 3 : 20))

if [[ -z $CLAWFS ]]; then
    log "building the release binary (cargo build --release -p clawfs-cli)"
    (cd "$REPO" && cargo build --release -p clawfs-cli) >&2 || die "cargo build failed"
    CLAWFS=$REPO/target/release/clawfs
fi
[[ -x $CLAWFS ]] || die "clawfs binary not executable: $CLAWFS"
CLAWFS=$(realpath "$CLAWFS")
CLAWFS_VERSION=$("$CLAWFS" --version 2>&1 | head -n1)

# ---------------------------------------------------------------- layout + cleanup
IMG=$WORK/img
FS=$WORK/fs
BIN=$WORK/bin
REQ=$WORK/requests
LOG=$WORK/bench.log
STORE=$FS/store
MNT=$FS/mnt
WS=$MNT/workspaces/default
LOOPDEV=""
DAEMON_PID=""
MOUNTED_FS=0

# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

cleanup() {
    local rc=$? i
    set +e
    trap - EXIT INT TERM
    unmount_clawfs "$CLAWFS" "$MNT" >>"$LOG" 2>&1
    if [[ -n $DAEMON_PID ]]; then
        for ((i = 0; i < 100; i++)); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$DAEMON_PID" 2>/dev/null && kill "$DAEMON_PID" 2>/dev/null
    fi
    if ((MOUNTED_FS)); then
        [[ -f $STORE/.clawfs/daemon.log ]] && cp "$STORE/.clawfs/daemon.log" "$WORK/daemon.log"
        release_loop "$FS" "$LOOPDEV" 2>>"$LOG"
    fi
    rm -f "$IMG"
    rm -rf "$BIN" "$REQ"
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
rm -rf "$BIN" "$REQ"
mkdir -p "$FS" "$BIN" "$REQ"
: >"$LOG"

log "creating a $IMG_SIZE journaled ext4 image in $WORK"
MOUNTED_FS=1
journaled_loop "$IMG" "$IMG_SIZE" "$FS" 2>>"$LOG" || die "cannot set up the ext4 image (see $LOG)"
mkdir -p "$STORE" "$MNT"

cc -O2 -Wall -o "$BIN/helper" "$REPO/bench/helper.c" 2>>"$LOG" || die "cannot compile bench/helper.c"
cc -O2 -Wall -o "$BIN/tools_helper" "$REPO/bench/tools_helper.c" 2>>"$LOG" ||
    die "cannot compile bench/tools_helper.c"
TH=$BIN/tools_helper

log "mounting ClawFS: $CLAWFS mount $MNT --store $STORE $MOUNT_ARGS"
# shellcheck disable=SC2086  # MOUNT_ARGS is split on purpose
"$CLAWFS" mount "$MNT" --store "$STORE" $MOUNT_ARGS >>"$LOG" 2>&1 || die "clawfs mount failed"
is_mounted "$MNT" || die "nothing mounted at $MNT"
for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == "$CLAWFS" ]] || continue
    cmdline=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    [[ " $cmdline " == *" $MNT "* ]] && { DAEMON_PID=${p#/proc/}; break; }
done
log "ClawFS mounted (daemon pid ${DAEMON_PID:-unknown})"

# ---------------------------------------------------------------- data and requests
log "writing the files: 1 MiB note, 100,000-line note, $NFILES-file workspace"
mkdir -p "$MNT/workspaces/many"
"$BIN/helper" tree "$MNT/workspaces/many/repo" "$(((NFILES + 99) / 100))" "$NFILES" 2>>"$LOG" ||
    die "helper tree failed"
python3 - "$WS" "$REQ" <<'EOF'
import hashlib, json, sys
ws, req = sys.argv[1], sys.argv[2]
# A 1 MiB Markdown note: a heading every 40 lines, ~70-character lines.
lines, size, i = [], 0, 0
while size < 1 << 20:
    i += 1
    line = f"## Section {i // 40}" if i % 40 == 1 else f"Line {i}: lorem ipsum dolor sit amet, consectetur adipiscing elit."
    lines.append(line + "\n")
    size += len(line) + 1
big = "".join(lines)
open(f"{ws}/big.md", "w").write(big)
# 100,000 lines, a heading every 50.
outline = "".join(
    (f"# Part {n // 50}\n" if n % 50 == 0 else f"text line {n} of the long note\n") for n in range(100000)
)
open(f"{ws}/long.md", "w").write(outline)
# A 50 MB note (a heading every 40 lines), for the reading tools that stream.
with open(f"{ws}/huge.md", "w") as f:
    hsize, hn = 0, 0
    while hsize < 50_000_000:
        chunk = "".join(
            (f"## Chapter {(hn + k) // 40}\n" if (hn + k) % 40 == 0 else f"Line {hn + k}: lorem ipsum dolor sit amet, consectetur adipiscing elit.\n")
            for k in range(4000)
        )
        f.write(chunk)
        hsize += len(chunk)
        hn += 4000
# A 3-hunk patch of big.md and its reverse.
n = len(lines)
at = [n // 10, n // 2, 9 * n // 10]
def patch(src, dst):
    out = ["--- a/big.md\n", "+++ b/big.md\n"]
    for a in at:
        out.append(f"@@ -{a},3 +{a},3 @@\n")
        out.append(" " + src[a - 1])
        out.append("-" + src[a])
        out.append("+" + dst[a])
        out.append(" " + src[a + 1])
    return "".join(out)
patched = list(lines)
for a in at:
    patched[a] = patched[a].replace("lorem", "LOREM")
sha0 = hashlib.sha256(big.encode()).hexdigest()
sha1 = hashlib.sha256("".join(patched).encode()).hexdigest()
def write(name, obj):
    json.dump(obj, open(f"{req}/{name}.json", "w"))
write("list_allowed", {})
write("info", {"path": "big.md"})
mid = n // 2
write("read_range", {"path": "big.md", "start": mid, "end": mid + 99})
write("outline", {"path": "long.md"})
write("huge_range", {"path": "huge.md", "start": hn - 150, "end": hn - 51})
write("huge_outline", {"path": "huge.md"})
write("search_files", {"workspace": "many", "pattern": "CLAWFS_NEEDLE", "max_results": 500})
write("patch_fwd", {"path": "big.md", "base_sha256": sha0, "patch": patch(lines, patched)})
write("patch_back", {"path": "big.md", "base_sha256": sha1, "patch": patch(patched, lines)})
print(f"big.md: {len(big)} bytes, {n} lines; long.md: {len(outline)} bytes; huge.md: {hsize} bytes, {hn} lines", file=sys.stderr)
EOF
sync

# ---------------------------------------------------------------- measurements
declare -A P50 P99 BYTES
measure() { # measure KEY CMD... → P50/P99/BYTES[KEY]
    local key=$1 out
    shift
    echo "== $key: $*" >>"$LOG"
    if out=$("$@" 2>>"$LOG"); then
        read -r P50[$key] P99[$key] _ BYTES[$key] <<<"$out"
        log "  $key: p50 ${P50[$key]} µs, p99 ${P99[$key]} µs"
    else
        P50[$key]=""
        P99[$key]=""
        log "  $key: FAILED (see $LOG)"
    fi
}

# grep -rl over the tree, RUNS times, in a loop (process start included, as for any grep).
grep_times() {
    local runs=$1 i t0 t1
    grep -rl CLAWFS_NEEDLE "$MNT/workspaces/many/repo" >/dev/null # warm-up
    for ((i = 0; i < runs; i++)); do
        t0=$(date +%s%N)
        grep -rl CLAWFS_NEEDLE "$MNT/workspaces/many/repo" >/dev/null
        t1=$(date +%s%N)
        echo $(((t1 - t0) / 1000))
    done | sort -n | awk '{ a[NR] = $1; s += $1 } END {
        p = int(0.99 * NR + 0.999999); if (p < 1) p = 1
        printf "%.1f %.1f %.1f 0\n", a[int((NR + 1) / 2)], a[p], s / NR }'
}

LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
log "measuring ($RUNS runs; $SLOW_RUNS for search_files, $PATCH_RUNS for apply_patch)"
measure cat_big "$TH" cat "$WS/big.md" "$RUNS" 20
measure catp_big "$TH" spawn "$RUNS" 20 cat "$WS/big.md"
measure list_allowed "$TH" call "$MNT" list_allowed "$REQ/list_allowed.json" "$RUNS" 20
measure info "$TH" call "$MNT" info "$REQ/info.json" "$RUNS" 20
measure read_range "$TH" call "$MNT" read_range "$REQ/read_range.json" "$RUNS" 20
measure cat_long "$TH" cat "$WS/long.md" "$RUNS" 20
measure catp_long "$TH" spawn "$RUNS" 20 cat "$WS/long.md"
measure outline "$TH" call "$MNT" outline "$REQ/outline.json" "$RUNS" 20
measure cat_huge "$TH" cat "$WS/huge.md" "$SLOW_RUNS" 2
measure huge_range "$TH" call "$MNT" read_range "$REQ/huge_range.json" "$SLOW_RUNS" 2
measure huge_outline "$TH" call "$MNT" outline "$REQ/huge_outline.json" "$SLOW_RUNS" 2
measure grep "grep_times" "$SLOW_RUNS"
measure search_files "$TH" call "$MNT" search_files "$REQ/search_files.json" "$SLOW_RUNS" 2
measure apply_patch "$TH" call "$MNT" apply_patch "$REQ/patch_fwd.json" "$REQ/patch_back.json" "$PATCH_RUNS" 2
measure cat_big2 "$TH" cat "$WS/big.md" "$RUNS" 20
LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report
ratio() { # ratio A B → A/B with two decimals, or "–"
    if [[ -n ${P50[$1]} && -n ${P50[$2]} ]]; then
        awk -v a="${P50[$1]}" -v b="${P50[$2]}" 'BEGIN { printf "%.2f", a / b }'
    else echo "–"; fi
}
us() { # us KEY P50|P99 → "1234 µs" / "12.3 ms"
    local v
    if [[ $2 == p50 ]]; then v=${P50[$1]}; else v=${P99[$1]}; fi
    [[ -n $v ]] || { echo "error"; return; }
    awk -v v="$v" 'BEGIN { if (v >= 10000) printf "%.1f ms", v / 1000; else printf "%.0f µs", v }'
}
verdict() { # verdict RATIO GOAL
    [[ $1 == "–" || $2 == "–" ]] && { echo "–"; return; }
    awk -v r="${1%×}" -v g="$2" 'BEGIN { print (r <= g) ? "PASS" : "MISS" }'
}
row() { # row LABEL KEY BASE BASELABEL GOAL [PROCBASE]: ratios to BASE and to PROCBASE
    local r rp="–"
    r=$(ratio "$2" "$3")
    [[ -n ${6:-} ]] && rp=$(ratio "$2" "$6")
    [[ $r == "–" ]] || r="$r×"
    [[ $rp == "–" ]] || rp="$rp×"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$(us "$2" p50)" \
        "$(us "$2" p99)" "$4" "$(us "$3" p50)" "$(us "$3" p99)" "$r" "$(verdict "$r" "$5")" \
        "$rp" "$(verdict "$rp" "$5")"
}
# The cat baseline: the lower of the two cat runs (before and after the calls).
if [[ -n ${P50[cat_big2]} && -n ${P50[cat_big]} ]] &&
    awk -v a="${P50[cat_big2]}" -v b="${P50[cat_big]}" 'BEGIN { exit !(a < b) }'; then
    P50[cat_big]=${P50[cat_big2]}
    P99[cat_big]=${P99[cat_big2]}
fi
report() {
    echo "## Agent tools through the mount: latency per call"
    echo
    echo "| call | p50 | p99 | compared with | its p50 | its p99 | ratio | ≤ 2× | ratio to \`cat\` process | ≤ 2× |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    row "info, 1 MiB file" info cat_big "read of that file" 2 catp_big
    row "read_range 100 lines, 1 MiB file" read_range cat_big "read of that file" 2 catp_big
    row "list_allowed (no file: fixed cost)" list_allowed cat_big "read of the 1 MiB file" 2 catp_big
    row "outline, 100,000-line file" outline cat_long "read of that file" – catp_long
    row "apply_patch 3 hunks, 1 MiB file" apply_patch cat_big "read of that file" – catp_big
    row "read_range 100 lines near the end, 50 MB file" huge_range cat_huge "read of that file" –
    row "outline, 50 MB file" huge_outline cat_huge "read of that file" –
    row "search_files, $NFILES files" search_files grep "grep -rl (process)" –
    echo
    echo "| baseline | p50 | p99 |"
    echo "|---|---|---|"
    echo "| \`cat\` process, 1 MiB file (posix_spawn + wait) | $(us catp_big p50) | $(us catp_big p99) |"
    echo "| \`cat\` process, 100,000-line file | $(us catp_long p50) | $(us catp_long p99) |"
    echo
    echo "- big.md: ${BYTES[cat_big]:-?} bytes; long.md (100,000 lines): ${BYTES[cat_long]:-?} bytes; huge.md: ${BYTES[cat_huge]:-?} bytes (goal: read_range and outline on it ≤ 100 ms);" \
        "$NFILES files of 1–5 KiB in $(((NFILES + 99) / 100)) folders"
    echo "- runs: $RUNS (search_files/grep $SLOW_RUNS, apply_patch $PATCH_RUNS, alternating forth and back);" \
        "calls and cat timed in one process (open, write, read to EOF, close), warm cache"
    echo "- \"read\" = open + read to EOF + close in the timing process (no process start); \"\`cat\` process\" = /bin/cat spawned with stdout to /dev/null; grep includes its process start"
    echo "- ratios are of p50s (call / baseline; above 1 = the call is slower); goal: a small call (info, read_range) within 2× of cat"
    echo "- $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc) CPUs, load ${LOAD_START} → ${LOAD_END}"
    echo "- $CLAWFS_VERSION, mount args: ${MOUNT_ARGS:-none}; ext4 (journal) on loop $(basename "$LOOPDEV")"
}
report | tee "$WORK/report.md"
[[ -n $OUT ]] && cp "$WORK/report.md" "$OUT"
log "report: $WORK/report.md; log: $LOG"
