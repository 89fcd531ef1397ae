#!/usr/bin/env bash
# What the daemon's eBPF monitor costs (by default a raw tracepoint on exec; with
# --trace-syscalls also on every system call's entry and exit), in one run: an exec- and open-heavy shell
# loop (N times: `cat` a file, `stat` another, `ls` a directory) and a tight system-call loop
# (`dd bs=512` of 1,000,000 blocks from /dev/zero to /dev/null: 2,000,000 calls) timed
#   - as an agent (`clawfs run --no-sandbox`), the store mounted with and without the monitor
#     (`clawfs mount --no-audit` starts no monitor);
#   - as a process outside agent groups, with nothing mounted, with a mount up and no agent
#     running (the monitor's tracepoints detached), and with a mount up while an agent runs
#     (attached: they run for every system call of the host).
# Rounds alternate; medians and ratios are printed.
#   bash bench/monitor.sh [--clawfs-bin PATH] [--loops N] [--rounds R] [--workdir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=""; LOOPS=1000; ROUNDS=5; WORK=/tmp/clawfs-monitor-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --clawfs-bin) BIN=$2; shift 2 ;;
    --loops) LOOPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
BIN=$(release_clawfs "$BIN")
busy=""
trap '[ -z "$busy" ] || kill "$busy" 2>/dev/null; unmount_clawfs "$BIN" "$WORK/mnt"; rm -rf "$WORK"' EXIT
rm -rf "$WORK"; mkdir -p "$WORK/mnt"
"$BIN" init --store "$WORK/store" >/dev/null

LOOP="i=0; s=\$(date +%s%N); while [ \$i -lt $LOOPS ]; do cat /etc/hostname >/dev/null; stat /etc/passwd >/dev/null; ls /usr >/dev/null; i=\$((i+1)); done; e=\$(date +%s%N); echo \"scale=3; (\$e - \$s)/1000000000\" | bc"
SYSCALLS="s=\$(date +%s%N); dd if=/dev/zero of=/dev/null bs=512 count=1000000 status=none; e=\$(date +%s%N); echo \"scale=3; (\$e - \$s)/1000000000\" | bc"
run_agent() { "$BIN" run --store "$WORK/store" --mount "$WORK/mnt" --agent fs-engine --no-sandbox -- "$@" 2>/dev/null; }
agent() { run_agent sh -c "$LOOP"; }
outsider() { sh -c "$LOOP"; }
syscalls() { sh -c "$SYSCALLS"; }
mount_with() { "$BIN" mount "$WORK/mnt" --store "$WORK/store" "$@" >/dev/null; }
# The tracepoints the daemon holds attached (its raw tracepoint links).
attached() {
  local pid fd n=0
  pid=$(python3 -c "import json; print(json.load(open('$WORK/store/.clawfs/daemon.json'))['pid'])")
  for fd in /proc/"$pid"/fdinfo/*; do
    grep -q '^link_type:.raw_tracepoint$' "$fd" 2>/dev/null && n=$((n + 1))
  done
  echo "$n"
}
# Waits (up to 60 s) until the daemon holds no tracepoint: no run alive, the last one aged.
until_detached() { local i; for i in $(seq 240); do [ "$(attached)" -eq 0 ] && return; sleep 0.25; done; echo "monitor.sh: still attached" >&2; }

# One mount (default, or with the flags given) timed idle, by an agent, and while an agent runs;
# KEY suffixes the figures' names.
measure() { # KEY, mount flags...
  local key=$1; shift
  mount_with "$@"
  until_detached
  T[host_idle$key]+="$(outsider) "; T[sys_idle$key]+="$(syscalls) "
  T[agent_on$key]+="$(agent) "
  "$BIN" run --store "$WORK/store" --mount "$WORK/mnt" --agent fs-engine --no-sandbox -- sleep 600 2>/dev/null &
  busy=$! # clawfs run itself: a signal to it ends the run
  sleep 1
  [ "$(attached)" -gt 0 ] || echo "monitor.sh: not attached while an agent runs" >&2
  T[host_busy$key]+="$(outsider) "; T[sys_busy$key]+="$(syscalls) "
  kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""
  unmount_clawfs "$BIN" "$WORK/mnt"
}
declare -A T
for r in $(seq "$ROUNDS"); do
  measure ""
  measure _traced --trace-syscalls
  mount_with --no-audit; T[agent_off]+="$(agent) "; unmount_clawfs "$BIN" "$WORK/mnt"
  T[host_off]+="$(outsider) "; T[sys_off]+="$(syscalls) "
done
med() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
row() { # label, key of the baseline, key of the measured
  local a b
  a=$(med "${T[$2]}"); b=$(med "${T[$3]}")
  printf '| %s | %.2f s | %.2f s | %.3f× |\n' "$1" "$a" "$b" "$(echo "$b/$a" | bc -l)"
}
echo "Medians of $ROUNDS rounds."
echo
echo "| $LOOPS × (cat, stat, ls) | monitor off | monitor on | ratio |"
echo "|---|---|---|---|"
row "an agent (clawfs run --no-sandbox)" agent_off agent_on
row "a process outside agent groups, no agent running" host_off host_idle
row "a process outside agent groups, an agent running" host_off host_busy
row "an agent, --trace-syscalls" agent_off agent_on_traced
row "a process outside agent groups, an agent running, --trace-syscalls" host_off host_busy_traced
echo
echo "| 2,000,000 system calls (dd bs=512) | nothing mounted | mounted | ratio |"
echo "|---|---|---|---|"
row "no agent running" sys_off sys_idle
row "an agent running" sys_off sys_busy
row "no agent running, --trace-syscalls" sys_off sys_idle_traced
row "an agent running, --trace-syscalls" sys_off sys_busy_traced
