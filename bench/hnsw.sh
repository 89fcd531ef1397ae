#!/usr/bin/env bash
# bench/hnsw.sh — what an HNSW graph costs to build (release build):
#
#   bash bench/hnsw.sh [N] [DIM] [KINDS] [EF]     (defaults 20000 1536 f32,bf16,f16 200)
#
# Builds the graph of N clustered DIM-dimension vectors on every core for each scalar type the
# graph can store (f32 is what ClawFS stores), and prints inserts per second and recall@10
# against an exact scan. The figures behind the migration's time in docs/benchmarks.md.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${1:-} in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
(cd "$REPO" && cargo build --release -q -p clawfs-search --example hnsw_build)
echo "## HNSW build — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$REPO" rev-parse --short HEAD)"
"$REPO/target/release/examples/hnsw_build" "$@"
