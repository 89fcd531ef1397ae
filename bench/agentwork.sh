#!/usr/bin/env bash
# bench/agentwork.sh — an agent's ordinary day, timed: as the sandboxed agent fs-engine on
# ClawFS, as the same uid on native ext4 and as root on the same mount (what is left once an
# agent is not an agent), in turn round by round on one journaled loop ext4, caches dropped
# before each part of the day; and, beside them, root on bindfs over the same ext4 (a plain
# FUSE peer) and the agent on a second ClawFS mount with `--no-search` (what indexing costs
# while it runs). After each part on a searching mount the harness waits for the daemon's
# indexer to go quiet (its graphs saved) and reports, for the agent's parts, how long after
# the part it caught up. Steps: git clone of a 10,500-file repository with nested
# .gitmodules, make -j2 of its C sources, an edit of 111 files and a commit, git gc; git
# status + git log -200, cold; grep -rn over the clone, cold; rm -rf of the clone; untar of an
# npm-like tree (13,395 files, 148 MB) and its rm -rf; python3 -m compileall of a
# 3,000-module tree, cold. Then, on ClawFS only, 20 untar / rm -rf cycles under a 512 MiB
# quota (2.9 GB written), which must never be refused. Prints a markdown table: per-step
# medians and the median of per-round ratios.
# `--quota unlimited --cycles 0` times the day with the agent's writes by passthrough (no byte
# quota), which also runs on builds without `clawfs quota`. `--juicefs BIN` puts the store and
# the other side on a JuiceFS volume instead (redis-server metadata on a free port, a file
# bucket on the loop ext4), the store joined as host h1: ClawFS over JuiceFS against JuiceFS
# alone (no bindfs or `--no-search` side there). `--mount-arg ARG` (repeatable) passes ARG to
# both `clawfs mount`s, to time one of its options. `--skip SIDE` (repeatable: bindfs,
# nosearch) leaves a side out. `--pin CPUS` runs every side's work on CPUS only (taskset): a
# caller that stays on one CPU, as a kernel that woke io_uring waiters on their own CPU would
# keep it (docs/benchmarks.md, "Where the caller is woken").
#
#   bash bench/agentwork.sh [--clawfs-bin BIN] [--rounds N] [--workdir DIR] [--cycles N]
#                           [--quota SIZE|unlimited] [--juicefs BIN] [--mount-arg ARG]...
#                           [--skip bindfs|nosearch]... [--pin CPUS]
#
# Run as root. Without --clawfs-bin it builds target/release/clawfs first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bin="" rounds=3 work=/tmp/clawfs-agentwork cycles=20 quota=512MiB juicefs=""
mount_args=() skip=" " pin=() pin_cpus=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --clawfs-bin) bin=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        --cycles) cycles=$2; shift 2 ;;
        --quota) quota=$2; shift 2 ;;
        --juicefs) juicefs=$2; shift 2 ;;
        --mount-arg) mount_args+=("$2"); shift 2 ;;
        --skip) skip+="$2 "; shift 2 ;;
        --pin) pin_cpus=$2 pin=(taskset -c "$2"); shift 2 ;;
        -h|--help) sed -n 2,30p "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "$0: run as root" >&2; exit 1; }
if [[ -n $pin_cpus ]] && ! "${pin[@]}" true 2>/dev/null; then
    echo "$0: --pin: no such CPUs: $pin_cpus" >&2; exit 2
fi
bin=$(release_clawfs "$bin")
AGENT_UID=61006
[[ -z $juicefs ]] || skip+="bindfs nosearch "
wants() { [[ $skip != *" $1 "* ]]; }
if wants bindfs && ! command -v bindfs >/dev/null; then
    echo "installing bindfs (the FUSE peer)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bindfs >&2
fi

