#!/usr/bin/env bash
# bench/wasm.sh — what a call of a published WebAssembly tool costs through the mount:
#   - a trivial tool (echo) through tools/call/, warm (compiled code kept): p50 and p99;
#   - the first call after a mount (the tool compiled then): p50 over fresh mounts;
#   - a tool reading a 1 MiB file of its workspace (and answering it whole) against the built-in
#     info (which reads it whole) and read_file (at most 100,000 characters) on the same file.
# As root, on a fresh store under --workdir.
#
#   bash bench/wasm.sh [--clawfs-bin BIN] [--calls N] [--cold N] [--workdir DIR]
#
# Needs wat2wasm (Debian's wabt; installed when missing). Without --clawfs-bin it builds
# target/release/clawfs first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bin="" calls=500 cold=5 work=/tmp/clawfs-bench-wasm
while [[ $# -gt 0 ]]; do
    case $1 in
        --clawfs-bin) bin=$2; shift 2 ;;
        --calls) calls=$2; shift 2 ;;
        --cold) cold=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "$0: run as root" >&2; exit 1; }
command -v wat2wasm >/dev/null || apt-get install -y -q wabt >/dev/null
bin=$(release_clawfs "$bin")
store=$work/store mnt=$work/mnt
stop() { "$bin" umount "$mnt" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap stop EXIT
rm -rf "$work"; mkdir -p "$work/pub" "$mnt"

"$bin" init --store "$store" >/dev/null
export CLAWFS_VAULT_PASSPHRASE="bench passphrase"
"$bin" vault --store "$store" init --sealer passphrase >/dev/null
"$bin" specs --store "$store" keygen --as bench >/dev/null
publish() { # ID WAT CAPABILITY
    local id=$1 wat=$2 cap=$3
    wat2wasm "$here/../tools/wasm/testdata/$wat.wat" -o "$work/pub/$id-v1.0.0.wasm"
    cat > "$work/pub/tool-$id.json" <<EOF
{"tool_id": "$id", "version": "1.0.0", "wasm_path": "/clawfs/tools/binaries/$id-v1.0.0.wasm",
 "wit_interface": "wasi:cli/command", "capabilities": [$cap], "memory_limit_mb": 64,
 "cpu_quota_percent": 100, "timeout_seconds": 30}
EOF
    "$bin" tools --store "$store" add "$work/pub/tool-$id.json" "$work/pub/$id-v1.0.0.wasm" \
        --as bench >/dev/null
}
publish echo echo ''
publish cat-file read_file '"filesystem:read:/clawfs/workspaces/default"'
"$bin" mount "$mnt" --store "$store" --no-search >/dev/null
python3 -c 'import json; print(json.dumps({"text": "x" * (1 << 20)}))' > "$mnt/workspaces/default/big.json"

# Times CALLS calls of TOOL with REQUEST through tools/call/; prints "p50 p99" in ms.
time_calls() {
    python3 - "$mnt/tools/call/$1" "$2" "$3" <<'PY'
import os, sys, time
path, request, n = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
times = []
for _ in range(n):
    t = time.perf_counter()
    fd = os.open(path, os.O_RDWR)
    os.write(fd, request)
    out = b""
    while chunk := os.read(fd, 1 << 20):
        out += chunk
    os.close(fd)
    times.append((time.perf_counter() - t) * 1000)
    assert b'"ok":true' in out, out[:300]
times.sort()
print(f"{times[len(times) // 2]:.3f} {times[min(len(times) - 1, int(len(times) * 0.99))]:.3f}")
PY
}

time_calls echo '{"hello":"world"}' 1 >/dev/null # compiled now
read -r echo50 echo99 <<< "$(time_calls echo '{"hello":"world"}' "$calls")"
n=$((calls / 10 > 20 ? calls / 10 : 20))
read -r wasm50 wasm99 <<< "$(time_calls cat-file 'big.json' "$n")"
# The built-ins for scale: info reads the whole file (its SHA-256); read_file returns at most
# 100,000 characters of it.
read -r info50 info99 <<< "$(time_calls info '{"path":"big.json"}' "$n")"
read -r native50 native99 <<< "$(time_calls read_file '{"path":"big.json","line_numbers":false,"max_chars":100000}' "$n")"
colds=()
for _ in $(seq "$cold"); do
    "$bin" umount "$mnt" >/dev/null
    "$bin" mount "$mnt" --store "$store" --no-search >/dev/null
    colds+=("$(time_calls echo '{"hello":"world"}' 1 | cut -d' ' -f1)")
done
cold50=$(printf '%s\n' "${colds[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')

echo "## Published WebAssembly tools through tools/call/ — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo
echo "| call | p50 (ms) | p99 (ms) | calls |"
echo "|---|---:|---:|---:|"
echo "| echo (trivial tool), warm | $echo50 | $echo99 | $calls |"
echo "| echo, first call after a mount (compiles) | $cold50 | | $cold |"
echo "| tool reading a 1 MiB file of its workspace | $wasm50 | $wasm99 | $n |"
echo "| built-in \`info\` of the same file (reads it whole to hash it) | $info50 | $info99 | $n |"
echo "| built-in \`read_file\` of the same file (its first 100,000 characters) | $native50 | $native99 | $n |"
