#!/usr/bin/env bash
# bench/specs.sh — verification of signed documents at scale (release build):
#
#   bash bench/specs.sh [DOCS] [ROUNDS]        (defaults 1000 and 5)
#
# Makes a temp store whose specs/ holds DOCS frozen documents of 4 KiB, each signed with
# Ed25519, and reports the time to verify them all (hash + signature, what `clawfs specs
# verify` does) and the daemon's check of a document on open, first and cached.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${1:-} in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
(cd "$REPO" && cargo build --release -q -p clawfs-core --example specs_bench)
echo "## Signed documents — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$REPO" rev-parse --short HEAD)"
"$REPO/target/release/examples/specs_bench" "${1:-1000}" "${2:-5}"
