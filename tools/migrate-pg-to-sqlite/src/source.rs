//! The PostgreSQL side: the `documents` and `vectors` tables (P1.4 §6), their names and columns
//! as configured, read in id order one batch at a time.
//!
//! Embeddings are read as `real[]` whatever their column type (pgvector's `vector` casts to it),
//! so both kinds arrive through one binary decoder. Names given on the command line are quoted as
//! identifiers, never spliced in as SQL.

use std::time::Duration;

use clawfs_core::search::import::{row_digest, Document};
use postgres::{Client, NoTls};

use crate::options::SourceArgs;
use crate::MigrateError;

/// How long connecting may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The source, connected and checked.
pub struct Source {
    client: Client,
    sql: Queries,
    /// What the tables hold.
    pub shape: Shape,
    /// The URL without its password, for reports.
    pub description: String,
}

/// What the checks found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    /// Documents of the workspace.
    pub documents: u64,
    /// Their embeddings.
    pub vectors: u64,
    /// The embeddings' dimension (None without any).
    pub dimension: Option<usize>,
    /// The embedding column's type, as PostgreSQL names it.
    pub embedding_type: String,
    /// Embeddings that name no document (not migrated).
    pub orphan_vectors: u64,
}

/// The statements, with every name quoted.
struct Queries {
    batch: String,
    count_documents: String,
    count_vectors: String,
}

/// `name` (or `schema.name`) quoted as an SQL identifier.
fn ident(name: &str) -> String {
    name.split('.')
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// The URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    match url.parse::<postgres::Config>() {
        Ok(c) => {
            let hosts: Vec<String> = c
                .get_hosts()
                .iter()
                .map(|h| match h {
                    postgres::config::Host::Tcp(h) => h.clone(),
                    postgres::config::Host::Unix(p) => p.display().to_string(),
                })
                .collect();
            let port = c.get_ports().first().map_or(5432, |p| *p);
            format!(
                "postgresql://{}@{}:{port}/{}",
                c.get_user().unwrap_or(""),
                hosts.join(","),
                c.get_dbname().unwrap_or("")
            )
        }
        Err(_) => "(an unparsable URL)".into(),
    }
}

