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
    let m = Mounted::new();
    let (alice, bob) = (TempUser::new("sa"), TempUser::new("sb"));
    // A shared workspace without the sticky bit: anyone may rename anyone's file in it.
    std::fs::set_permissions(
        m.path("workspaces"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(m.ws(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
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