rm -rf "$work"; mkdir -p "$work/fs"
redis_port="" base=$work/fs
finish() {
    set +e
    unmount_clawfs "$bin" "$work/fs/mnt" 2>/dev/null
    unmount_clawfs "$bin" "$work/fs/mnt-nosearch" 2>/dev/null
    if is_mounted "$work/fs/bindmnt"; then umount "$work/fs/bindmnt" || umount -l "$work/fs/bindmnt"; fi
    # The raw figures and the daemon's log outlive the run, for what went wrong.
    [[ -f $work/results ]] && cp "$work/results" "$work.results"
    for log in "$base/store/.clawfs/daemon.log" "$base/store/.clawfs/hosts/h1/daemon.log"; do
        [[ -f $log ]] && cp "$log" "$work.daemon.log"
    done
    if [[ -n $juicefs ]] && is_mounted "$work/fs/jfs"; then
        "$juicefs" umount "$work/fs/jfs" >&2 || umount -l "$work/fs/jfs"
    fi
    [[ -z $redis_port ]] || redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1
    take_down "$bin" "$work"
}
trap finish EXIT
journaled_loop "$work/fs.img" 16G "$work/fs"
echo "loop device $LOOPDEV (direct I/O $LOOP_DIO)" >&2
echo "FUSE over io_uring offered by the kernel: $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo no) (scripts/setup.sh turns it on; --mount-arg --no-io-uring serves /dev/fuse)" >&2
# Where both sides work: the loop ext4, or a JuiceFS volume whose bucket is on it.
base=$work/fs other=native
if [[ -n $juicefs ]]; then
    redis_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$work/fs/redis" "$work/fs/bucket" "$work/fs/jcache" "$work/fs/jfs"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$work/fs/redis" --daemonize yes --logfile "$work/fs/redis/log"
    meta=redis://127.0.0.1:$redis_port/1
    for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # No trash: a removed file frees its objects at once, on both sides alike.
    "$juicefs" format --storage file --bucket "$work/fs/bucket/" --trash-days 0 "$meta" bench --no-update >&2
    "$juicefs" mount -d --no-usage-report --cache-dir "$work/fs/jcache" "$meta" "$work/fs/jfs" >&2
    base=$work/fs/jfs other="JuiceFS alone"
fi

# ---- inputs, made once by root ----------------------------------------------------------
inputs=$work/fs/inputs
mkdir -p "$inputs"
python3 "$here/make_repo.py" "$inputs/repo"
python3 - "$inputs" <<'PY'
import os, sys
root = sys.argv[1]
# An npm-like tree: 13,395 files in nested packages, 148 MB.
nm = os.path.join(root, "nm", "node_modules")
left = 148_000_000
for i in range(13_395):
    d = os.path.join(nm, f"pkg{i // 30:03}", "lib", f"sub{i % 3}")
    os.makedirs(d, exist_ok=True)
    size = min(left, 300_000 if i % 50 == 0 else 5_200)
    left -= size
    with open(os.path.join(d, f"f{i}.js"), "wb") as f:
        f.write(b"x" * size)
PY
tar cf "$inputs/node_modules.tar" -C "$inputs/nm" node_modules
rm -rf "$inputs/nm"
# A Python tree: 3,000 modules of about 3 kB in 60 packages.
python3 - "$inputs/pysrc" <<'PY'
import os, sys
for i in range(3000):
    d = os.path.join(sys.argv[1], f"pkg{i // 50:02}")
    os.makedirs(d, exist_ok=True)
    if i % 50 == 0:
        open(os.path.join(d, "__init__.py"), "w").close()
    with open(os.path.join(d, f"mod{i}.py"), "w") as f:
        f.write("".join(f"def f{j}(x, y={j}):\n    return [x * y + k for k in range({j})]\n\n" for j in range(40)))
PY
tar cf "$inputs/py.tar" -C "$inputs/pysrc" .
rm -rf "$inputs/pysrc"
chmod -R a+rX "$inputs"

# ---- both sides -----------------------------------------------------------------------
native=$base/native
mkdir -p "$native/home"
chown -R "$AGENT_UID:$AGENT_UID" "$native"
store=$base/store mnt=$work/fs/mnt
mkdir -p "$mnt"
"$bin" init --store "$store" >&2
host_args=()
if [[ -n $juicefs ]]; then
    "$bin" host join h1 --store "$store" >&2
    host_args=(--host h1)
    export CLAWFS_HOST=h1  # for the commands below that find the daemon
    export CLAWFS_CACHE_DIR=$work/fs/clawfs-cache  # the host's index, on local disk
fi
"$bin" mount "$mnt" --store "$store" "${host_args[@]}" "${mount_args[@]}" >&2
policy=$work/policy.toml
sed "s/^\[agents\.fs-engine\]\$/[agents.fs-engine]\nquota = { bytes = \"$quota\" }/" \
    "$store/system/policy.toml" > "$policy"
