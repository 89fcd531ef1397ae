#!/usr/bin/env bash
# What the daemon's eBPF monitor costs (exec/openat/connect events, and the raw_syscalls
# enter/exit tracepoints behind the refusal records), in one run: an exec- and open-heavy shell
# loop (N times: `cat` a file, `stat` another, `ls` a directory) timed
#   - as an agent (`clawfs run --no-sandbox`), the store mounted with and without the monitor
#     (`clawfs mount --no-audit` starts no monitor);
#   - as a process outside agent groups, with a monitored mount up and with nothing mounted:
#     the tracepoints run for every system call of the host.
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
trap 'unmount_clawfs "$BIN" "$WORK/mnt"; rm -rf "$WORK"' EXIT
rm -rf "$WORK"; mkdir -p "$WORK/mnt"
"$BIN" init --store "$WORK/store" >/dev/null

LOOP="i=0; s=\$(date +%s%N); while [ \$i -lt $LOOPS ]; do cat /etc/hostname >/dev/null; stat /etc/passwd >/dev/null; ls /usr >/dev/null; i=\$((i+1)); done; e=\$(date +%s%N); echo \"scale=3; (\$e - \$s)/1000000000\" | bc"
agent() { "$BIN" run --store "$WORK/store" --mount "$WORK/mnt" --agent fs-engine --no-sandbox -- sh -c "$LOOP" 2>/dev/null; }
outsider() { sh -c "$LOOP"; }
mount_with() { "$BIN" mount "$WORK/mnt" --store "$WORK/store" "$@" >/dev/null; }

declare -A T
for r in $(seq "$ROUNDS"); do
  mount_with; T[agent_on]+="$(agent) "; T[host_on]+="$(outsider) "; unmount_clawfs "$BIN" "$WORK/mnt"
  mount_with --no-audit; T[agent_off]+="$(agent) "; unmount_clawfs "$BIN" "$WORK/mnt"
  T[host_off]+="$(outsider) "
done
med() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| $LOOPS × (cat, stat, ls) | monitor off | monitor on | ratio |"
echo "|---|---|---|---|"
a=$(med "${T[agent_off]}"); b=$(med "${T[agent_on]}")
printf '| an agent (clawfs run --no-sandbox), median of %s | %.2f s | %.2f s | %.3f× |\n' "$ROUNDS" "$a" "$b" "$(echo "$b/$a" | bc -l)"
a=$(med "${T[host_off]}"); b=$(med "${T[host_on]}")
printf '| a process outside agent groups | %.2f s | %.2f s | %.3f× |\n' "$a" "$b" "$(echo "$b/$a" | bc -l)"
