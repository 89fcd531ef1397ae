//! A PostgreSQL + pgvector memory whose rows an attacker wrote, imported by an admin with
//! `migrate-pg-to-sqlite`: every row that could poison search, exhaust memory, crash the tool,
//! split the import or fool the person reading its output is refused, before anything is
//! written, with the document named harmlessly.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::postgres::Postgres;
use crate::common::{migrate_pg, text};

/// Imports `pg` into the database `db`, quietly, with `extra` options.
fn import(pg: &Postgres, db: &Path, extra: &[&str]) -> Output {
    let url = pg.url();
    let mut args = vec![
        "--pg-url",
        &url,
        "--sqlite-path",
        db.to_str().unwrap(),
        "--embedding-model",
        "m",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    migrate_pg(&args)
}

/// A source with P1.4 §6's tables (ids of type `id_type`, embeddings `real[]`) and three
/// documents with 4-component embeddings.
fn source(id_type: &str) -> Postgres {
    let pg = Postgres::start();
    pg.sql(&format!(
        "CREATE TABLE documents (id {id_type}, workspace_id text NOT NULL, content text,
             metadata jsonb);
         CREATE TABLE vectors (document_id {id_type}, embedding real[],
             created_at timestamptz DEFAULT now());
         INSERT INTO documents VALUES (1, 'default', 'one', NULL), (2, 'default', 'two', NULL),
             (3, 'default', 'three', NULL);
         INSERT INTO vectors (document_id, embedding) VALUES
             (1, '{{1,0,0,0}}'), (2, '{{0,1,0,0}}'), (3, '{{0,0,1,0}}');"
    ));
    pg
}

/// Runs the import of `pg` into a fresh database and checks it was refused (exit 1, not a
/// panic) with `why`, wrote nothing, and printed no control character.
fn refused(pg: &Postgres, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("out.db");
    let out = import(pg, &db, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(why), "expected {why:?}: {said}");
    assert!(!said.contains("panicked"), "{said}");
    assert!(
        !said.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal: {said:?}"
    );
    assert!(!db.exists(), "the refused import wrote {}", db.display());
}

#[test]
fn a_nan_or_infinite_embedding_is_refused_before_anything_is_written() {
    // A NaN's distance to every query is NaN, which ranked the attacker's document first for
    // every vector search of the workspace.
    let pg = source("bigint");
    for poison in ["NaN", "Infinity", "-Infinity"] {
        pg.sql(&format!(
            "UPDATE vectors SET embedding = '{{1,0,0,0}}';
             UPDATE vectors SET embedding[2] = '{poison}' WHERE document_id = 2"
        ));
        refused(
            &pg,
            "the embedding of document \"2\" is not a vector of finite numbers",
        );
    }
}

#[test]
fn an_embedding_of_two_dimensions_is_refused_not_a_panic() {
    // 2 × 2 = 4 components, the dimension of every other embedding.
    let pg = source("bigint");
    pg.sql("UPDATE vectors SET embedding = '{{1,0},{0,1}}' WHERE document_id = 3");
    refused(
        &pg,
        "the embedding of document \"3\" is not a vector of finite numbers",
    );
}

#[test]
fn a_null_or_doubled_id_is_refused_before_anything_is_written() {
    let pg = source("numeric");
    pg.sql("INSERT INTO documents VALUES (NULL, 'default', 'no id', NULL)");
    refused(&pg, "documents without an id (NULL): 1");
    // Equal as numbers, different as text: one file, or one graph key, for two documents.
    pg.sql(
        "DELETE FROM documents WHERE id IS NULL;
         INSERT INTO documents VALUES (2.00, 'default', 'two again', NULL)",
    );
    refused(&pg, "is held by more than one document");
}

#[test]
fn a_document_larger_than_clawfs_indexes_is_refused_before_anything_is_written() {
    // Rows of any size made the import hold a batch of them (gigabytes for a few rows).
    let pg = source("bigint");
    pg.sql("UPDATE documents SET content = repeat('abcdefgh ', 500000) WHERE id = 2");
    refused(
        &pg,
        "documents with more than 4194304 bytes of text (the most ClawFS indexes of a file): 1",
    );
}

#[test]
fn an_id_made_of_terminal_escapes_is_printed_escaped() {
    // An id that erases the line and prints "result OK", with metadata that fails the batch
    // so that the error names it.
    let pg = source("text");
    pg.sql(
        "UPDATE documents SET id = E'x\\x1b[2K\\x1b[1A\\rresult     OK\\n' WHERE id = '2';
         UPDATE vectors SET document_id = E'x\\x1b[2K\\x1b[1A\\rresult     OK\\n'
             WHERE document_id = '2';
         ALTER TABLE documents ALTER COLUMN metadata TYPE text;
         UPDATE documents SET metadata = '{not json' WHERE id LIKE 'x%'",
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("out.db");
    let out = import(&pg, &db, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(r#"document "x\u{1b}[2K"#), "{said}");
    assert!(!said.contains('\u{1b}') && !said.contains('\r'), "{said:?}");
}

#[test]
fn a_resumed_import_cannot_go_to_another_folder() {
    // An import cut short, then resumed with another --into, split the documents between two
    // folders and still reported OK.
    let pg = source("bigint");
    pg.sql(
        "INSERT INTO documents SELECT i, 'default', 'note ' || i, NULL FROM generate_series(4, 30) i;
         INSERT INTO vectors (document_id, embedding)
             SELECT i, '{1,1,0,0}' FROM generate_series(4, 30) i;
         UPDATE vectors SET embedding[2] = NULL WHERE document_id = 20",
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("out.db");
    let run = |into: &str| import(&pg, &db, &["--batch-size", "10", "--into", into]);
    let cut = run("first");
    assert_eq!(cut.status.code(), Some(1), "{}", text(&cut));
    pg.sql("UPDATE vectors SET embedding[2] = 1 WHERE document_id = 20");
    let elsewhere = run("second");
    assert_eq!(elsewhere.status.code(), Some(1), "{}", text(&elsewhere));
    assert!(
        text(&elsewhere).contains("run it again with --into \"first\""),
        "{}",
        text(&elsewhere)
    );
    let count = |sql: &str| {
        let out = Command::new("sqlite3").arg(&db).arg(sql).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        count("SELECT count(*) FROM chunks WHERE path LIKE 'second/%'"),
        "0"
    );
    let resumed = run("first");
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(
        count("SELECT count(*) FROM chunks WHERE path LIKE 'first/%'"),
        "30"
    );
    assert!(Path::new(&db).exists());
}
