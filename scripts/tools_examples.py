#!/usr/bin/env python3
"""Runs every docs/tools.md example against a live ClawFS mount and prints the Markdown.

    python3 scripts/tools_examples.py /path/to/mount > /tmp/examples.md

It writes a small fixture into the workspace "docs-example" (created if missing) and calls each
tool through <mount>/tools/call/<tool>, so the responses shown in docs/tools.md are real.
"""
import json
import os
import sys

MNT = sys.argv[1] if len(sys.argv) > 1 else "/clawfs"
WS_NAME = "docs-example"
WS = f"{MNT}/workspaces/{WS_NAME}"


def call(tool, req):
    fd = os.open(f"{MNT}/tools/call/{tool}", os.O_RDWR)
    try:
        os.write(fd, json.dumps({"workspace": WS_NAME, **req}).encode())
        out = b""
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            out += b
    finally:
        os.close(fd)
    return json.loads(out)


def setup():
    import shutil
    for d in ("Projects", "Archive", "Inbox", "Journal"):
        shutil.rmtree(f"{WS}/{d}", ignore_errors=True)
    os.makedirs(f"{WS}/Projects", exist_ok=True)
    os.makedirs(f"{WS}/Archive", exist_ok=True)
    with open(f"{WS}/Projects/Plan.md", "w") as f:
        f.write(
            "# Plan\n\nGoals for the quarter.\n\n## Tasks\n- TODO: write the docs\n"
            "- TODO: ship the beta\n- done: set up CI\n\n## Notes\nMeeting on Friday.\n"
        )
    with open(f"{WS}/Projects/Ideas.md", "w") as f:
        f.write("# Ideas\n- a faster search\n")
    with open(f"{WS}/Archive/Ideas.md", "w") as f:
        f.write("# Old ideas\n")


def fmt(value):
    """Compact JSON; a long object gets one top-level field per line."""
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) <= 100 or not isinstance(value, dict):
        return compact
    fields = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in value.items()]
    return "{\n" + ",\n".join(fields) + "\n}"


def show(title, tool, req):
    resp = call(tool, req)
    print(f"{title} — `tools/call/{tool}`:")
    print()
    print("```json")
    print(fmt(req))
    print("```")
    print("```json")
    print(fmt(resp))
    print("```")
    print()
    return resp


