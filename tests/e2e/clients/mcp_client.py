"""An MCP client (the `mcp` PyPI package) driving `clawfs mcp`.

Usage: mcp_client.py CLAWFS_BIN ARGS... < calls.json
calls.json is a list of [tool, arguments]. Prints one JSON object: the server's name, its tools
(names, and whole definitions as listed), and, per call, whether it was a tool error, its content blocks and its structured content; a
protocol error is recorded as {"protocol_error": message}.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


async def main() -> None:
    calls = json.load(sys.stdin)
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            out["instructions"] = init.instructions
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
    print(json.dumps(out))


asyncio.run(main())
