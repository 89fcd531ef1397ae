//! The OpenAI-compatible embedding client against a real local HTTP server: batching, the API
//! key from the vault, retries, timeouts, wrong answers, and search falling back to text while the
//! endpoint is down, then catching up when it is back.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawfs_search::embed::remote::KeySource;
use clawfs_search::embed::{EmbedError, Embedder, RemoteClient, RemoteConfig};
use clawfs_search::hnsw::HnswParams;
use clawfs_search::workspace::IndexFiles;
use clawfs_search::{Mode, Query, WorkspaceIndex};
use serde_json::json;
use zeroize::Zeroizing;

use crate::common::embed_server::{EmbedServer, Reply, DIM};
use crate::common::{tool_call, vault, Mounted};

fn config(url: &str) -> RemoteConfig {
    RemoteConfig {
        base_url: url.to_string(),
        model: "test-embed".into(),
        api_key_secret: Some("embed-key".into()),
        dimensions: None,
        batch: 2,
        timeout_secs: 5.0,
        retries: 2,
    }
}

/// A key source that hands out `key` and counts how often it was asked.
fn keys(key: &'static str) -> (KeySource, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let counter = n.clone();
    let source: KeySource = Arc::new(move |name: &str| {
        assert_eq!(name, "embed-key");
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(Zeroizing::new(key.to_string()))
    });
    (source, n)
}

#[test]
fn texts_go_in_batches_with_the_key_and_come_back_in_order() {
    let server = EmbedServer::start();
    let (source, asked) = keys("sk-test-1");
    let client = RemoteClient::new(config(&server.url), source).unwrap();
    let e = client.embedder(128);
    assert_eq!(
        e.fingerprint(),
        format!("openai-compatible:{}:test-embed:128", server.url)
    );
    let texts = ["one cat", "two dogs", "three birds", "four fish", "five"];
    let v = e.embed(&texts).unwrap();
    assert_eq!(v.len(), 5);
    // Padded to the workspace's dimension, unit length, and the server's vector for each text.
    for (t, v) in texts.iter().zip(&v) {
        assert_eq!(v.len(), 128);
        let want = crate::common::embed_server::vector(t);
        let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
        for i in 0..DIM {
            assert!((v[i] - want[i] / norm).abs() < 1e-5, "{t}");
        }
        assert!(v[DIM..].iter().all(|x| *x == 0.0));
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "batches of 2: {seen:?}");
    assert!(seen
        .iter()
        .all(|s| s.auth.as_deref() == Some("Bearer sk-test-1") && s.model == "test-embed"));
    assert_eq!(seen[2].inputs, ["five"]);
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the key is read once");
}

#[test]
fn busy_and_failing_endpoints_are_retried_then_left_alone() {
    let server = EmbedServer::start();
    let client = RemoteClient::new(config(&server.url), keys("k").0).unwrap();
    let e = client.embedder(128);
    // 503 and 429 are retried; the third attempt answers.
    server.script([Reply::Status(503), Reply::Status(429)]);
    assert_eq!(e.embed(&["hello"]).unwrap().len(), 1);
    assert_eq!(server.seen().len(), 3);
    // Every attempt fails: unavailable, and the endpoint is left alone for a while (no request).
    server.script([Reply::Status(500), Reply::Status(502), Reply::Status(503)]);
    let err = e.embed(&["hello"]).unwrap_err();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    assert!(err.to_string().contains("HTTP 503"), "{err}");
    let before = server.seen().len();
    let err = e.embed(&["hello"]).unwrap_err();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    assert_eq!(server.seen().len(), before, "no request while it is down");
}

#[test]
fn a_slow_endpoint_times_out_and_an_absent_one_is_unavailable() {
    let server = EmbedServer::start();
    let mut c = config(&server.url);
    c.timeout_secs = 0.3;
    c.retries = 0;
    let e = RemoteClient::new(c, keys("k").0).unwrap().embedder(128);
    server.script([Reply::Delay(Duration::from_secs(3))]);
    let t = Instant::now();
    let err = e.embed(&["slow"]).unwrap_err();
    assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Nothing listens on the port of a server that is gone.
    let url = {
        let gone = EmbedServer::start();
        gone.url.clone()
    };
    let mut c = config(&url);
    c.retries = 1;
    let err = RemoteClient::new(c, keys("k").0)
        .unwrap()
        .embedder(128)
        .embed(&["x"])
        .unwrap_err();
    assert!(
        matches!(err, EmbedError::Unavailable(ref m) if m.contains("unreachable")),
        "{err}"
    );
}