"$bin" policy reload "$policy" --store "$store" >&2
ws=$mnt/workspaces/default
# Root's side of the day, on the same mount: what is left once an agent is not an agent.
roothome=$work/roothome
mkdir -p "$roothome" "$ws/root-side"
cp -a "$inputs/repo" "$ws/repo"
cp "$inputs/node_modules.tar" "$inputs/py.tar" "$ws/"
daemon=$("$bin" status "$mnt" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["daemon"]["pid"])')
# The agent on a second mount that does not index: what indexing costs while it runs.
store2=$base/store-nosearch mnt2=$work/fs/mnt-nosearch ws2=$mnt2/workspaces/default
if wants nosearch; then
    mkdir -p "$mnt2"
    "$bin" init --store "$store2" >&2
    "$bin" mount "$mnt2" --store "$store2" --no-search "${mount_args[@]}" >&2
    "$bin" policy reload "$policy" --store "$store2" >&2
    cp -a "$inputs/repo" "$ws2/repo"
    cp "$inputs/node_modules.tar" "$inputs/py.tar" "$ws2/"
fi
# Root on bindfs over a folder of the same ext4: a plain FUSE peer.
bsrc=$base/bindsrc bmnt=$work/fs/bindmnt bindhome=$work/bindhome
if wants bindfs; then
    mkdir -p "$bsrc/work" "$bmnt" "$bindhome"
    cp -a "$inputs/repo" "$bsrc/repo"
    cp "$inputs/node_modules.tar" "$inputs/py.tar" "$bsrc/"
    bindfs "$bsrc" "$bmnt"
fi

# The day, as one shell script run in parts: prints "STEP MILLISECONDS" lines. $1: where to
# work, $2: the repository to clone, $3: the tarball, $4: the Python tree's tarball, $5: the
# part. The harness drops the caches before each part, as root, so each part's first step is
# cold.
day='set -e
cd "$1"
printf "[safe]\n\tdirectory = *\n[user]\n\tname = agent\n\temail = agent@example.invalid\n" > "$HOME/.gitconfig"
t() { s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N); echo "$step $(( (e - s) / 1000000 ))"; }
case $5 in
build)
    step=clone t git clone -q --no-hardlinks "$2" clone
    cd clone
    step=make t make -s -j2 app
    edit() { for f in vendor/mod00*/pkg/f1*.go; do echo "// edited" >> "$f"; done; git commit -qam edit; }
    step=commit t edit
    step=gc t git gc -q ;;
status)
    cd clone
    status() { git status --porcelain && git log -200 --oneline; }
    step=status t status ;;
grep)
    cd clone
    step=grep t grep -rn "return 7777 " . ;;
files)
    step=rm_clone t rm -rf clone
    mkdir app
    step=untar t tar xf "$3" -C app
    step=rm_untar t rm -rf app
    mkdir py
    tar xf "$4" -C py ;;
compile)
    step=compileall t python3 -m compileall -q py
    rm -rf py ;;
esac'
parts="build status grep files compile"

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run_native() {
    for part in $parts; do
        drop_caches
        "${pin[@]}" setpriv --reuid "$AGENT_UID" --regid "$AGENT_UID" --clear-groups \
            env HOME="$native/home" GIT_CONFIG_NOSYSTEM=1 sh -c "$day" day "$native" "$inputs/repo" "$inputs/node_modules.tar" "$inputs/py.tar" "$part"
    done
}
# index_quiet: waits until the daemon's indexer threads have used no CPU for 6 s (longer than
# its longest wait for a batch, 2 s, and than the quiet after which it saves its graphs, 5 s)
# and prints how many seconds after the call they last
# did, in milliseconds: how long the index took to catch up. Their CPU time is read from /proc, so the mount
# runs as it does by default.
index_quiet() {
    python3 - "$daemon" <<'PY'
import os, sys, time
pid = sys.argv[1]
def used():
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != "indexer":
                    continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass  # a thread that ended
    return total
start = time.monotonic()
last, seen = start, used()
while time.monotonic() - last < 6:
    time.sleep(0.02)
    now = used()
    if now != seen:
        last, seen = time.monotonic(), now
print(round((last - start) * 1000))
PY
}
# agent_day STORE MNT PART: the day's PART as the sandboxed agent fs-engine, in MNT's default
# workspace, with its inputs there.
agent_day() {
    local ws=$2/workspaces/default
    "${pin[@]}" "$bin" run --store "$1" --mount "$2" --agent fs-engine -- \
        env HOME="$2/agents/fs-engine" GIT_CONFIG_NOSYSTEM=1 sh -c "$day" day "$ws" "$ws/repo" "$ws/node_modules.tar" "$ws/py.tar" "$3"
}
# root_day HOME DIR INPUTS PART: the day's PART as root in DIR, the inputs in INPUTS.
root_day() {
    "${pin[@]}" env HOME="$1" GIT_CONFIG_NOSYSTEM=1 sh -c "$day" day "$2" "$3/repo" "$3/node_modules.tar" "$3/py.tar" "$4"
}
run_root() {
    for part in $parts; do
        drop_caches; root_day "$roothome" "$ws/root-side" "$ws" "$part"
        index_quiet >/dev/null
    done
}
run_clawfs() {
    for part in $parts; do
        drop_caches; agent_day "$store" "$mnt" "$part"
        echo "catchup_$part $(index_quiet)"
    done
}
run_nosearch() {
    for part in $parts; do drop_caches; agent_day "$store2" "$mnt2" "$part"; done
}
run_bindfs() {
    for part in $parts; do drop_caches; root_day "$bindhome" "$bmnt/work" "$bmnt" "$part"; done
}

