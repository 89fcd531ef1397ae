#!/usr/bin/env bash
# bench/agent_vs_root.sh — what makes an agent an agent, step by step: the sandboxed agent
# fs-engine and root on ONE mount, each in a clone of the agentwork repository of its own
# (10,500 files), in turn pair by pair, caches dropped before each: a `grep -rn` and an edit
# of 111 files with their `git commit -a`. Each step is timed inside its process (the
# agent's inside the sandbox, so `clawfs run`'s start is not in it; printed apart), with the
# daemon's CPU time over the step (its indexer's included: the index catches up with the two
# clones while the steps run). Prints each pair and the medians of the per-pair ratios.
#
#   bash bench/agent_vs_root.sh [--clawfs-bin BIN] [--rounds N] [--workdir DIR]
#
# Run as root. Without --clawfs-bin it builds target/release/clawfs first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bin="" rounds=6 work=/tmp/clawfs-agent-vs-root
while [[ $# -gt 0 ]]; do
    case $1 in
        --clawfs-bin) bin=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        -h|--help) sed -n 2,11p "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "$0: run as root" >&2; exit 1; }
bin=$(release_clawfs "$bin")
LOOPDEV=""
trap 'take_down "$bin" "$work"' EXIT
rm -rf "$work"; mkdir -p "$work/fs"
journaled_loop "$work/fs.img" 8G "$work/fs"
store=$work/fs/store mnt=$work/fs/mnt; mkdir -p "$mnt"
"$bin" init --store "$store" >&2
"$bin" mount "$mnt" --store "$store" >&2
# A byte quota, as agentwork gives it: the agent's writes are metered by the daemon.
sed 's/^\[agents\.fs-engine\]$/[agents.fs-engine]\nquota = { bytes = "4GiB" }/' \
    "$store/system/policy.toml" > "$work/policy.toml"
"$bin" policy reload "$work/policy.toml" --store "$store" >&2
ws=$mnt/workspaces/default home=$mnt/agents/fs-engine
python3 "$here/make_repo.py" "$ws/repo" >/dev/null
printf '[safe]\n\tdirectory = *\n[user]\n\tname = b\n\temail = b@example.invalid\n' > "$home/.gitconfig"
chmod 644 "$home/.gitconfig"
daemon=$("$bin" status "$mnt" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["daemon"]["pid"])')

# The step $2 in the clone $1, timed inside: "MILLISECONDS".
step='cd "$1"
s=$(date +%s%N)
case $2 in
grep) grep -rn "return 7777 " . >/dev/null || true ;;
commit) for f in vendor/mod00*/pkg/f1*.go; do echo "// edited" >> "$f"; done; git commit -qam edit ;;
esac
echo $(( ($(date +%s%N) - s) / 1000000 ))'
as_agent() {
    "$bin" run --store "$store" --mount "$mnt" --agent fs-engine -- \
        env HOME="$home" GIT_CONFIG_NOSYSTEM=1 sh -c "$step" step "$@"
}
as_root() { env HOME="$home" GIT_CONFIG_NOSYSTEM=1 sh -c "$step" step "$@"; }
as_agent "$ws" true >/dev/null
"$bin" run --store "$store" --mount "$mnt" --agent fs-engine -- \
    env HOME="$home" GIT_CONFIG_NOSYSTEM=1 git clone -q --no-hardlinks "$ws/repo" "$ws/agent-clone"
env HOME="$home" GIT_CONFIG_NOSYSTEM=1 git clone -q --no-hardlinks "$ws/repo" "$ws/root-clone"

daemon_ms() { awk '{ print ($14 + $15) * 10 }' "/proc/$daemon/stat"; }
# timed WHO STEP: "WALL_MS DAEMON_CPU_MS" of one step.
timed() {
    # Cold, both: a step after the other side's would otherwise find its caches warm or not
    # by the order of the pair.
    sync; echo 3 > /proc/sys/vm/drop_caches
    local c0 ms
    c0=$(daemon_ms)
    ms=$("as_$1" "$ws/$1-clone" "$2")
    echo "$ms $(( $(daemon_ms) - c0 ))"
}
start_ms() {
    local s
    s=$(date +%s%N)
    "$bin" run --store "$store" --mount "$mnt" --agent fs-engine -- true
    echo $(( ($(date +%s%N) - s) / 1000000 ))
}

echo "| step | round | agent (ms) | root (ms) | agent / root | daemon CPU, agent (ms) | daemon CPU, root (ms) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
declare -A ratios
starts=()
for ((r = 1; r <= rounds; r++)); do
    for s in grep commit; do
        # A and B in turn, the order flipped every round.
        if ((r % 2)); then a=$(timed agent "$s"); b=$(timed root "$s")
        else b=$(timed root "$s"); a=$(timed agent "$s"); fi
        read -r aw ac <<< "$a"; read -r bw bc <<< "$b"
        ratio=$(awk -v a="$aw" -v b="$bw" 'BEGIN { printf "%.3f", a / b }')
        ratios[$s]+="$ratio "
        echo "| $s | $r | $aw | $bw | ${ratio}x | $ac | $bc |"
    done
    starts+=("$(start_ms)")
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
for s in grep commit; do
    echo "$s: agent / root, median of $rounds pairs: $(median <<< "${ratios[$s]}")x (pairs: ${ratios[$s]})"
done
echo "clawfs run --agent fs-engine -- true, median: $(printf '%s ' "${starts[@]}" | median) ms (not in the figures above)"
