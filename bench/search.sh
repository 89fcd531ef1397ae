#!/usr/bin/env bash
# bench/search.sh — the workspace index at scale (release build, built-in embedder):
#
#   bash bench/search.sh [DOCS] [QUERIES]        (defaults 100000 and 200)
#
# Writes DOCS synthetic Markdown notes (eight topics, so queries have real neighbours) into a
# temp workspace and reports: the time to index it fresh; one-document insert p50/p99 including
# the embedding; text, vector and hybrid top-10 query p50/p99; HNSW recall@10 against an exact
# scan; the index's size. First, the retrieval quality of each mode (hit@1, hit@3, MRR) over the
# project's retrieval set. Needs the model (scripts/fetch-model.sh). Cleans up on exit.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${1:-} in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
(cd "$REPO" && cargo build --release -q -p clawfs-search --example search_bench --example retrieval_quality)
echo "## Workspace index — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$REPO" rev-parse --short HEAD)"
"$REPO/target/release/examples/retrieval_quality"
"$REPO/target/release/examples/search_bench" "${1:-100000}" "${2:-200}"
