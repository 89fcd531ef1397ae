#!/usr/bin/env bash
# bench/multihost.sh — what a second host's writes cost the first host's searches, with two
# hosts sharing one store on JuiceFS (redis-server metadata on a free port, a file bucket, two
# JuiceFS mounts standing for two machines, one ClawFS daemon on each). Host a holds the
# workspace's index lease (it mounts first) and searches it (`semantic_search`, hybrid)
# through its mount; host b writes new
# files into the same workspace. Rounds alternate: a's searches with b idle, then with b
# writing. Prints per-call latency (p50, p90, p99) of each side, their ratios, and how long
# after b's last write a's search finds it; then, per host, ClawFS's metrics and JuiceFS's
# beside each other (each mount serves Prometheus text: `clawfs mount --metrics`, `juicefs
# mount --metrics`).
#
#   bash bench/multihost.sh [--clawfs-bin BIN] [--juicefs BIN] [--rounds N] [--calls N]
#                           [--files N] [--workdir DIR]
#
# Run as root. Without --clawfs-bin it uses target/release/clawfs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../target/release/clawfs juicefs=$here/../target/test-venv/bin/juicefs
rounds=3 calls=200 files=2000 work=/tmp/clawfs-multihost
while [[ $# -gt 0 ]]; do
    case $1 in
        --clawfs-bin) bin=$2; shift 2 ;;
        --juicefs) juicefs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --calls) calls=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        -h|--help) sed -n 2,13p "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
