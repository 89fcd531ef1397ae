//! Attacks on workspace search by a second user who shares the workspace (red team, search
//! round 1): the hits of a query are exactly what the caller could read directly.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{tool_call, tool_call_script, Mounted};
use crate::support::TempUser;

/// `semantic_search` as `user`.
fn search_as(m: &Mounted, user: &TempUser, query: &str, mode: &str) -> Vec<String> {
    let out = user.sh(&tool_call_script(
        m,
        "semantic_search",
        &json!({"query": query, "mode": mode}),
    ));
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r["ok"], true, "{r}");
    r["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{} {}", h["path"].as_str().unwrap(), h["snippet"]))
        .collect()
}

fn indexed(m: &Mounted, word: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let r = tool_call(
            m,
            "semantic_search",
            &json!({"query": word, "mode": "text"}),
        );
        if !r["hits"].as_array().unwrap().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{word} was never indexed");
}

/// Bob swaps his own file in at the path of Alice's private one, same size and mtime: the
/// chunks stay Alice's, not the path's, before and after the indexer sees the swap.
#[test]
fn a_file_swapped_in_at_a_private_files_path_shows_nothing_of_it() {
    // A shared workspace without the sticky bit: anyone may rename anyone's file in it.
    let (m, alice, bob) = shared(["sa", "sb"]);
    let ws = m.ws();
    let out = alice.sh(&format!(
        "umask 077; printf 'alice ibexword private\\n' > {}/pers.txt",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    indexed(&m, "ibexword");
    assert!(
        search_as(&m, &bob, "ibexword", "text").is_empty(),
        "bob cannot read pers.txt"
    );
    let out = bob.sh(&format!(
        "cd {} && s=$(stat -c %s pers.txt) && mt=$(stat -c %y pers.txt) && head -c $s /dev/zero | tr '\\0' z > .n && touch -d \"$mt\" .n && mv pers.txt pers.orig && mv .n pers.txt",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    for mode in ["text", "vector", "hybrid"] {
        let seen = search_as(&m, &bob, "alice ibexword private", mode);
        assert!(
            seen.iter().all(|h| !h.contains("ibexword")),
            "{mode}, at once: {seen:?}"
        );
    }
    // After the indexer has seen the swap (and a rebuild) too.
    std::thread::sleep(Duration::from_secs(2));
    for mode in ["text", "vector", "hybrid"] {
        let seen = search_as(&m, &bob, "alice ibexword private", mode);
        assert!(
            seen.iter().all(|h| !h.contains("ibexword")),
            "{mode}, later: {seen:?}"
        );
    }
    // Alice, who can still read her (renamed) file, finds it under its new name.
    indexed(&m, "ibexword");
    let r = tool_call(
        &m,
        "semantic_search",
        &json!({"query": "ibexword", "mode": "text"}),
    );
    assert_eq!(r["hits"][0]["path"], "pers.orig", "{r}");
}

/// Three hundred private files that match do not push Bob's one readable match out of a
/// small limit, in any mode.
#[test]
fn private_matches_do_not_crowd_out_readable_ones() {
    let m = Mounted::new();
    let bob = TempUser::new("sc");
    std::fs::set_permissions(
        m.path("workspaces"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(m.ws(), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let ws = m.ws();
    std::fs::create_dir(ws.join("private")).unwrap();
    for i in 0..300 {
        std::fs::write(
            ws.join(format!("private/h{i}.md")),
            "mooseword mooseword hidden\n",
        )
        .unwrap();
    }
    std::fs::set_permissions(
        ws.join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let out = bob.sh(&format!(
        "printf 'mooseword once\\n' > {}/bob.md",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = tool_call(
            &m,
            "semantic_search",
            &json!({"query": "mooseword", "mode": "text", "limit": 400}),
        );
        if r["hits"].as_array().unwrap().len() == 301 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for mode in ["text", "vector", "hybrid"] {
        let out = bob.sh(&tool_call_script(
            &m,
            "semantic_search",
            &json!({"query": "mooseword", "mode": mode, "limit": 1}),
        ));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let hits = r["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 1, "{mode}: {r}");
        assert_eq!(hits[0]["path"], "bob.md", "{mode}: {r}");
    }
}

/// `user`'s copy of `workspace.db`, as bytes.
fn view_as(m: &Mounted, user: &TempUser) -> Vec<u8> {
    let out = user.sh(&format!("cat '{}/workspace.db'", m.ws().display()));
    assert!(out.status.success(), "{out:?}");
    out.stdout
}

fn holds(bytes: &[u8], word: &str) -> bool {
    bytes.windows(word.len()).any(|w| w == word.as_bytes())
}

/// A shared workspace without the sticky bit, two users in it.
fn shared(tags: [&str; 2]) -> (Mounted, TempUser, TempUser) {
    let m = Mounted::new();
    let (alice, bob) = (TempUser::new(tags[0]), TempUser::new(tags[1]));
    std::fs::set_permissions(
        m.path("workspaces"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(m.ws(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    (m, alice, bob)
}

#[test]
fn workspace_db_shows_nothing_of_a_private_file_swapped_out_or_deleted_under_its_name() {
    let (m, alice, bob) = shared(["va", "vb"]);
    let ws = m.ws();
    let out = alice.sh(&format!(
        "umask 077; printf 'kumquat launchcode 8812\\n' > {w}/swap.md; mkdir -m 1777 {w}/sticky; printf 'guava deletedsecret 3141\\n' > {w}/sticky/gone.md",
        w = ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    indexed(&m, "launchcode");
    indexed(&m, "deletedsecret");
    // Bob renames alice's file away and puts his own at its name; alice deletes hers in the
    // sticky folder and bob makes a file of that name at once. Bob opens his copy right away.
    let out = alice.sh(&format!("rm {}/sticky/gone.md", ws.display()));
    assert!(out.status.success(), "{out:?}");
    let out = bob.sh(&format!(
        "cd {} && mv swap.md .aside && echo bob > swap.md && echo hi > sticky/gone.md",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    for when in ["at once", "later"] {
        let view = view_as(&m, &bob);
        for word in ["launchcode", "deletedsecret"] {
            assert!(
                !holds(&view, word),
                "{when}: {word} is in bob's workspace.db"
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
fn workspace_db_ids_do_not_count_hidden_rows_and_copies_are_capped() {
    let (m, alice, bob) = shared(["vc", "vd"]);
    let ws = m.ws();
    let out = alice.sh(&format!(
        "umask 077; for i in 1 2 3 4 5; do printf '# Part %s\\n\\nhidden quokka words\\n\\n' $i; done > {}/a.md",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    indexed(&m, "quokka");
    let out = bob.sh(&format!("echo 'zebra visible' > {}/z.md", ws.display()));
    assert!(out.status.success(), "{out:?}");
    indexed(&m, "zebra");
    let out = bob.sh(&format!(
        "sqlite3 -readonly {}/workspace.db \"SELECT min(id), max(id), count(*) FROM chunks; SELECT count(*) FROM metadata WHERE key = 'generation'\"",
        ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1|1|1\n0\n",
        "bob's copy is numbered afresh"
    );
    // Four copies open at once; the fifth is refused (each is a file on disk).
    let out = bob.sh(&format!(
        "cd {} && exec 3<workspace.db 4<workspace.db 5<workspace.db 6<workspace.db && cat workspace.db > /dev/null",
        ws.display()
    ));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Too many open files"),
        "{out:?}"
    );
    // Closed, they are gone: the next open works.
    assert!(!view_as(&m, &bob).is_empty());
}

/// Alice keeps a readable file in a folder others may enter but not list (0711): its name is
/// hers to give out. Bob's search and workspace.db name neither it nor its text, while Alice's
/// do; the tools that list folders hide it too.
#[test]
fn a_file_in_an_unlistable_folder_is_not_named_by_search() {
    let (m, alice, bob) = shared(["ua", "ub"]);
    let ws = m.ws();
    let out = alice.sh(&format!(
        "mkdir -m 0711 {w}/hidden && printf 'tamarind unlistedplan 2718\\n' > {w}/hidden/Secret-Plan.md && chmod 0644 {w}/hidden/Secret-Plan.md",
        w = ws.display()
    ));
    assert!(out.status.success(), "{out:?}");
    indexed(&m, "unlistedplan");
    let alices = search_as(&m, &alice, "unlistedplan", "text");
    assert!(
        alices.iter().any(|h| h.contains("Secret-Plan")),
        "{alices:?}"
    );
    for mode in ["text", "hybrid"] {
        let bobs = search_as(&m, &bob, "unlistedplan tamarind", mode);
        assert!(
            bobs.iter()
                .all(|h| !h.contains("Secret-Plan") && !h.contains("unlistedplan")),
            "{mode}: {bobs:?}"
        );
    }
    let view = view_as(&m, &bob);
    assert!(!holds(&view, "Secret-Plan") && !holds(&view, "unlistedplan"));
    assert!(holds(&view_as(&m, &alice), "unlistedplan"));
    // Bob can still open it by its name, as POSIX allows: only its discovery is withheld.
    let out = bob.sh(&format!("cat {}/hidden/Secret-Plan.md", ws.display()));
    assert!(out.status.success(), "{out:?}");
}
