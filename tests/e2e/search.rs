//! Workspace search end to end: files written through the mount are found by text, meaning and
//! both, with their line ranges; the index follows edits, renames and deletes; a caller never sees
//! a hit in a file it may not read; the dimension changes with setfattr; the CLI works.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{clawfs, sh_as_nobody, tool_call, tool_call_script, Mounted};

/// The hits of a `semantic_search` call (as root).
fn hits(m: &Mounted, query: &str, mode: &str) -> Vec<Value> {
    let r = tool_call(m, "semantic_search", &json!({"query": query, "mode": mode}));
    assert_eq!(r["ok"], true, "{r}");
    r["hits"].as_array().unwrap().clone()
}

/// Polls until `cond` holds on the hits (the index follows in the background).
fn until(m: &Mounted, query: &str, mode: &str, cond: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let h = hits(m, query, mode);
        if cond(&h) || Instant::now() > deadline {
            return h;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `public.md` (everyone may read it) and `secret.md` (root's alone, 0600), both about a
/// rocket; the secret one says `secret`.
fn public_and_secret(ws: &std::path::Path, secret: &str) {
    std::fs::write(
        ws.join("public.md"),
        "# Public\n\nthe launch plan for the rocket\n",
    )
    .unwrap();
    std::fs::write(ws.join("secret.md"), format!("# Secret\n\n{secret}\n")).unwrap();
    std::fs::set_permissions(
        ws.join("secret.md"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

fn paths(h: &[Value]) -> Vec<&str> {
    h.iter().map(|h| h["path"].as_str().unwrap()).collect()
}

#[test]
fn the_index_follows_writes_renames_and_deletes() {
    let m = Mounted::new();
    let ws = m.ws();
    std::fs::create_dir(ws.join("notes")).unwrap();
    std::fs::write(
        ws.join("notes/pets.md"),
        "# Pets\n\n## Cats\nThe kitten sleeps on the sofa all afternoon.\n\n## Dogs\nThe puppy chews shoes.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("budget.txt"),
        "quarterly revenue grew\noperating costs fell\n",
    )
    .unwrap();

    let h = until(&m, "operating costs", "text", |h| !h.is_empty());
    assert_eq!(paths(&h), ["budget.txt"], "{h:?}");
    assert_eq!(
        (h[0]["line_start"].as_u64(), h[0]["line_end"].as_u64()),
        (Some(1), Some(2))
    );
    // Meaning alone: no word of the query is in the file.
    // (Waiting for pets.md itself: budget.txt may be indexed first, and alone it is a hit.)
    let h = until(&m, "small feline napping", "vector", |h| {
        h.iter().any(|x| x["path"] == "notes/pets.md")
    });
    assert_eq!(h[0]["path"], "notes/pets.md", "{h:?}");
    assert_eq!(h[0]["heading"], "Pets > Cats");
    assert_eq!(h[0]["line_start"], 3, "the chunk starts at its heading");

    // An edit replaces what the index holds.
    std::fs::write(ws.join("budget.txt"), "the zebra herd migrates\n").unwrap();
    let h = until(&m, "zebra", "text", |h| !h.is_empty());
    assert_eq!(paths(&h), ["budget.txt"]);
    assert!(until(&m, "operating costs", "text", |h| h.is_empty()).is_empty());
    // A rename moves it; a delete forgets it.
    std::fs::rename(ws.join("budget.txt"), ws.join("notes/zebras.txt")).unwrap();
    let h = until(&m, "zebra", "text", |h| paths(h) == ["notes/zebras.txt"]);
    assert_eq!(paths(&h), ["notes/zebras.txt"]);
    std::fs::remove_file(ws.join("notes/zebras.txt")).unwrap();
    assert!(until(&m, "zebra", "text", |h| h.is_empty()).is_empty());
    // A folder renamed: everything below it moves.
    std::fs::rename(ws.join("notes"), ws.join("animals")).unwrap();
    let h = until(&m, "puppy", "text", |h| paths(h) == ["animals/pets.md"]);
    assert_eq!(paths(&h), ["animals/pets.md"]);
    // A file written by a tool call is indexed too.
    let r = tool_call(
        &m,
        "write_file",
        &json!({"path": "tool.md", "content": "# T\n\nwritten by the otter tool\n"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let h = until(&m, "otter", "text", |h| !h.is_empty());
    assert_eq!(paths(&h), ["tool.md"]);
}

#[test]
fn a_caller_never_sees_hits_it_may_not_read() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let ws = m.ws();
    public_and_secret(&ws, "the launch codes for the rocket");
    let h = until(&m, "rocket launch", "text", |h| h.len() == 2);
    assert_eq!(h.len(), 2, "root sees both: {h:?}");
    for mode in ["text", "vector", "hybrid"] {
        let out = sh_as_nobody(&tool_call_script(
            &m,
            "semantic_search",
            &json!({"query": "rocket launch", "mode": mode}),
        ));
        let r: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(r["ok"], true, "{r}");
        let seen: Vec<&str> = r["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["path"].as_str().unwrap())
            .collect();
        assert_eq!(seen, ["public.md"], "{mode}: nobody must not see secret.md");
    }
}

#[test]
fn the_dimension_changes_with_setfattr_and_the_cli_searches() {
    let m = Mounted::new();
    std::fs::write(
        m.ws().join("a.md"),
        "# Alpha\n\nhydroelectric dam turbines\n",
    )
    .unwrap();
    until(&m, "turbines", "text", |h| !h.is_empty());
    let status = |m: &Mounted| -> Value {
        let out = clawfs([
            OsStr::new("index"),
            OsStr::new("--store"),
            m.store.as_os_str(),
            OsStr::new("status"),
            OsStr::new("--json"),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(status(&m)["dimension"], 1536);
    let ws = m.ws();
    let set = |v: &str| {
        std::process::Command::new("setfattr")
            .args(["-n", "user.clawfs.vector_dimension", "-v", v])
            .arg(&ws)
            .output()
            .unwrap()
    };
    let bad = set("100");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("Invalid argument"),
        "{bad:?}"
    );
    assert!(set("512").status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while status(&m)["dimension"] != 512 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = status(&m);
    assert_eq!(s["dimension"], 512, "{s}");
    assert_eq!(s["embedder"], "model2vec:potion-base-8M:512");
    let h = until(&m, "water power plant", "vector", |h| !h.is_empty());
    assert_eq!(h[0]["path"], "a.md");
    // The CLI, through the mount, as the caller.
    let out = clawfs([
        OsStr::new("search"),
        OsStr::new("default"),
        OsStr::new("turbines"),
        OsStr::new("--mount"),
        m.mnt.as_os_str(),
        OsStr::new("--json"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["path"], "a.md");
}

/// Tags are the comma-separated values of `user.xdg.tags` (or `user.tags`), set with setfattr
/// through the mount; a query asking for tags finds only files carrying all of them, and
/// follows the attributes as they change (no re-index needed).
#[test]
fn queries_filter_by_tags_from_user_xattrs() {
    let m = Mounted::new();
    let ws = m.ws();
    for f in ["a.md", "b.md", "c.md"] {
        std::fs::write(ws.join(f), "# Otters\n\nThe river otter hunts at dusk.\n").unwrap();
    }
    xattr::set(ws.join("a.md"), "user.xdg.tags", b"Draft, q3").unwrap();
    xattr::set(ws.join("b.md"), "user.tags", b"q3").unwrap();
    assert_eq!(until(&m, "river otter", "text", |h| h.len() == 3).len(), 3);
    let tagged = |tags: &[&str]| -> Vec<String> {
        let r = tool_call(
            &m,
            "semantic_search",
            &json!({"query": "river otter", "mode": "text", "tags": tags}),
        );
        assert_eq!(r["ok"], true, "{r}");
        let mut p: Vec<String> = r["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["path"].as_str().unwrap().to_string())
            .collect();
        p.sort();
        p
    };
    assert_eq!(tagged(&["draft"]), ["a.md"]);
    assert_eq!(tagged(&["q3"]), ["a.md", "b.md"]);
    assert_eq!(tagged(&["Q3", "draft"]), ["a.md"]);
    assert_eq!(tagged(&["final"]), Vec::<String>::new());
    // The attribute changes, the answer follows (once the file, whose change time moved, is
    // indexed again).
    xattr::set(ws.join("c.md"), "user.xdg.tags", b"final").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while tagged(&["final"]) != ["c.md"] {
        assert!(Instant::now() < deadline, "{:?}", tagged(&["final"]));
        std::thread::sleep(Duration::from_millis(100));
    }
    // A chmod does not lose a file from search either.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o640);
    std::fs::set_permissions(ws.join("b.md"), mode).unwrap();
    assert_eq!(until(&m, "river otter", "text", |h| h.len() == 3).len(), 3);
    // The CLI's --tag.
    let out = clawfs([
        OsStr::new("search"),
        OsStr::new("default"),
        OsStr::new("river otter"),
        OsStr::new("--mode"),
        OsStr::new("text"),
        OsStr::new("--tag"),
        OsStr::new("draft"),
        OsStr::new("--json"),
        OsStr::new("--mount"),
        m.mnt.as_os_str(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.lines().count() == 1 && said.contains("a.md"),
        "{said}"
    );
    // Bad tag lists are refused with a reason.
    let r = tool_call(
        &m,
        "semantic_search",
        &json!({"query": "otter", "tags": ["a,b"]}),
    );
    assert_eq!(r["ok"], false, "{r}");
}

/// `ls .search/<query>` lists the best files, ranked, as symlinks into the workspace, for the
/// caller: a file the caller may not read is not there; `.search` cannot be created, written or
/// shadowed.
#[test]
fn a_query_is_a_folder_of_symlinks_to_the_best_files() {
    let m = Mounted::new();
    m.open_workspace_to_all();
    let ws = m.ws();
    std::fs::create_dir(ws.join("health")).unwrap();
    std::fs::write(
        ws.join("health/sleep.md"),
        "# Sleep hygiene\n\nKeep a regular bedtime and avoid caffeine after noon.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("diary.md"),
        "# Diary\n\nI slept badly again, bedtime caffeine.\n",
    )
    .unwrap();
    std::fs::set_permissions(
        ws.join("diary.md"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    until(&m, "bedtime caffeine", "text", |h| h.len() == 2);
    let dir = ws.join(".search/bedtime caffeine");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("01-") && names[1].starts_with("02-"));
    let sleep = names.iter().find(|n| n.ends_with("sleep.md")).unwrap();
    assert_eq!(
        std::fs::read_link(dir.join(sleep)).unwrap(),
        std::path::Path::new("../../health/sleep.md")
    );
    assert!(std::fs::read_to_string(dir.join(sleep))
        .unwrap()
        .contains("regular bedtime"));
    // Another user sees only what it may read: the root-only diary is not listed.
    let out = sh_as_nobody(&format!("ls '{}'", dir.display()));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(
        listed.contains("sleep.md") && !listed.contains("diary"),
        "{listed}"
    );
    // Not listed in the workspace; cannot be made or written.
    assert!(!std::fs::read_dir(&ws)
        .unwrap()
        .any(|e| e.unwrap().file_name() == ".search"));
    assert!(std::fs::create_dir(ws.join(".search")).is_err());
    assert!(std::fs::write(dir.join("x"), "x").is_err());
    assert!(std::fs::write(ws.join(".search/x"), "x").is_err());
}

/// `sqlite3` on the workspace's `workspace.db` as `who` (`root` or `nobody`).
fn sqlite(who: &str, db: &std::path::Path, sql: &str) -> String {
    let cmd = format!("sqlite3 -readonly '{}' \"{sql}\"", db.display());
    let out = match who {
        "root" => std::process::Command::new("sh")
            .args(["-c", &cmd])
            .output()
            .unwrap(),
        _ => sh_as_nobody(&cmd),
    };
    assert!(
        out.status.success(),
        "{who}: {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn workspace_db_is_the_index_as_the_caller_may_read_it() {
    // The kernel refuses some of what follows itself (the ACLs): on record with --trace-syscalls.
    let m = Mounted::with_args(&["--trace-syscalls"]);
    m.open_workspace_to_all();
    let ws = m.ws();
    public_and_secret(&ws, "the rocket zanzibarite codes");
    // A protected name's file is indexed, but no tool shows it, and neither does the view.
    std::fs::create_dir(ws.join(".obsidian")).unwrap();
    std::fs::write(
        ws.join(".obsidian/cache.md"),
        "the rocket workspace cache\n",
    )
    .unwrap();
    until(&m, "rocket", "text", |h| h.len() == 2);
    let index = m.backing(".clawfs/index/default/index.db");
    let indexed = (0..150).any(|_| {
        let out = std::process::Command::new("sqlite3")
            .arg(&index)
            .arg("SELECT count(*) FROM files WHERE path = '.obsidian/cache.md'")
            .output()
            .unwrap();
        let found = String::from_utf8_lossy(&out.stdout).trim() == "1";
        if !found {
            std::thread::sleep(Duration::from_millis(100));
        }
        found
    });
    assert!(indexed, "the protected file is indexed");
    let db = ws.join("workspace.db");
    assert!(std::fs::read_dir(&ws)
        .unwrap()
        .any(|e| e.unwrap().file_name() == "workspace.db"));

    // Root reads the whole index with sqlite3: files, chunks with line ranges, FTS5.
    let files = sqlite("root", &db, "SELECT path FROM files ORDER BY path");
    assert_eq!(files, "public.md\nsecret.md\n");
    let found = sqlite(
        "root",
        &db,
        "SELECT c.path, c.line_start FROM documents d JOIN chunks c ON c.id = d.rowid WHERE documents MATCH 'zanzibarite'",
    );
    assert_eq!(found.trim(), "secret.md|1");

    // Another user's copy holds nothing of the file it may not read, not even a word.
    assert_eq!(
        sqlite("nobody", &db, "SELECT path FROM files"),
        "public.md\n"
    );
    assert_eq!(
        sqlite(
            "nobody",
            &db,
            "SELECT count(*) FROM documents WHERE documents MATCH 'zanzibarite'"
        ),
        "0\n"
    );
    let out = sh_as_nobody(&format!("cat '{}'", db.display()));
    assert!(out.status.success());
    assert!(out.stdout.starts_with(b"SQLite format 3\0"));
    assert!(
        !out.stdout.windows(11).any(|w| w == b"zanzibarite"),
        "the word of the unreadable file is in nobody's copy"
    );

    // Read-only: not written, replaced, removed or shadowed, for root either.
    assert_eq!(
        crate::common::errno(std::fs::OpenOptions::new().write(true).open(&db)),
        libc::EACCES
    );
    assert_eq!(crate::common::errno(std::fs::remove_file(&db)), libc::EPERM);
    assert_eq!(
        crate::common::errno(std::fs::rename(ws.join("public.md"), &db)),
        libc::EPERM
    );
    std::fs::create_dir(ws.join("dir")).unwrap();
    assert_eq!(
        crate::common::errno(std::fs::rename(ws.join("dir"), ws.join(".search"))),
        libc::EPERM,
        "a folder renamed onto .search would hide behind the generated one"
    );
    std::fs::remove_dir(ws.join("dir")).unwrap();
    for (tool, args) in [
        (
            "write_file",
            json!({"path": "workspace.db", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": ".search/x.md", "content": "x"}),
        ),
        ("move", json!({"from": "public.md", "to": "workspace.db"})),
    ] {
        let r = tool_call(&m, tool, &args);
        assert_eq!(r["error"], "denied", "{tool} {args}: {r}");
    }
    assert!(ws.join("public.md").exists());
    assert!(!m.backing("workspaces/default/workspace.db").exists());
    assert!(!m.backing("workspaces/default/.search").exists());
    assert_eq!(sqlite("root", &db, "SELECT count(*) FROM files"), "2\n");

    // An agent reads its own copy; in a workspace it has no grant to, it is refused, and the
    // refusal is on the trail.
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "sqlite3 -readonly '{}' 'SELECT path FROM files'",
            db.display()
        ),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "public.md\n");
    let private = m.path("workspaces/private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    // In the default sandbox (its clean environment: a test's LD_LIBRARY_PATH would make the
    // shell's library search hundreds of monitored opens).
    let out = m.run_agent_as(
        "fs-engine",
        &[],
        &format!("cat '{}/workspace.db' > /dev/null", private.display()),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{out:?}"
    );
    let denied = |r: &Value| {
        r["agent"] == "fs-engine"
            && r["path"] == "/workspaces/private/workspace.db"
            && r["errno"] == libc::EACCES
    };
    let trail = crate::common::audit_until(&m, |all| all.iter().any(denied));
    assert!(trail.iter().any(denied), "{trail:?}");
}

/// Indexing a new file leaves its access time alone: the index's read is no one's read
/// (xfstests generic/003 saw a file's atime change a second after it was created).
#[test]
fn indexing_does_not_touch_access_times() {
    use std::os::unix::fs::MetadataExt;
    let m = Mounted::new();
    std::fs::write(m.ws().join("quiet.txt"), "a marmot keeps to itself\n").unwrap();
    let backing = m.backing("workspaces/default/quiet.txt");
    let atime = |p: &std::path::Path| {
        let md = std::fs::metadata(p).unwrap();
        (md.atime(), md.atime_nsec())
    };
    let before = atime(&backing);
    until(&m, "marmot", "text", |h| !h.is_empty());
    assert_eq!(
        atime(&backing),
        before,
        "the index's read changed the atime"
    );
}

/// The indexer runs at the back of the machine: its threads are `SCHED_IDLE` for the CPU and
/// in the idle I/O class, so agents' builds and the host's work go first.
#[test]
fn the_indexer_runs_at_idle_priority() {
    let m = Mounted::new();
    let pid = m.daemon_pid();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let indexer: Vec<String> = tasks
        .flatten()
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() == "indexer")
        })
        .collect();
    assert_eq!(indexer.len(), 1, "one indexer thread");
    let tid = &indexer[0];
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; the policy is field 41 (SCHED_IDLE = 5).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    assert_eq!(fields[41 - 3], "5", "scheduling policy: {stat}");
    let out = std::process::Command::new("ionice")
        .args(["-p", tid])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("idle"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
