#!/usr/bin/env bash
# What the agent sandbox costs, in one run on one journaled ext4 image: the start-up of
# `clawfs run --agent fs-engine -- true` (p50/p99 over N runs) with --no-sandbox and with the
# default sandbox (Landlock + seccomp + eBPF egress filter; cgroups in both), and two build-like workloads in the default workspace
# through the mount, without and with it: a `make -j2` of a small C project and a shell loop
# touching 10,000 files. Rounds alternate; medians and ratios are printed.
#   bash bench/sandbox.sh [--clawfs-bin PATH] [--runs N] [--rounds R] [--workdir DIR]
# (each round creates 20,000 files as fs-engine: more than 3 rounds meet its file quota)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=""; RUNS=200; ROUNDS=3; WORK=/tmp/clawfs-sandbox-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --clawfs-bin) BIN=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
BIN=$(release_clawfs "$BIN")
LOOPDEV=""
trap 'take_down "$BIN" "$WORK"' EXIT
mkdir -p "$WORK/fs"
journaled_loop "$WORK/disk.img" 2G "$WORK/fs"
mkdir -p "$WORK/fs/mnt"
"$BIN" mount "$WORK/fs/mnt" --store "$WORK/fs/store" >/dev/null
WS=$WORK/fs/mnt/workspaces/default
run() { "$BIN" run --store "$WORK/fs/store" --mount "$WORK/fs/mnt" --agent fs-engine "$@" 2>/dev/null; }

# start-up: milliseconds per run, one per line
startup() {
  local i s e
  for i in $(seq "$RUNS"); do
    s=$(date +%s%N); run "$@" -- true; e=$(date +%s%N)
    echo "scale=3; ($e - $s) / 1000000" | bc
  done
}
pct() { sort -g | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100+0.999); if (i<1) i=1; print a[i]}'; }
median() { pct 50; }

# a small C project: 20 files, make -j2
mkdir -p "$WS/proj"
for i in $(seq 20); do printf 'int f%d(int x){int s=0;for(int i=0;i<x;i++)s+=i*%d;return s;}\n' "$i" "$i" > "$WS/proj/f$i.c"; done
printf 'int main(void){return 0;}\n' > "$WS/proj/main.c"
printf 'SRC=$(wildcard *.c)\nOBJ=$(SRC:.c=.o)\nall: prog\nprog: $(OBJ)\n\tcc -o $@ $^\n%%.o: %%.c\n\tcc -O1 -c $< -o $@\nclean:\n\trm -f *.o prog\n' > "$WS/proj/Makefile"
chmod -R a+rwX "$WS/proj"   # the agent builds in it
build_secs() {
  run "$@" -- sh -c "cd $WS/proj && make -s clean && s=\$(date +%s%N) && make -s -j2 && e=\$(date +%s%N) && echo \"scale=3; (\$e - \$s)/1000000000\" | bc"
}
touch_secs() {
  run "$@" -- sh -c "rm -rf $WS/t && mkdir $WS/t && cd $WS/t && s=\$(date +%s%N) && i=0 && while [ \$i -lt 10000 ]; do : > f\$i; i=\$((i+1)); done && e=\$(date +%s%N) && echo \"scale=3; (\$e - \$s)/1000000000\" | bc"
}

plain=$(startup --no-sandbox); sandboxed=$(startup)
declare -A B T
for r in $(seq "$ROUNDS"); do
  B[plain]+="$(build_secs --no-sandbox) "; B[sandbox]+="$(build_secs) "
  T[plain]+="$(touch_secs --no-sandbox) "; T[sandbox]+="$(touch_secs) "
done
med() { echo "$1" | tr ' ' '\n' | grep . | median; }
echo "| measure | --no-sandbox | sandboxed (default) | ratio |"
echo "|---|---|---|---|"
p50a=$(echo "$plain" | pct 50); p50b=$(echo "$sandboxed" | pct 50)
p99a=$(echo "$plain" | pct 99); p99b=$(echo "$sandboxed" | pct 99)
printf '| start-up, p50 (%s runs) | %.1f ms | %.1f ms | %.2f× |\n' "$RUNS" "$p50a" "$p50b" "$(echo "$p50b/$p50a" | bc -l)"
printf '| start-up, p99 | %.1f ms | %.1f ms | %.2f× |\n' "$p99a" "$p99b" "$(echo "$p99b/$p99a" | bc -l)"
a=$(med "${B[plain]}"); b=$(med "${B[sandbox]}")
printf '| make -j2, 21 C files (median of %s) | %.2f s | %.2f s | %.2f× |\n' "$ROUNDS" "$a" "$b" "$(echo "$b/$a" | bc -l)"
a=$(med "${T[plain]}"); b=$(med "${T[sandbox]}")
printf '| touch 10,000 files (sh loop) | %.2f s | %.2f s | %.2f× |\n' "$a" "$b" "$(echo "$b/$a" | bc -l)"
