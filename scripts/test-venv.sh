#!/usr/bin/env bash
# The Python environment of the tests that drive ClawFS with third-party clients: target/test-venv
# with the MCP client library (`mcp`, pinned), from PyPI. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/test-venv
MCP_VERSION=2.3.0
if "$VENV/bin/python3" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$MCP_VERSION'" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
