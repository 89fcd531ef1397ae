//! `migrate-pg-to-sqlite` and `clawfs import pg` against a real PostgreSQL with the real
//! pgvector extension: the copy and its verification, a failed batch rolled back and the run
//! resumed, a corrupted row caught, each refusal (with nothing written), and imported documents
//! found by meaning through the mount.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::postgres::Postgres;
use crate::common::{clawfs, migrate_pg, ok, text, Mounted};
use clawfs_search::EmbedderChoice;

/// P1.4 §6's tables, embeddings of type `embedding_type`.
fn tables(pg: &Postgres, embedding_type: &str) {
    pg.sql(&format!(
        "CREATE TABLE documents (id bigint PRIMARY KEY, workspace_id text NOT NULL,
             content text, metadata jsonb);
         CREATE TABLE vectors (id serial PRIMARY KEY, document_id bigint REFERENCES documents(id),
             embedding {embedding_type}, created_at timestamptz DEFAULT now());"
    ));
}

fn sqlite(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(out.status.success(), "sqlite3: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_migration_resumes_after_a_failed_batch_and_catches_a_corrupted_row() {
    let pg = Postgres::start();
    tables(&pg, "real[]");
    // 2,500 documents of workspace "default" (every tenth without an embedding) and some of
    // another workspace, which stay behind.
    pg.sql(
        "INSERT INTO documents SELECT i, CASE WHEN i > 2500 THEN 'other' ELSE 'default' END,
             'note ' || i || E'\\nabout topic ' || (i % 7), jsonb_build_object('n', i)
         FROM generate_series(1, 2600) i;
         INSERT INTO vectors (document_id, embedding)
         SELECT i, array(SELECT ((i * 31 + j) % 97)::real FROM generate_series(1, 16) j)
         FROM generate_series(1, 2600) i WHERE i % 10 != 0;
         -- Document 1234's embedding holds a NULL: its batch fails.
         UPDATE vectors SET embedding[3] = NULL WHERE document_id = 1234;",
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let url = pg.url();
    let args = [
        "--pg-url",
        &url,
        "--sqlite-path",
        db.to_str().unwrap(),
        "--embedding-model",
        "test-model-16",
        "--batch-size",
        "100",
        "--quiet",
    ];
    let failed = migrate_pg(&args);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(text(&failed).contains(r#"document "1234": its embedding: holds a NULL"#));
    // The batches before the failing one are in, none of it and none after.
    assert_eq!(sqlite(&db, "SELECT count(*) FROM chunks"), "1200");
    assert_eq!(
        sqlite(
            &db,
            "SELECT count(*) FROM chunks WHERE path = 'imported/1201.md'"
        ),
        "0"
    );

    pg.sql("UPDATE vectors SET embedding[3] = 3 WHERE document_id = 1234");
    let resumed = migrate_pg(&args);
    let report = text(&resumed);
    assert!(resumed.status.success(), "{report}");
    assert!(report.contains("after 1200 documents"), "{report}");
    assert!(report.contains("documents  2500 -> 2500  ok"), "{report}");
    assert!(report.contains("vectors    2250 -> 2250  ok"), "{report}");
    assert!(report.contains("dimension  16 -> 16  ok"), "{report}");
    assert!(report.contains("result     OK"), "{report}");
    assert_eq!(sqlite(&db, "SELECT count(*) FROM chunks"), "2500");
    // The source's metadata is kept, and the graph is beside the database.
    assert_eq!(
        sqlite(
            &db,
            "SELECT json_extract(metadata, '$.source_metadata.n') FROM documents
             WHERE json_extract(metadata, '$.source_id') = '77'"
        ),
        "77"
    );
    assert!(dir.path().join("memory.db.usearch").exists());

    // A row changed in the copy afterwards is caught and named.
    sqlite(
        &db,
        "UPDATE documents SET content = 'forged' WHERE json_extract(metadata, '$.source_id') = '42'",
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let caught = migrate_pg(&json_args);
    assert_eq!(caught.status.code(), Some(5), "{}", text(&caught));
    let v: serde_json::Value = serde_json::from_slice(&caught.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_ne!(v["report"]["checksum"][0], v["report"]["checksum"][1]);
    assert_eq!(
        v["report"]["mismatches"],
        serde_json::json!([r#"document "42": content or embedding differs"#])
    );
}

#[test]
fn a_migration_refuses_clearly_and_writes_nothing() {
    let pg = Postgres::start();
    tables(&pg, "real[]");
    pg.sql(
        "INSERT INTO documents SELECT i, 'default', 'note ' || i, NULL FROM generate_series(1, 5) i;
         INSERT INTO vectors (document_id, embedding) VALUES
             (1, '{1,2,3}'), (2, '{1,2,3}'), (3, '{1,2,3,4}');",
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("out.db");
    let db = db.to_str().unwrap();
    let url = pg.url();
    let refused = |extra: &[&str], why: &str| {
        let mut args = vec![
            "--pg-url",
            &url,
            "--sqlite-path",
            db,
            "--embedding-model",
            "m",
        ];
        args.extend_from_slice(extra);
        let out = migrate_pg(&args);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {}", text(&out));
        assert!(text(&out).contains(why), "{extra:?}: {}", text(&out));
        assert!(!Path::new(db).exists(), "{extra:?} wrote {db}");
    };
    refused(&[], "mixed dimensions");
    refused(&["--vectors-table", "nope"], "table nope does not exist");
    refused(&["--content-column", "body"], "has no column body");
    refused(
        &["--embedding-column", "created_at"],
        "is timestamp with time zone; expected vector or real[]",
    );
    pg.sql("UPDATE vectors SET embedding = '{1,2,3}'; INSERT INTO vectors (document_id, embedding) VALUES (1, '{4,5,6}')");
    refused(&[], r#"document "1" has 2 embeddings"#);

    // Nothing listens on a port just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = migrate_pg(&[
        "--pg-url",
        &format!("postgresql://postgres:hunter2@127.0.0.1:{port}/postgres"),
        "--sqlite-path",
        db,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot reach PostgreSQL"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("hunter2"), "the password was printed");
}

/// `clawfs import pg` from `url` into the default workspace of `m`'s store.
fn import_pg(m: &Mounted, url: &str, extra: &[&str]) -> Output {
    let store = m.store.to_str().unwrap();
    let mut args = vec![
        "import",
        "pg",
        "--store",
        store,
        "--url",
        url,
        "--workspace",
        "default",
    ];
    args.extend_from_slice(extra);
    clawfs(&args)
}

/// Unit vectors by the built-in model, as a pgvector literal of the workspace's 1536
/// dimensions.
fn builtin_vectors(texts: &[&str]) -> Vec<String> {
    let embedder = EmbedderChoice::builtin_or_text_only()
        .for_dimension(1536)
        .expect("the built-in model (scripts/fetch-model.sh)");
    embedder
        .embed(texts)
        .unwrap()
        .iter()
        .map(|v| {
            let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            format!("[{}]", parts.join(","))
        })
        .collect()
}

const NOTES: [&str; 4] = [
    "Sleep hygiene: keep a regular bedtime, a dark cool bedroom, and no screens late at night.",
    "Quarterly tax filing checklist: invoices, receipts and the VAT return.",
    "Sourdough starter: feed it flour and water daily and keep it warm.",
    "Rotating the TLS certificates of the load balancer before they expire.",
];

#[test]
fn clawfs_import_pg_brings_documents_into_a_workspace_found_by_meaning() {
    let pg = Postgres::start();
    tables(&pg, "vector(1536)");
    let vectors = builtin_vectors(&NOTES);
    for (i, (note, v)) in NOTES.iter().zip(&vectors).enumerate() {
        pg.sql(&format!(
            "INSERT INTO documents VALUES ({id}, 'default', '{note}', '{{\"source\": \"pg\"}}');
             INSERT INTO vectors (document_id, embedding) VALUES ({id}, '{v}');",
            id = i + 1
        ));
    }
    let m = Mounted::new();
    let url = pg.url();
    let import = |extra: &[&str]| import_pg(&m, &url, extra);
    // The store is served: the daemon owns the index.
    let served = import(&["--embedding-model", "model2vec:potion-base-8M"]);
    assert_eq!(served.status.code(), Some(1));
    assert!(text(&served).contains("unmount it"), "{}", text(&served));
    assert!(m.umount().status.success());

    // Embeddings of another model are refused, and nothing is written.
    let other = import(&["--embedding-model", "text-embedding-3-small"]);
    assert_eq!(other.status.code(), Some(1), "{}", text(&other));
    assert!(
        text(&other).contains("made by text-embedding-3-small"),
        "{}",
        text(&other)
    );
    assert!(!m.backing("workspaces/default/imported").exists());

    let done = import(&["--embedding-model", "model2vec:potion-base-8M", "--quiet"]);
    let report = ok(done);
    assert!(report.contains("documents  4 -> 4  ok"), "{report}");
    assert!(report.contains("result     OK"), "{report}");
    // A second import of the same source only verifies.
    let again = ok(import(&["--embedding-model", "model2vec:potion-base-8M"]));
    assert!(again.contains("nothing to copy"), "{again}");

    m.mount(&[]);
    assert_eq!(
        std::fs::read_to_string(m.ws().join("imported/1.md")).unwrap(),
        NOTES[0]
    );
    let hits = ok(clawfs([
        "search",
        "default",
        "I can't fall asleep",
        "--mode",
        "vector",
        "--json",
        "--mount",
        m.mnt.to_str().unwrap(),
    ]));
    let first: serde_json::Value =
        serde_json::from_str(hits.lines().next().expect("a hit")).unwrap();
    assert_eq!(first["path"], "imported/1.md", "{hits}");
}

#[test]
fn clawfs_import_pg_reembeds_when_asked_and_refuses_a_foreign_dimension() {
    let pg = Postgres::start();
    tables(&pg, "vector(16)");
    pg.sql(
        "INSERT INTO documents VALUES (1, 'default', 'How to brew green tea', NULL);
         INSERT INTO vectors (document_id, embedding)
             VALUES (1, array_fill(0.25::real, ARRAY[16])::vector);",
    );
    let m = Mounted::new();
    assert!(m.umount().status.success());
    let url = pg.url();
    let refused = import_pg(&m, &url, &["--embedding-model", "model2vec:potion-base-8M"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("have 16 dimensions; the target's have 1536"),
        "{}",
        text(&refused)
    );
    assert!(!m.backing("workspaces/default/imported").exists());

    let out = ok(import_pg(
        &m,
        &url,
        &["--reembed", "--into", "memory/tea", "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{out}");
    assert_eq!(v["report"]["reembedded"], true);
    assert_eq!(v["report"]["dimension"], serde_json::json!([16, 1536]));
    assert!(m.backing("workspaces/default/memory/tea/1.md").exists());
}