impl Source {
    /// Connects and checks the tables: both exist with their columns, the embedding column is
    /// `vector` or `real[]`, no document has two embeddings, and every embedding of the
    /// workspace has one dimension.
    pub fn open(args: &SourceArgs) -> Result<Source, MigrateError> {
        let description = redact(&args.pg_url);
        let mut config: postgres::Config = args
            .pg_url
            .parse()
            .map_err(|e| MigrateError::Refused(format!("--pg-url: {e}")))?;
        // As libpq: a URL without a password takes PGPASSWORD's (the environment is private
        // to the user, a command line is not).
        if config.get_password().is_none() {
            if let Some(password) = std::env::var_os("PGPASSWORD") {
                config.password(password.as_encoded_bytes());
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let mut client = config.connect(NoTls).map_err(|e| {
            let cause = std::error::Error::source(&e).map_or(String::new(), |c| format!(": {c}"));
            MigrateError::Refused(format!(
                "cannot reach PostgreSQL at {description}: {e}{cause}"
            ))
        })?;
        let c = &args.columns;
        for table in [&c.documents_table, &c.vectors_table] {
            let exists: Option<String> = client
                .query_one("SELECT to_regclass($1)::text", &[&ident(table)])
                .map_err(pg("checking the tables"))?
                .get(0);
            if exists.is_none() {
                return Err(MigrateError::Refused(format!(
                    "{description}: table {table} does not exist"
                )));
            }
        }
        let mut type_of = |table: &str, column: &str| {
            column_type(&mut client, table, column)?.ok_or_else(|| {
                MigrateError::Refused(format!(
                    "{description}: table {table} has no column {column}"
                ))
            })
        };
        let id_type = type_of(&c.documents_table, &c.id_column)?;
        for column in [&c.workspace_column, &c.content_column, &c.metadata_column] {
            type_of(&c.documents_table, column)?;
        }
        let embedding_type = type_of(&c.vectors_table, &c.embedding_column)?;
        for column in [&c.document_id_column, &c.created_at_column] {
            type_of(&c.vectors_table, column)?;
        }
        let typed_dimension = embedding_type
            .strip_prefix("vector(")
            .and_then(|s| s.strip_suffix(')'))
            .and_then(|n| n.parse::<usize>().ok());
        if !(embedding_type.starts_with("vector") || embedding_type == "real[]") {
            return Err(MigrateError::Refused(format!(
                "{description}: {}.{} is {embedding_type}; expected vector or real[]",
                c.vectors_table, c.embedding_column
            )));
        }

        let names = Names::of(c);
        let Names {
            d,
            v,
            id,
            ws,
            content,
            meta,
            doc_id,
            emb,
            created,
        } = &names;
        // The resume point comes back as text and is compared in the id's own type, so that
        // numbers order as numbers.
        let sql = Queries {
            batch: format!(
                "SELECT d.{id}::text, d.{ws}::text, d.{content}::text, d.{meta}::text,
                        v.{emb}::real[], v.{created}::text
                 FROM {d} d LEFT JOIN {v} v ON v.{doc_id} = d.{id}
                 WHERE d.{ws}::text = $1 AND ($2::text IS NULL OR d.{id} > $2::text::{id_type})
                 ORDER BY d.{id} LIMIT $3"
            ),
            count_documents: format!("SELECT count(*) FROM {d} d WHERE d.{ws}::text = $1"),
            count_vectors: format!(
                "SELECT count(v.{emb}) FROM {v} v JOIN {d} d ON v.{doc_id} = d.{id}
                 WHERE d.{ws}::text = $1"
            ),
        };
        let workspace = &args.workspace_id;
        check_documents(&mut client, &description, &names, workspace)?;
        let doubled: Vec<(String, i64)> = client
            .query(
                &format!(
                    "SELECT v.{doc_id}::text, count(*) FROM {v} v JOIN {d} d ON v.{doc_id} = d.{id}
                     WHERE d.{ws}::text = $1 GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 3"
                ),
                &[workspace],
            )
            .map_err(pg("checking the embeddings"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        if let Some((doc, n)) = doubled.first() {
            return Err(MigrateError::Refused(format!(
                "{description}: document \"{}\" has {n} embeddings; a ClawFS document keeps one",
                doc.escape_debug()
            )));
        }
        check_embeddings(&mut client, &description, &names, workspace)?;
        let orphan_vectors: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM {v} v WHERE NOT EXISTS
                     (SELECT 1 FROM {d} d WHERE d.{id} = v.{doc_id})"
                ),
                &[],
            )
            .map_err(pg("checking the embeddings"))?
            .get(0);
        let dimension = match typed_dimension {
            Some(n) => Some(n),
            None => {
                let dims: Vec<Option<i32>> = client
                    .query(
                        &format!(
                            "SELECT DISTINCT cardinality(v.{emb}::real[]) FROM {v} v
                             JOIN {d} d ON v.{doc_id} = d.{id}
                             WHERE d.{ws}::text = $1 AND v.{emb} IS NOT NULL LIMIT 3"
                        ),
                        &[workspace],
                    )
                    .map_err(pg("checking the dimensions"))?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                match dims.as_slice() {
                    [] => None,
                    [Some(n)] if *n > 0 => Some(*n as usize),
                    _ => {
                        let seen: Vec<String> = dims
                            .iter()
                            .map(|d| d.map_or("none".into(), |n| n.to_string()))
                            .collect();
                        return Err(MigrateError::Refused(format!(
                            "{description}: the embeddings have mixed dimensions ({}); \
                             a workspace has one",
                            seen.join(", ")
                        )));
                    }
                }
            }
        };
        let mut source = Source {
            client,
            sql,
            shape: Shape {
                documents: 0,
                vectors: 0,
                dimension,
                embedding_type,
                orphan_vectors: orphan_vectors as u64,
            },
            description,
        };
        let (documents, vectors) = source.counts(workspace)?;
        source.shape.documents = documents;
        source.shape.vectors = vectors;
        Ok(source)
    }

    /// How many documents of `workspace`, and how many of them have an embedding.
    pub fn counts(&mut self, workspace: &str) -> Result<(u64, u64), MigrateError> {
        let documents: i64 = self
            .client
            .query_one(&self.sql.count_documents, &[&workspace])
            .map_err(pg("counting documents"))?
            .get(0);
        let vectors: i64 = self
            .client
            .query_one(&self.sql.count_vectors, &[&workspace])
            .map_err(pg("counting embeddings"))?
            .get(0);
        Ok((documents as u64, vectors as u64))
    }

    /// Up to `limit` documents of `workspace` after the id `after`, in id order.
    pub fn batch(
        &mut self,
        workspace: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Document>, MigrateError> {
        let rows = self
            .client
            .query(&self.sql.batch, &[&workspace, &after, &limit])
            .map_err(pg("reading documents"))?;
        rows.iter().map(decode).collect()
    }

    /// The digest of every document of `workspace` (see [`row_digest`]), read afresh.
    pub fn digests(
        &mut self,
        workspace: &str,
        with_embeddings: bool,
        batch: i64,
    ) -> Result<std::collections::BTreeMap<String, [u8; 32]>, MigrateError> {
        let mut out = std::collections::BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let docs = self.batch(workspace, after.as_deref(), batch)?;
            let Some(last) = docs.last() else {
                return Ok(out);
            };
            after = Some(last.source_id.clone());
            for d in &docs {
                let v = d.embedding.as_deref().filter(|_| with_embeddings);
                out.insert(d.source_id.clone(), row_digest(&d.source_id, &d.content, v));
            }
        }
    }
}

/// The source's tables (`d` documents, `v` vectors) and columns, quoted for SQL.
struct Names {
    d: String,
    v: String,
    id: String,
    ws: String,
    content: String,
    meta: String,
    doc_id: String,
    emb: String,
    created: String,
}

impl Names {
    fn of(c: &crate::options::Columns) -> Names {
        Names {
            d: ident(&c.documents_table),
            v: ident(&c.vectors_table),
            id: ident(&c.id_column),
            ws: ident(&c.workspace_column),
            content: ident(&c.content_column),
            meta: ident(&c.metadata_column),
            doc_id: ident(&c.document_id_column),
            emb: ident(&c.embedding_column),
            created: ident(&c.created_at_column),
        }
    }
}

/// One row of the batch query as a document, refused with the document named (escaped: its id
/// is the source's, and may hold anything) when a value is not what a document holds.
fn decode(r: &postgres::Row) -> Result<Document, MigrateError> {
    let id: Option<String> = r
        .try_get(0)
        .map_err(|e| MigrateError::Refused(format!("a document's id: {e}")))?;
    let source_id =
        id.ok_or_else(|| MigrateError::Refused("a document has no id (NULL)".into()))?;
    let shown = source_id.escape_debug().to_string();
    let refuse = |what: &str, e: &dyn std::fmt::Display| {
        MigrateError::Refused(format!("document \"{shown}\": {what}: {e}"))
    };
    let metadata: Option<String> = r.try_get(3).map_err(|e| refuse("its metadata", &e))?;
    let metadata = metadata
        .map(|m| serde_json::from_str(&m))
        .transpose()
        .map_err(|e| refuse("its metadata is not JSON", &e))?;
    // A vector (an array of more than one dimension is refused by the decoding).
    let embedding: Option<Vec<Option<f32>>> =
        r.try_get(4).map_err(|e| refuse("its embedding", &e))?;
    let embedding = embedding
        .map(|v| {
            v.into_iter()
                .map(|x| match x {
                    Some(x) if x.is_finite() => Ok(x),
                    Some(x) => Err(refuse("its embedding", &format!("holds {x}"))),
                    None => Err(refuse("its embedding", &"holds a NULL")),
                })
                .collect::<Result<Vec<f32>, _>>()
        })
        .transpose()?;
    let content: Option<String> = r.try_get(2).map_err(|e| refuse("its content", &e))?;
    let content = content.unwrap_or_default();
    if content.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(refuse(
            "its content",
            &format!(
                "{} bytes, over the {MAX_DOCUMENT_BYTES} a document may have",
                content.len()
            ),
        ));
    }
    Ok(Document {
        workspace_id: r.try_get(1).map_err(|e| refuse("its workspace", &e))?,
        content,
        metadata,
        embedding,
        created_at: r
            .try_get(5)
            .map_err(|e| refuse("its embedding's time", &e))?,
        source_id,
    })
}

/// The most text one document may have: what the daemon indexes of a file
/// ([`clawfs_core::search::chunk::MAX_FILE_BYTES`]).
pub const MAX_DOCUMENT_BYTES: u64 = clawfs_core::search::chunk::MAX_FILE_BYTES;

/// Refuses, before anything is written, documents the import could not keep: an id that is
/// NULL or held twice (equal as the id's type, or as text, which names the file), or a text
/// over [`MAX_DOCUMENT_BYTES`] (a memory can hold rows of any size; the import would hold a
/// batch of them).
fn check_documents(
    client: &mut Client,
    description: &str,
    names: &Names,
    workspace: &String,
) -> Result<(), MigrateError> {
    let Names {
        d, id, ws, content, ..
    } = names;
    let counts = client
        .query_one(
            &format!(
                "SELECT count(*), count(d.{id}), count(DISTINCT d.{id}), count(DISTINCT d.{id}::text),
                        count(*) FILTER (WHERE octet_length(d.{content}::text) > $2::bigint)
                 FROM {d} d WHERE d.{ws}::text = $1"
            ),
            &[workspace, &(MAX_DOCUMENT_BYTES as i64)],
        )
        .map_err(pg("checking the documents"))?;
    let [all, with_id, distinct, distinct_text, oversized]: [i64; 5] =
        std::array::from_fn(|i| counts.get(i));
    let refuse = |why: String| Err(MigrateError::Refused(format!("{description}: {why}")));
    if with_id < all {
        return refuse(format!("documents without an id (NULL): {}", all - with_id));
    }
    if distinct < all || distinct_text < all {
        let twice: Option<String> = client
            .query_opt(
                &format!(
                    "SELECT min(d.{id}::text) FROM {d} d WHERE d.{ws}::text = $1
                     GROUP BY d.{id} HAVING count(*) > 1
                     UNION ALL
                     SELECT min(d.{id}::text) FROM {d} d WHERE d.{ws}::text = $1
                     GROUP BY d.{id}::text HAVING count(*) > 1 LIMIT 1"
                ),
                &[workspace],
            )
            .map_err(pg("checking the documents"))?
            .map(|r| r.get(0));
        return refuse(format!(
            "the id \"{}\" is held by more than one document; a ClawFS document has one id",
            twice.unwrap_or_default().escape_debug()
        ));
    }
    if oversized > 0 {
        return refuse(format!(
            "documents with more than {MAX_DOCUMENT_BYTES} bytes of text (the most ClawFS \
             indexes of a file): {oversized}"
        ));
    }
    Ok(())
}

/// Refuses, before anything is written, embeddings that are not vectors of finite numbers: an
/// array of more than one dimension, or a NaN or infinite component (the distance to a NaN is
/// NaN, which would rank that document first for every query of the workspace).
fn check_embeddings(
    client: &mut Client,
    description: &str,
    names: &Names,
    workspace: &String,
) -> Result<(), MigrateError> {
    let Names {
        d,
        v,
        id,
        ws,
        doc_id,
        emb,
        ..
    } = names;
    let bad: Option<String> = client
        .query_opt(
            &format!(
                "SELECT d.{id}::text FROM {v} v JOIN {d} d ON v.{doc_id} = d.{id}
                 WHERE d.{ws}::text = $1 AND v.{emb} IS NOT NULL AND (
                     array_ndims(v.{emb}::real[]) <> 1
                     OR 'NaN'::real = ANY(v.{emb}::real[])
                     OR 'Infinity'::real = ANY(v.{emb}::real[])
                     OR '-Infinity'::real = ANY(v.{emb}::real[]))
                 LIMIT 1"
            ),
            &[workspace],
        )
        .map_err(pg("checking the embeddings"))?
        .map(|r| r.get(0));
    match bad {
        Some(doc) => Err(MigrateError::Refused(format!(
            "{description}: the embedding of document \"{}\" is not a vector of finite numbers \
             (NaN, infinity, or an array of more than one dimension)",
            doc.escape_debug()
        ))),
        None => Ok(()),
    }
}

/// The type of `table.column` as PostgreSQL names it (`bigint`, `vector(1536)`, `real[]`), or
/// None if there is no such column.
fn column_type(
    client: &mut Client,
    table: &str,
    column: &str,
) -> Result<Option<String>, MigrateError> {
    let row = client
        .query_opt(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
             WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped
               AND a.attnum > 0",
            &[&ident(table), &column],
        )
        .map_err(pg("checking the columns"))?;
    Ok(row.map(|r| r.get(0)))
}

fn pg(what: &'static str) -> impl Fn(postgres::Error) -> MigrateError {
    move |e| {
        // The server's own words (e.g. "permission denied for table documents").
        let detail = e
            .as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string());
        MigrateError::Source(format!("{what}: {detail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::{ident, redact};

    #[test]
    fn names_are_quoted_never_spliced() {
        assert_eq!(ident("documents"), "\"documents\"");
        assert_eq!(ident("memory.docs"), "\"memory\".\"docs\"");
        assert_eq!(
            ident("x\"; DROP TABLE t; --"),
            "\"x\"\"; DROP TABLE t; --\""
        );
    }

    #[test]
    fn the_password_never_shows() {
        let r = redact("postgresql://agent:s3cret@db.example:6543/memory");
        assert_eq!(r, "postgresql://agent@db.example:6543/memory");
        assert!(!redact("postgresql://u:s3cret@h/d").contains("s3cret"));
    }
}
