#!/usr/bin/env bash
# What byte-quota metering costs an agent's writes. An agent's opens for writing are served by
# the daemon (every write charged to its quota) instead of kernel passthrough. In one run, on
# one journaled ext4 image: native, the admin through the mount (passthrough), and an agent
# through the mount (metered), each writing a 512 MiB file with dd (1 MiB blocks, fsync at the
# end) and creating 5,000 files of 4 KiB; rounds alternate, medians are printed with ratios.
#   bash bench/agent_writes.sh [--clawfs-bin PATH] [--rounds R] [--workdir DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=""; ROUNDS=3; WORK=/tmp/clawfs-agent-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --clawfs-bin) BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workdir) WORK=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
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
journaled_loop "$WORK/disk.img" 4G "$WORK/fs"
mkdir -p "$WORK/fs/native" "$WORK/fs/mnt"
"$BIN" mount "$WORK/fs/mnt" --store "$WORK/fs/store" >/dev/null
# A byte quota the runs never reach (any quota makes the agent's writes metered).
sed 's/^\[agents.fs-engine\]$/[agents.fs-engine]\nquota = { bytes = "1TiB" }/' \
  "$WORK/fs/store/system/policy.toml" > "$WORK/policy.toml"
"$BIN" policy reload "$WORK/policy.toml" --store "$WORK/fs/store" >/dev/null
AGENT_DIR="$WORK/fs/mnt/agents/fs-engine"
ADMIN_DIR="$WORK/fs/mnt/workspaces/default"
as_agent() { "$BIN" run --store "$WORK/fs/store" --mount "$WORK/fs/mnt" --agent fs-engine -- sh -c "$1" 2>/dev/null; }

# seconds for `dd` of 512 MiB into $1, run by $2 (sh or agent)
write_secs() {
  local cmd="rm -f $1/big; sync; s=\$(date +%s.%N); dd if=/dev/zero of=$1/big bs=1M count=512 conv=fsync status=none; e=\$(date +%s.%N); rm -f $1/big; echo \"\$e - \$s\" | bc"
  if [ "$2" = agent ]; then as_agent "$cmd"; else sh -c "$cmd"; fi
}
# seconds to create 5,000 files of 4 KiB in $1/c, run by $2
create_secs() {
  local cmd="rm -rf $1/c; mkdir $1/c; sync; s=\$(date +%s.%N); i=0; while [ \$i -lt 5000 ]; do head -c 4096 /dev/zero > $1/c/f\$i; i=\$((i+1)); done; e=\$(date +%s.%N); rm -rf $1/c; echo \"\$e - \$s\" | bc"
  if [ "$2" = agent ]; then as_agent "$cmd"; else sh -c "$cmd"; fi
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A W C
for r in $(seq "$ROUNDS"); do
  W[native]+="$(write_secs "$WORK/fs/native" sh) "; W[admin]+="$(write_secs "$ADMIN_DIR" sh) "
  W[agent]+="$(write_secs "$AGENT_DIR" agent) "
  C[native]+="$(create_secs "$WORK/fs/native" sh) "; C[admin]+="$(create_secs "$ADMIN_DIR" sh) "
  C[agent]+="$(create_secs "$AGENT_DIR" agent) "
  echo "round $r: write ${W[native]##* } / ${W[admin]##* } / ${W[agent]##* }" >&2
done
echo "| workload (median of $ROUNDS) | native | admin (passthrough) | agent (metered) | agent / admin |"
echo "|---|---|---|---|---|"
med() { echo "$1" | tr ' ' '\n' | grep . | median; }
n=$(med "${W[native]}"); a=$(med "${W[admin]}"); g=$(med "${W[agent]}")
printf '| dd 512 MiB, MiB/s | %.0f | %.0f | %.0f | %.2f× |\n' "$(echo "512/$n" | bc -l)" \
  "$(echo "512/$a" | bc -l)" "$(echo "512/$g" | bc -l)" "$(echo "$a/$g" | bc -l)"
n=$(med "${C[native]}"); a=$(med "${C[admin]}"); g=$(med "${C[agent]}")
printf '| create 5,000 × 4 KiB (sh loop), files/s | %.0f | %.0f | %.0f | %.2f× |\n' \
  "$(echo "5000/$n" | bc -l)" "$(echo "5000/$a" | bc -l)" "$(echo "5000/$g" | bc -l)" "$(echo "$a/$g" | bc -l)"