results=$work/results
: > "$results"
for r in $(seq 1 "$rounds"); do
    echo "round $r/$rounds" >&2
    run_native | sed "s/^/native $r /" >> "$results"
    run_clawfs | sed "s/^/clawfs $r /" >> "$results"
    run_root | sed "s/^/root $r /" >> "$results"
    if wants bindfs; then run_bindfs | sed "s/^/bindfs $r /" >> "$results"; fi
    if wants nosearch; then run_nosearch | sed "s/^/nosearch $r /" >> "$results"; fi
done

# 20 installs and removals under the 512 MiB quota: never refused.
cyc=$(date +%s%N)
"$bin" run --store "$store" --mount "$mnt" --agent fs-engine -- sh -c '
    cd "$1"; i=0
    while [ $i -lt "$2" ]; do
        mkdir app && tar xf "$3" -C app || { echo "refused at cycle $i"; exit 1; }
        rm -rf app; i=$((i + 1))
    done' cycles "$ws" "$cycles" "$ws/node_modules.tar"
cyc_s=$(( ($(date +%s%N) - cyc) / 1000000 ))
sleep 3  # the daemon saves its counts every 2 s
held=$("$bin" quota --store "$store" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(a["bytes"] for a in d["agents"] if a["agent"]=="fs-engine"))' 2>/dev/null || echo 0)

python3 - "$results" "$rounds" "$cycles" "$cyc_s" "$held" "$other" <<'PY'
import math, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
steps = ["clone", "make", "commit", "gc", "status", "grep", "rm_clone", "untar", "rm_untar", "compileall"]
t = {}
for side, rnd, step, ms in rows:
    t.setdefault((side, step), {})[int(rnd)] = int(ms) / 1000
rounds, other = int(sys.argv[2]), sys.argv[6]
names = {"native": other, "clawfs": "ClawFS, sandboxed agent", "root": "ClawFS, root",
         "bindfs": "bindfs, root", "nosearch": "agent, `--no-search`"}
sides = [s for s in names if (s, "clone") in t]
# Each ratio: the median of the rounds' ratios (each round's sides ran back to back).
pairs = [("clawfs", "native", f"agent / {other}"), ("root", "native", f"root / {other}"),
         ("bindfs", "native", f"bindfs / {other}"), ("clawfs", "root", "agent / root"),
         ("clawfs", "bindfs", "agent / bindfs"), ("clawfs", "nosearch", "search on / off")]
pairs = [p for p in pairs if p[0] in sides and p[1] in sides]
def ratio(a, b, step):
    x, y = t[(a, step)], t[(b, step)]
    return statistics.median(x[r] / max(y[r], 1e-3) for r in range(1, rounds + 1))
print("| step | " + " | ".join(f"{names[s]} (s)" for s in sides) + " | " + " | ".join(p[2] for p in pairs) + " |")
print("|---|" + "---:|" * (len(sides) + len(pairs)))
logs = {p: [] for p in pairs}
for step in steps:
    cells = [f"{statistics.median(t[(s, step)].values()):.2f}" for s in sides]
    for p in pairs:
        logs[p].append(ratio(p[0], p[1], step))
        cells.append(f"{logs[p][-1]:.2f}x")
    print(f"| {step} | " + " | ".join(cells) + " |")
g = [math.exp(sum(map(math.log, v)) / len(v)) for v in logs.values()]
print("| geometric mean | " + " | " * len(sides) + " | ".join(f"{x:.2f}x" for x in g) + " |")
caught = {k[1][len("catchup_"):]: v for k, v in t.items() if k[0] == "clawfs" and k[1].startswith("catchup_")}
if caught:
    print()
    print("The index caught up after the agent's parts (median s): " + ", ".join(
        f"{part} {statistics.median(v.values()):.2f}" for part, v in caught.items()))
print()
print(f"{sys.argv[3]} untar/rm -rf cycles under the quota: none refused, {int(sys.argv[4]) / 1000:.1f} s; "
      f"fs-engine holds {int(sys.argv[5]):,} bytes after them")
PY