#[test]
fn wrong_answers_and_refused_keys_are_errors_that_say_so() {
    let server = EmbedServer::start();
    let (source, asked) = keys("sk-old");
    let e = RemoteClient::new(config(&server.url), source)
        .unwrap()
        .embedder(128);
    server.script([Reply::Garbage]);
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(err, EmbedError::Failed(ref m) if m.contains("not an embeddings list")),
        "{err}"
    );
    server.script([Reply::Status(400)]);
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(err, EmbedError::Failed(ref m) if m.contains("HTTP 400")),
        "{err}"
    );
    // A refused key is read again once (it may have been rotated), then given up on.
    server.script([Reply::Status(401), Reply::Status(401)]);
    let err = e.embed(&["x"]).unwrap_err();
    assert!(
        matches!(err, EmbedError::Unavailable(ref m) if m.contains("refused the API key")),
        "{err}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // An unreadable key (a locked vault) makes the endpoint unavailable, naming the secret.
    let locked: KeySource = Arc::new(|_: &str| Err("the vault is locked".to_string()));
    let err = RemoteClient::new(config(&server.url), locked)
        .unwrap()
        .embedder(128)
        .embed(&["x"])
        .unwrap_err();
    // Named, with the likely cause; the vault's own error (paths) goes to the log only.
    assert!(err.to_string().contains("\"embed-key\""), "{err}");
    assert!(err.to_string().contains("is the vault unlocked"), "{err}");
}

/// An error body that repeats the request's key never reaches a message, so neither a log
/// nor an agent's answer.
#[test]
fn error_bodies_that_echo_the_key_are_never_repeated() {
    for (code, replies) in [(400, 1), (401, 2), (500, 3)] {
        let server = EmbedServer::start();
        let e = RemoteClient::new(config(&server.url), keys("sk-echoed").0)
            .unwrap()
            .embedder(128);
        server.script(std::iter::repeat_n(Reply::Echo(code), replies));
        let err = e.embed(&["x"]).unwrap_err().to_string();
        assert!(!err.contains("sk-echoed"), "{err}");
        assert!(
            err.contains(&format!("HTTP {code}")) || err.contains("refused the API key"),
            "{err}"
        );
        assert_eq!(server.seen().len(), replies);
    }
}

#[test]
fn search_falls_back_to_text_while_the_endpoint_is_down_and_catches_up() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(
        ws.join("cats.md"),
        "# Cats\n\nThe kitten naps on the sofa.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("money.md"),
        "# Money\n\nRevenue grew this quarter.\n",
    )
    .unwrap();
    let dir = std::fs::File::open(&ws).unwrap();
    let server = EmbedServer::start();
    let open = || {
        let mut c = config(&server.url);
        c.retries = 0;
        let e: Arc<dyn Embedder> =
            Arc::new(RemoteClient::new(c, keys("k").0).unwrap().embedder(128));
        WorkspaceIndex::open(
            "ws",
            &IndexFiles::private(&tmp.path().join("ix")).unwrap(),
            128,
            HnswParams::default(),
            Some(e),
        )
        .unwrap()
        .0
    };
    let everything = |_: &str| true;
    let q = |mode| Query {
        text: "kitten sofa",
        mode,
        limit: 5,
        readable: &everything,
        workspace: dir.as_fd(),
    };

    // Down while indexing: the files are found by text, and wait for their vectors.
    server.script([Reply::Status(503)]);
    let ix = open();
    let r = ix.rescan(dir.as_fd(), &mut |_, _| {}).unwrap();
    assert_eq!((r.updated, r.failed), (2, 0));
    assert_eq!(ix.unembedded().unwrap(), 2);
    let a = ix.search(&q(Mode::Hybrid)).unwrap();
    assert_eq!(a.mode, Mode::Text);
    assert!(
        a.note.as_deref().unwrap().contains("text search results"),
        "{a:?}"
    );
    assert_eq!(a.hits[0].path, "cats.md");
    drop(ix);

    // Back (a new daemon, or after the pause): a rescan embeds what waited; vector search works.
    let ix = open();
    assert!(ix.embedder_answers());
    let r = ix.rescan(dir.as_fd(), &mut |_, _| {}).unwrap();
    assert_eq!(r.updated, 2, "{r:?}");
    assert_eq!(ix.unembedded().unwrap(), 0);
    let a = ix.search(&q(Mode::Vector)).unwrap();
    assert_eq!((a.mode, a.note.is_none()), (Mode::Vector, true));
    assert_eq!(a.hits[0].path, "cats.md");
    assert!(a.hits[0].vector_score.unwrap() > 0.3, "{a:?}");
}