bin=$(realpath "$bin")
[[ -x $juicefs ]] || { echo "no juicefs at $juicefs (bash scripts/test-venv.sh installs it)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "redis-server is needed" >&2; exit 2; }

redis_pid=""
cleanup() {
    cd /
    for h in a b; do
        CLAWFS_HOST=$h "$bin" umount --lazy "$work/mnt-$h" >/dev/null 2>&1 || true
    done
    for h in a b; do
        mountpoint -q "$work/vol-$h" && { "$juicefs" umount "$work/vol-$h" >/dev/null 2>&1 || umount -l "$work/vol-$h"; }
    done
    [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work/redis" "$work/bucket"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis" \
    >/dev/null 2>&1 &
redis_pid=$!
meta=redis://127.0.0.1:$port/1
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$juicefs" format --storage file --bucket "$work/bucket/" --trash-days 0 "$meta" vol \
    --no-update >/dev/null 2>&1
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A jmetrics cmetrics
for h in a b; do
    mkdir -p "$work/vol-$h" "$work/cache-$h" "$work/mnt-$h"
    jmetrics[$h]=127.0.0.1:$(free_port)
    cmetrics[$h]=127.0.0.1:$(free_port)
    "$juicefs" mount -d --no-usage-report --cache-dir "$work/cache-$h" --metrics "${jmetrics[$h]}" \
        --log "$work/juicefs-$h.log" "$meta" "$work/vol-$h" >/dev/null 2>&1
done
"$bin" init --store "$work/vol-a/store" >/dev/null
for h in a b; do "$bin" host join "$h" --store "$work/vol-a/store" >/dev/null; done
for h in a b; do
    CLAWFS_HOST=$h CLAWFS_CACHE_DIR=$work/clawfs-cache-$h \
        "$bin" mount "$work/mnt-$h" --store "$work/vol-$h/store" --host "$h" \
        --metrics "${cmetrics[$h]}" >/dev/null
    sleep 2 # a takes the index lease first
done

python3 - "$work" "$rounds" "$calls" "$files" "${cmetrics[a]}" "${jmetrics[a]}" "${cmetrics[b]}" "${jmetrics[b]}" <<'PY'
import json, os, statistics, sys, threading, time, urllib.request

work, rounds, calls, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
endpoints = {"a": (sys.argv[5], sys.argv[6]), "b": (sys.argv[7], sys.argv[8])}
ws_a = f"{work}/mnt-a/workspaces/default"
ws_b = f"{work}/mnt-b/workspaces/default"
words = "lease replica journal quota vault agent index search shard volume".split()

def search(query, mode="hybrid"):
    """One search of the workspace through host a's mount: (seconds, paths found)."""
    t = time.perf_counter()
    with open(f"{work}/mnt-a/tools/call/semantic_search", "r+b", buffering=0) as f:
        f.write(json.dumps({"query": query, "mode": mode, "limit": 10}).encode())
        out = f.read()
    elapsed = time.perf_counter() - t
    try:
        hits = json.loads(out).get("hits", [])
    except ValueError:
        hits = []
    return elapsed, [h.get("path") for h in hits]

def found(query, limit):
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        if search(query, "text")[1]:
            return time.perf_counter() - start
        time.sleep(0.1)
    return None

# The workspace's files, written on a.
os.makedirs(f"{ws_a}/seed", exist_ok=True)
for i in range(files):
    with open(f"{ws_a}/seed/note-{i}.md", "w") as f:
        f.write(f"# note {i}\n" + " ".join(words[(i + k) % len(words)] for k in range(60)) + f"\nseedmark{i}\n")
wait = found(f"seedmark{files - 1}", 600)
print(f"{files} files written on a, found by a's search after {wait:.1f} s" if wait else "seed never found")

def timed_calls(n):
    out = []
    for i in range(n):
        out.append(search(words[i % len(words)] + " " + words[(i * 3 + 1) % len(words)])[0])
    return out

def writer(stop, tag, counter):
    i = 0
    os.makedirs(f"{ws_b}/{tag}", exist_ok=True)
    while not stop.is_set():
        with open(f"{ws_b}/{tag}/w-{i}.md", "w") as f:
            f.write(f"written on b {tag} {i}\n" + " ".join(words) * 20 + f"\n{tag}mark{i}\n")
        i += 1
    counter.append(i)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000

quiet, busy, lags, written = [], [], [], []
timed_calls(20)  # warm-up
for r in range(rounds):
    quiet += timed_calls(calls)
    stop, counter = threading.Event(), []
    tag = f"r{r}"
    t = threading.Thread(target=writer, args=(stop, tag, counter))
    t.start()
    busy += timed_calls(calls)
    stop.set()
    t.join()
    written.append(counter[0])
    lag = found(f"{tag}mark{counter[0] - 1}", 300)
    lags.append(lag)
    print(f"round {r + 1}: b wrote {counter[0]} files during a's {calls} searches; "
          f"a found b's last file {'%.1f s' % lag if lag is not None else 'never (300 s)'} after b stopped")

print()
print(f"| a's search (hybrid), ms ({rounds} x {calls} calls) | p50 | p90 | p99 | mean |")
print("|---|---:|---:|---:|---:|")
for name, xs in (("b idle", quiet), ("b writing", busy)):
    print(f"| {name} | {pct(xs, 50):.2f} | {pct(xs, 90):.2f} | {pct(xs, 99):.2f} | {statistics.mean(xs) * 1000:.2f} |")
print(f"| ratio (writing / idle) | {pct(busy, 50) / pct(quiet, 50):.2f}x | {pct(busy, 90) / pct(quiet, 90):.2f}x | "
      f"{pct(busy, 99) / pct(quiet, 99):.2f}x | {statistics.mean(busy) / statistics.mean(quiet):.2f}x |")

def scrape(addr):
    """Prometheus text from addr: {metric name: sum over its label sets}."""
    sums = {}
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{")[0]
            try:
                sums[name] = sums.get(name, 0.0) + float(value)
            except ValueError:
                pass
    return sums

def total(sums, prefix, suffix=""):
    return sum(v for k, v in sums.items() if k.startswith(prefix) and k.endswith(suffix))

print()
print("| whole run, per host | ClawFS FUSE requests | ClawFS daemon bytes | JuiceFS FUSE ops | JuiceFS metadata ops | JuiceFS object requests | JuiceFS object bytes |")
print("|---|---:|---:|---:|---:|---:|---:|")
for h, (c_addr, j_addr) in endpoints.items():
    c, j = scrape(c_addr), scrape(j_addr)
    print(f"| host {h} | {total(c, 'clawfs_fuse_requests'):,.0f} | {total(c, 'clawfs_daemon_bytes'):,.0f} "
          f"| {total(j, 'juicefs_fuse_ops_durations', '_count'):,.0f} | {total(j, 'juicefs_meta_ops_durations', '_count'):,.0f} "
          f"| {total(j, 'juicefs_object_request_durations', '_count'):,.0f} | {total(j, 'juicefs_object_request_data_bytes'):,.0f} |")
PY
