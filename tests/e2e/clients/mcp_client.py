"""An MCP client (the `mcp` PyPI package) driving `clawfs mcp`.

Usage: mcp_client.py CLAWFS_BIN ARGS... < calls.json
calls.json is a list of [tool, arguments]. Prints one JSON object: the server's name, the
protocol revision spoken, its tools (names, and whole definitions as listed), and, per call,
whether it was a tool error, its content blocks and its structured content; a protocol error is
recorded as {"protocol_error": message}.

MCP_MODE=legacy (the default) speaks the revisions with the initialize handshake
(ClientSession); MCP_MODE=auto lets the client probe the stateless revision (2026-07-28,
`server/discover`) and fall back. Either way the client checks each structured answer
against the tool's outputSchema.
"""

import asyncio
import json
import os
import sys

from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


async def run_calls(session, calls, out) -> None:
    listed = await session.list_tools()
    out["tools"] = [t.name for t in listed.tools]
    out["tool_defs"] = [
        t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools
    ]
    results = []
    for name, args in calls:
        try:
            r = await session.call_tool(name, args)
        except MCPError as e:
            results.append({"protocol_error": str(e)})
            continue
        results.append(
            {
                "is_error": r.is_error,
                "content": [c.model_dump(mode="json") for c in r.content],
                "structured": r.structured_content,
            }
        )
    out["results"] = results


async def main() -> None:
    calls = json.load(sys.stdin)
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    out = {}
    if os.environ.get("MCP_MODE", "legacy") == "legacy":
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["server"] = init.server_info.name
                out["protocol"] = init.protocol_version
                out["instructions"] = init.instructions
                await run_calls(session, calls, out)
    else:
        async with Client(params, mode="auto") as client:
            out["server"] = client.server_info.name if client.server_info else None
            out["protocol"] = client.protocol_version
            out["instructions"] = client.instructions
            await run_calls(client, calls, out)
    print(json.dumps(out))


asyncio.run(main())