/// Through a mount: `system/search.toml` names the endpoint and a vault secret; the daemon
/// reads the key from the unlocked vault and the workspace is embedded by the endpoint; the key
/// reaches no log; a wrong file stops the mount.
#[test]
fn the_daemon_embeds_with_the_vault_key_named_by_search_toml() {
    let server = EmbedServer::start();
    let m = Mounted::new();
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    ok(vault(&m, &["init", "--sealer", "passphrase"], None));
    ok(vault(
        &m,
        &["put", "embed-key"],
        Some("sk-from-the-vault\n"),
    ));
    assert!(m.umount().status.success());
    system_update(
        &m,
        &format!(
            "[embedder]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nmodel = \"test-embed\"\napi_key_secret = \"embed-key\"\nretries = 0\n",
            server.url
        ),
    );
    m.mount(&[]);
    // Agents cannot point the daemon elsewhere: system/ is read-only through the mount.
    assert!(std::fs::write(m.path("system/search.toml"), "").is_err());
    std::fs::write(
        m.ws().join("cats.md"),
        "# Cats\n\nThe kitten naps on the sofa.\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let hits = loop {
        let r = tool_call(
            &m,
            "semantic_search",
            &json!({"query": "kitten sofa", "mode": "vector"}),
        );
        assert_eq!(r["ok"], true, "{r}");
        if !r["hits"].as_array().unwrap().is_empty() || Instant::now() > deadline {
            assert_eq!(r["mode"], "vector", "{r}");
            break r["hits"].as_array().unwrap().clone();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(hits[0]["path"], "cats.md", "{hits:?}");
    let seen = server.seen();
    assert!(seen
        .iter()
        .any(|s| s.inputs.iter().any(|i| i.contains("kitten naps"))));
    assert!(seen
        .iter()
        .all(|s| s.auth.as_deref() == Some("Bearer sk-from-the-vault")));
    assert!(!m.log().contains("sk-from-the-vault"));

    // A wrong search.toml stops the mount before it happens, and says which file and why.
    assert!(m.umount().status.success());
    system_update(
        &m,
        "[embedder]\nkind = \"openai-compatible\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n",
    );
    let out = crate::common::clawfs([
        std::ffi::OsStr::new("mount"),
        m.mnt.as_os_str(),
        std::ffi::OsStr::new("--store"),
        m.store.as_os_str(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("system/search.toml") && err.contains("base_url"),
        "{err}"
    );
    assert!(!m.is_mounted());
}

/// Installs `text` as the store's `system/search.toml` the way an admin does (recorded in the
/// system manifest, which the next mount checks).
fn system_update(m: &Mounted, text: &str) {
    let file = m.dir.path().join("search.toml");
    std::fs::write(&file, text).unwrap();
    let mut arg = std::ffi::OsString::from("search.toml=");
    arg.push(&file);
    let out = crate::common::clawfs([
        std::ffi::OsStr::new("system"),
        std::ffi::OsStr::new("update"),
        &arg,
        std::ffi::OsStr::new("--store"),
        m.store.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