def main():
    setup()
    sha = lambda p: call("info", {"path": p})["sha256"]
    print("### resolve\n")
    show("By title", "resolve", {"title": "plan"})
    show("Ambiguous title", "resolve", {"title": "ideas"})
    print("### info\n")
    show("Success", "info", {"path": "Projects/Plan.md"})
    show("Missing file", "info", {"path": "Projects/Plan2.md"})
    print("### outline\n")
    show("Success", "outline", {"path": "Projects/Plan.md", "max_headings": 10})
    print("### search\n")
    show("Literal, with context", "search",
         {"path": "Projects/Plan.md", "pattern": "TODO", "context": 1, "max_hits": 1})
    show("Bad regex", "search", {"path": "Projects/Plan.md", "pattern": "TODO(", "regex": True})
    print("### read_range, head, tail\n")
    show("read_range", "read_range", {"path": "Projects/Plan.md", "start": 5, "end": 7})
    show("head with line numbers", "head", {"path": "Projects/Plan.md", "lines": 2, "line_numbers": True})
    show("tail", "tail", {"path": "Projects/Plan.md", "lines": 2})
    show("Out of range", "read_range", {"path": "Projects/Plan.md", "start": 50, "end": 60})
    print("### apply_patch\n")
    base = sha("Projects/Plan.md")
    patch = ("--- a/Projects/Plan.md\n+++ b/Projects/Plan.md\n@@ -6,2 +6,3 @@\n"
             "-- TODO: write the docs\n+- done: write the docs\n - TODO: ship the beta\n"
             "+- TODO: announce it\n")
    show("Success", "apply_patch", {"path": "Projects/Plan.md", "base_sha256": base, "patch": patch})
    show("Same patch, stale base", "apply_patch",
         {"path": "Projects/Plan.md", "base_sha256": base, "patch": patch})
    show("Context that does not match (file unchanged)", "apply_patch",
         {"path": "Projects/Plan.md", "base_sha256": sha("Projects/Plan.md"),
          "patch": "@@ -6,1 +6,1 @@\n-- TODO: write the tests\n+- done\n"})
    print("### edit_exact\n")
    show("Success", "edit_exact",
         {"path": "Projects/Plan.md", "base_sha256": sha("Projects/Plan.md"),
          "old": "Meeting on Friday.", "new": "Meeting on Monday."})
    show("Text occurs more than count", "edit_exact",
         {"path": "Projects/Plan.md", "old": "TODO", "new": "todo"})
    print("### read_file\n")
    show("Cut at max_chars", "read_file", {"path": "Projects/Plan.md", "max_chars": 80})
    print("### read_multiple_files\n")
    show("One good, one missing", "read_multiple_files",
         {"paths": ["Projects/Ideas.md", "Projects/Nope.md"], "line_numbers": False})
    print("### write_file\n")
    show("Creates parents", "write_file", {"path": "Inbox/2024/today.md", "content": "# Today\n"})
    show("overwrite=false on an existing file", "write_file",
         {"path": "Inbox/2024/today.md", "content": "x", "overwrite": False})
    print("### edit_file\n")
    show("Insert and replace, dry run", "edit_file",
         {"path": "Inbox/2024/today.md", "insert": {"line": 1, "text": "- call Bob"},
          "edits": [{"old": "# Today", "new": "# Monday"}], "dry_run": True})
    show("Text not found", "edit_file",
         {"path": "Inbox/2024/today.md", "edits": [{"old": "# Tuesday", "new": "x"}]})
    print("### move\n")
    show("Rename into a new folder", "move", {"from": "Inbox/2024/today.md", "to": "Journal/monday.md"})
    show("Destination exists", "move", {"from": "Projects/Ideas.md", "to": "Archive/Ideas.md"})
    print("### delete, list_trash, restore, empty_trash\n")
    d = show("delete", "delete", {"path": "Journal/monday.md"})
    show("list_trash", "list_trash", {})
    show("restore", "restore", {"trash_id": d["trash_id"]})
    show("restore again", "restore", {"trash_id": d["trash_id"]})
    d = show("delete again", "delete", {"path": "Journal/monday.md"})
    show("empty_trash", "empty_trash", {"trash_id": d["trash_id"]})
    print("### create_folder\n")
    show("Success", "create_folder", {"path": "Projects/2025/Q1"})
    show("Already a file", "create_folder", {"path": "Projects/Plan.md"})
    print("### get_file_info\n")
    show("A folder", "get_file_info", {"path": "Projects"})
    print("### search_files\n")
    show("Regex over *.md", "search_files", {"pattern": "^# .*[Ii]deas", "regex": True, "include": "*.md"})
    print("### find_files\n")
    show("By part of a name, a folder left out", "find_files", {"pattern": "ideas", "exclude": ["archive"]})
    print("### list_files\n")
    show("Glob, newest first", "list_files", {"glob": "*.md", "max_results": 3})
    show("Largest first, folders with their totals", "list_files", {"sort_by": "size", "max_results": 3})
    show("Not a folder", "list_files", {"path": "Projects/Plan.md"})
    print("### directory_tree\n")
    show("Folders only", "directory_tree", {"depth": 2, "include_files": False})
    print("### list_allowed\n")
    show("What this caller may do", "list_allowed", {})
    print("### Refusals common to all tools\n")
    show("Climbing out", "read_file", {"path": "../other/secret.md"})
    show("Protected name (any case)", "read_file", {"path": ".Obsidian/workspace.json"})
    show("Wrong type", "head", {"path": "Projects/Plan.md", "lines": "ten"})
    show("Unknown argument", "info", {"path": "Projects/Plan.md", "verbose": True})
    show("Unknown workspace", "info", {"path": "a.md", "workspace": "nope"})


if __name__ == "__main__":
    main()
