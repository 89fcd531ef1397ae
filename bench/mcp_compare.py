#!/usr/bin/env python3
"""The agent tools over MCP, side by side with the reference MCP filesystem server.

    sudo target/test-venv/bin/python3 bench/mcp_compare.py --clawfs-bin target/release/clawfs \\
        [--calls 200] [--no-reference] [--workdir DIR]

As root (clawfs mcp starts the server as the agent). Makes a store and mount under the work
folder, and the same files in a plain folder for the reference server
(`@modelcontextprotocol/server-filesystem` 2026.8.31, installed from npm into
target/mcp-reference when Node is present). Both are driven by the `mcp` client library
(scripts/test-venv.sh installs it). Prints:

- the checklist: what an integrator needs, pass or fail for each server;
- per-call latency, p50 and p99 over --calls calls: read, search, edit, list;
- the edit loop on a 2,500-line note (find a line, change it): calls and bytes both ways;
- the schema an agent pays per conversation: the size of the tool list, lean and full.
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REFERENCE = "@modelcontextprotocol/server-filesystem@2026.8.31"
REPO = Path(__file__).resolve().parent.parent


def fixture(root: Path, owner=None) -> None:
    """The same files for both servers; `owner` (uid, gid) owns them (the agent's own files)."""
    (root / "notes").mkdir(parents=True, exist_ok=True)
    lines = [f"Line {i}: Paragraph about item {i}, status TODO-{i}." for i in range(1, 2501)]
    (root / "notes/Plan.md").write_text("# Plan\n" + "\n".join(lines) + "\n")
    (root / "notes/Atlas.md").write_text("# Atlas\nmaps and needles\n")
    (root / "notes/crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (root / "notes/latin1.txt").write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))
    (root / "notes/edit.md").write_text("state: alpha\n")
    (root / "notes/race.md").write_text("".join(f"slot {i}: free\n" for i in range(20)))
    with open(root / "big.log", "w") as f:
        for i in range(1, 1_000_001):
            f.write(f"{i:07d} log line with some words to make it about fifty bytes\n")
    for p in (root / "notes", *(root / "notes").iterdir(), root / "big.log"):
        os.chmod(p, 0o777 if p.is_dir() else 0o666)
        if owner:
            os.chown(p, *owner)


class Server:
    """One MCP server: how to reach it, and its names for the operations compared."""

    def __init__(self, name, params, path):
        self.name, self.params, self.path = name, params, path
        self.session = None
        self.tools = {}

    async def call(self, tool, args):
        started = time.perf_counter()
        r = await self.session.call_tool(tool, args)
        took = time.perf_counter() - started
        text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
        body = r.structured_content if r.structured_content is not None else text
        sent = len(json.dumps({"name": tool, "arguments": args}))
        got = len(json.dumps(r.structured_content)) if r.structured_content else len(text)
        return r.is_error, body, took, sent + got


async def session_of(server, stack):
    read, write = await stack.enter_async_context(stdio_client(server.params))
    s = await stack.enter_async_context(ClientSession(read, write))
    await s.initialize()
    listed = await s.list_tools()
    server.session = s
    server.tools = {t.name: t for t in listed.tools}
    defs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
    server.list_bytes = len(json.dumps(defs))
    # What a model is usually shown of a tool: its name, description and input schema.
    server.model_bytes = len(json.dumps([
        {k: d.get(k) for k in ("name", "description", "inputSchema")} for d in defs]))
    return server


def ok(flag, detail=""):
    return ("pass" if flag else "FAIL", detail)


async def checklist(sv, is_clawfs):
    """The integrator's checklist. Each item: (name, pass/FAIL, detail)."""
    p = sv.path
    out = []

    async def item(name, fn):
        try:
            out.append((name, *await fn()))
        except Exception as e:  # a tool the server lacks, a protocol error
            out.append((name, "FAIL", f"{type(e).__name__}: {str(e)[:60]}"))

    async def line_range():
        if is_clawfs:
            err, body, took, size = await sv.call("read_file", {"path": "big.log", "start": 500000, "end": 500002})
            return ok(not err and "0500001" in str(body) and size < 10_000, f"{size} B, {took*1000:.1f} ms")
        # Its read_text_file takes head or tail only: the middle of the file comes back whole
        # (60 MB, minutes), so it is not asked for here.
        return ok(False, "no line ranges (head or tail only)")

    async def content_search():
        if is_clawfs:
            err, body, _, _ = await sv.call("search_files", {"pattern": "needles"})
            return ok(not err and "Atlas.md" in json.dumps(body))
        return ok(False, "no content search")

    async def delete():
        name = "notes/gone.md"
        Path(sv.root, name).write_text("x\n")
        os.chmod(Path(sv.root, name), 0o666)
        if is_clawfs:
            err, _, _, _ = await sv.call("delete", {"path": name})
            return ok(not err and not Path(sv.root, name).exists())
        return ok(False, "no delete tool")

    async def patch():
        if is_clawfs:
            _, info, _, _ = await sv.call("read_file", {"path": "notes/edit.md"})
            diff = "--- a\n+++ b\n@@ -1 +1 @@\n-state: alpha\n+state: beta\n"
            err, _, _, _ = await sv.call(
                "apply_patch", {"path": "notes/edit.md", "base_sha256": info["sha256"], "patch": diff})
            return ok(not err and Path(sv.root, "notes/edit.md").read_text() == "state: beta\n")
        return ok(False, "no patch tool")

    async def crlf_kept():
        tool, args = (("edit_file", {"path": "notes/crlf.txt", "edits": [{"oldText": "two", "newText": "2"}]})
                      if is_clawfs else
                      ("edit_file", {"path": p("notes/crlf.txt"), "edits": [{"oldText": "two", "newText": "2"}]}))
        await sv.call(tool, args)
        data = Path(sv.root, "notes/crlf.txt").read_bytes()
        return ok(data == b"one\r\n2\r\nthree\r\n", repr(data))

    async def latin1_kept():
        before = Path(sv.root, "notes/latin1.txt").read_bytes()
        args = {"edits": [{"oldText": "cr", "newText": "CR"}]}
        args["path"] = "notes/latin1.txt" if is_clawfs else p("notes/latin1.txt")
        err, body, _, _ = await sv.call("edit_file", args)
        after = Path(sv.root, "notes/latin1.txt").read_bytes()
        kept = after == before or after == before.replace(b"cr", b"CR")
        hint = is_clawfs and "read_media_file" in json.dumps(body)
        return ok(kept and (hint or not is_clawfs), "refused, naming read_media_file" if hint else repr(after))

    async def concurrent_edits():
        async def one(i):
            args = {"edits": [{"oldText": f"slot {i}: free", "newText": f"slot {i}: taken"}]}
            args["path"] = "notes/race.md" if is_clawfs else p("notes/race.md")
            return await sv.call("edit_file", args)
        results = await asyncio.gather(*(one(i) for i in range(20)))
        text = Path(sv.root, "notes/race.md").read_text()
        applied = sum(1 for e, *_ in results if not e)
        kept = sum(1 for i in range(20) if f"slot {i}: taken" in text)
        return ok(kept == applied == 20 or (kept == applied), f"{applied} answered ok, {kept} of 20 on disk")

    async def glob_names():
        if is_clawfs:
            err, body, _, _ = await sv.call("search_files", {"pattern": "**/Atlas*"})
            return ok("Atlas.md" in json.dumps(body.get("names", [])))
        err, body, _, _ = await sv.call("search_files", {"path": p(""), "pattern": "**/Atlas*"})
        return ok("Atlas.md" in json.dumps(body))

    async def bounded():
        if is_clawfs:
            err, body, _, size = await sv.call("search_files", {"pattern": "Paragraph", "max_results": 500, "context": 10})
            return ok(size <= 25_000, f"{size} B")
        err, body, _, size = await sv.call("read_text_file", {"path": p("notes/Plan.md")})
        return ok(size <= 25_000, f"{size} B for one read")

    async def annotations():
        have = [t for t in sv.tools.values() if t.annotations is not None]
        return ok(len(have) == len(sv.tools), f"{len(have)} of {len(sv.tools)}")

    async def output_schemas():
        have = [t for t in sv.tools.values() if getattr(t, "output_schema", None)]
        return ok(len(have) >= len(sv.tools) - 1, f"{len(have)} of {len(sv.tools)}")

    async def hash_in_read():
        if is_clawfs:
            err, body, _, _ = await sv.call("read_file", {"path": "notes/Atlas.md"})
            return ok(len(body.get("sha256", "")) == 64)
        err, body, _, _ = await sv.call("read_text_file", {"path": p("notes/Atlas.md")})
        return ok("sha256" in json.dumps(body), "no hash: a concurrent change is not detected")

    async def backups():
        if is_clawfs:
            err, body, _, _ = await sv.call("list_backups", {"path": "notes/edit.md"})
            return ok(not err and len(body["backups"]) >= 1, f"{len(body.get('backups', []))} listed")
        return ok(False, "no backups")

    for name, fn in [
        ("a line range of a 60 MB file", line_range),
        ("content search", content_search),
        ("delete", delete),
        ("unified-diff patch, hash-checked", patch),
        ("CRLF kept by an edit", crlf_kept),
        ("Latin-1 file not corrupted by an edit", latin1_kept),
        ("20 concurrent edits, none lost", concurrent_edits),
        ("a glob in search_files finds names", glob_names),
        ("answers bounded (~20k characters)", bounded),
        ("annotations on every tool", annotations),
        ("output schemas", output_schemas),
        ("the file's hash with a read", hash_in_read),
        ("backups listed", backups),
    ]:
        await item(name, fn)
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] * 1000


async def latency(sv, is_clawfs, calls):
    p = sv.path
    if is_clawfs:
        ops = {
            "read": ("read_file", {"path": "notes/Plan.md", "start": 100, "end": 120}),
            "search": ("search_files", {"pattern": "TODO-1234.", "path": "notes"}),
            "list": ("list_files", {"path": "notes"}),
        }
        # Only listed tools: a client re-lists the tools before calling one it was not shown.
        edit = lambda i: ("edit_file", {"path": "notes/edit.md", "edits": [{
            "oldText": ["state: beta", "state: gamma"][i % 2], "newText": ["state: gamma", "state: beta"][i % 2]}]})
    else:
        ops = {
            "read": ("read_text_file", {"path": p("notes/Plan.md"), "head": 20}),
            "search": ("search_files", {"path": p("notes"), "pattern": "*Plan*"}),
            "list": ("list_directory", {"path": p("notes")}),
        }
        edit = lambda i: ("edit_file", {"path": p("notes/edit.md"), "edits": [{
            "oldText": ["state: beta", "state: gamma"][i % 2], "newText": ["state: gamma", "state: beta"][i % 2]}]})
    out = {}
    for op, (tool, args) in ops.items():
        times = [(await sv.call(tool, args))[2] for _ in range(calls)]
        out[op] = times
    Path(sv.root, "notes/edit.md").write_text("state: beta\n")
    out["edit"] = [(await sv.call(*edit(i)))[2] for i in range(calls)]
    return out


async def edit_loop(sv, is_clawfs):
    """Find the line of TODO-1777 in the 2,500-line note and mark it done."""
    p = sv.path
    steps = []
    if is_clawfs:
        _, hit, _, n = await sv.call("search_files", {"pattern": "TODO-1777.", "path": "notes",
                                                      "include": "Plan.md"})
        steps.append(n)
        line = hit["matches"][0]["line"]
        _, read, _, n = await sv.call("read_file", {"path": "notes/Plan.md", "start": line, "end": line})
        steps.append(n)
        old = read["content"].rstrip("\n")
        err, _, _, n = await sv.call("edit_file", {"path": "notes/Plan.md", "base_sha256": read["sha256"],
                                                   "edits": [{"oldText": old,
                                                              "newText": old.replace("TODO-1777", "DONE-1777")}]})
        steps.append(n)
    else:
        _, text, _, n = await sv.call("read_text_file", {"path": p("notes/Plan.md")})
        steps.append(n)
        if isinstance(text, dict):
            text = text.get("content", "")
        old = next(l for l in str(text).splitlines() if "TODO-1777." in l)
        err, _, _, n = await sv.call("edit_file", {"path": p("notes/Plan.md"), "edits": [
            {"oldText": old, "newText": old.replace("TODO-1777", "DONE-1777")}]})
        steps.append(n)
        _, _, _, n = await sv.call("read_text_file", {"path": p("notes/Plan.md"), "tail": 5})
        steps.append(n)
    done = "DONE-1777." in Path(sv.root, "notes/Plan.md").read_text()
    return len(steps), sum(steps), done


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clawfs-bin", default=str(REPO / "target/release/clawfs"))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="clawfs-mcp-bench."))
    # The agent must reach the mount through it.
    os.chmod(work, 0o755)
    store, mnt, plain = work / "store", work / "mnt", work / "plain"
    for d in (mnt, plain):
        d.mkdir(parents=True, exist_ok=True)
    bin_ = args.clawfs_bin
    subprocess.run([bin_, "init", "--store", store], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([bin_, "mount", mnt, "--store", store, "--no-search"], check=True, stdout=subprocess.DEVNULL)
    try:
        os.chmod(mnt / "workspaces", 0o755)
        os.chmod(mnt / "workspaces/default", 0o1777)
        agent = os.stat(mnt / "agents/fs-engine")
        fixture(mnt / "workspaces/default", (agent.st_uid, agent.st_gid))
        fixture(plain)
        servers = []
        for tools in ("lean", "full"):
            cmd = [bin_, "mcp", "--store", str(store), "--mount", str(mnt), "--agent", "fs-engine",
                   "--no-sandbox", "--tools", tools]
            sv = Server(f"clawfs mcp ({tools})", StdioServerParameters(command=cmd[0], args=cmd[1:]),
                        lambda rel: rel)
            sv.root = mnt / "workspaces/default"
            servers.append((sv, True))
        ref = None
        if not args.no_reference and shutil.which("node"):
            prefix = REPO / "target/mcp-reference"
            exe = prefix / "node_modules/.bin/mcp-server-filesystem"
            if not exe.exists():
                subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix,
                                REFERENCE], check=True)
            ref = Server("reference", StdioServerParameters(command=str(exe), args=[str(plain)]),
                         lambda rel: str(plain / rel))
            ref.root = plain
        from contextlib import AsyncExitStack
        async with AsyncExitStack() as stack:
            lean, full = [await session_of(sv, stack) for sv, _ in servers]
            if ref:
                await session_of(ref, stack)
            print(f"# Agent tools over MCP — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                  f"{os.cpu_count()} CPUs, {args.calls} calls per figure\n")
            print("## Tools listed (what an agent pays per conversation)\n")
            print("| server | tools | tools/list bytes | name, description, input schema |\n|---|---:|---:|---:|")
            for sv in [lean, full] + ([ref] if ref else []):
                print(f"| {sv.name} | {len(sv.tools)} | {sv.list_bytes} | {sv.model_bytes} |")
            both = [(lean, True)] + ([(ref, False)] if ref else [])
            print("\n## Checklist\n")
            results = {sv.name: await checklist(sv, c) for sv, c in both}
            names = [r[0] for r in results[lean.name]]
            print("| item | " + " | ".join(results) + " |\n|---|" + "---|" * len(results))
            for i, n in enumerate(names):
                cells = [f"{results[s][i][1]} {results[s][i][2]}".strip() for s in results]
                print(f"| {n} | " + " | ".join(cells) + " |")
            print("| passed | " + " | ".join(
                f"{sum(r[1] == 'pass' for r in results[s])} of {len(names)}" for s in results) + " |")
            print("\n## Edit loop: find TODO-1777 in a 2,500-line note and mark it done\n")
            print("| server | calls | bytes (both ways) | done |\n|---|---:|---:|---|")
            for sv, c in both:
                n, size, done = await edit_loop(sv, c)
                print(f"| {sv.name} | {n} | {size} | {done} |")
            print(f"\n## Per-call latency, ms (p50 / p99 of {args.calls})\n")
            print("| server | read | search | edit | list |\n|---|---:|---:|---:|---:|")
            for sv, c in both:
                t = await latency(sv, c, args.calls)
                print(f"| {sv.name} | " + " | ".join(
                    f"{pct(t[o], 0.5):.2f} / {pct(t[o], 0.99):.2f}" for o in ("read", "search", "edit", "list")) + " |")
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench/mcp_compare.py: run as root (clawfs mcp starts the server as the agent)")
    asyncio.run(main())
