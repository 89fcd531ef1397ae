//! The PostgreSQL side: the `documents` and `vectors` tables (P1.4 §6), their names and columns
//! as configured, read in id order one batch at a time.
//!
//! Embeddings are read as `real[]` whatever their column type (pgvector's `vector` casts to it),
//! so both kinds arrive through one binary decoder. Names given on the command line are quoted as
//! identifiers, never spliced in as SQL.
//!
//! The server is not trusted to keep to what it was asked: every bound checked in SQL before
//! the copy is checked again on every row read ([`crate::wire`]), and each batch is checked to
//! be the keyset asked for ([`Batches`]).

use std::collections::HashSet;
use std::time::Duration;

use clawfs_search::import::{row_digest, Document};
use postgres::types::ToSql;
use postgres::NoTls;

use crate::wire::{
    count, more_rows, shown, text, value, Conn, Embedding, MAX_DIMENSION, MAX_ID_BYTES,
    MAX_METADATA_BYTES, MAX_NAME_BYTES, MAX_TIME_BYTES,
};
use crate::MigrateError;
use clawfs_args::pg::SourceArgs;

/// How long connecting may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The source, connected and checked.
pub struct Source {
    conn: Conn,
    sql: Queries,
    order: IdOrder,
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

/// How the importer checks that ids come in order: in the id's own type where it can compare
/// them as PostgreSQL does, else only that no id comes twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdOrder {
    /// `smallint`, `integer`, `bigint`: as numbers.
    Integer,
    /// `uuid`: its text is lowercase hex, which orders as the 16 bytes PostgreSQL compares.
    Uuid,
    /// Any other type (`text` orders by the database's collation, unknown here).
    Unchecked,
}

impl IdOrder {
    fn of(id_type: &str) -> IdOrder {
        match id_type {
            "smallint" | "integer" | "bigint" => IdOrder::Integer,
            "uuid" => IdOrder::Uuid,
            _ => IdOrder::Unchecked,
        }
    }

    /// Whether `next` comes strictly after `prev` (None when this order cannot tell).
    fn after(self, prev: &str, next: &str) -> Option<bool> {
        match self {
            IdOrder::Integer => match (prev.parse::<i64>(), next.parse::<i64>()) {
                (Ok(p), Ok(n)) => Some(n > p),
                _ => Some(false),
            },
            IdOrder::Uuid => Some(next > prev),
            IdOrder::Unchecked => None,
        }
    }
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
        let client = config.connect(NoTls).map_err(|e| {
            let cause = std::error::Error::source(&e).map_or(String::new(), |c| format!(": {c}"));
            MigrateError::Refused(format!(
                "cannot reach PostgreSQL at {description}: {}",
                shown(&format!("{e}{cause}"))
            ))
        })?;
        let mut client = Conn::new(client);
        let c = &args.columns;
        for table in [&c.documents_table, &c.vectors_table] {
            let what = "checking the tables";
            let row = client.one("SELECT to_regclass($1)::text", &[&ident(table)], what)?;
            let exists = text(&row, 0, what, MAX_NAME_BYTES)?;
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
                "{description}: {}.{} is {}; expected vector or real[]",
                c.vectors_table,
                c.embedding_column,
                shown(&embedding_type)
            )));
        }
        if let Some(n) = typed_dimension.filter(|n| *n > MAX_DIMENSION) {
            return Err(MigrateError::Refused(format!(
                "{description}: {}.{} has {n} dimensions; a workspace has at most {MAX_DIMENSION}",
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
        let what = "checking the embeddings";
        let doubled = client.rows(
            &format!(
                "SELECT left(v.{doc_id}::text, {MAX_ID_BYTES}), count(*) FROM {v} v
                 JOIN {d} d ON v.{doc_id} = d.{id}
                 WHERE d.{ws}::text = $1 GROUP BY v.{doc_id} HAVING count(*) > 1 ORDER BY 1 LIMIT 3"
            ),
            &[workspace],
            3,
            what,
        )?;
        if let Some(r) = doubled.first() {
            return Err(MigrateError::Refused(format!(
                "{description}: document \"{}\" has {} embeddings; a ClawFS document keeps one",
                shown(&text(r, 0, what, MAX_ID_BYTES)?.unwrap_or_default()),
                count(r, 1, what)?
            )));
        }
        check_embeddings(&mut client, &description, &names, workspace)?;
        let orphan_vectors = count(
            &client.one(
                &format!(
                    "SELECT count(*) FROM {v} v WHERE NOT EXISTS
                     (SELECT 1 FROM {d} d WHERE d.{id} = v.{doc_id})"
                ),
                &[],
                what,
            )?,
            0,
            what,
        )?;
        let dimension = match typed_dimension {
            Some(n) => Some(n),
            None => {
                let what = "checking the dimensions";
                let dims = client
                    .rows(
                        &format!(
                            "SELECT DISTINCT cardinality(v.{emb}::real[]) FROM {v} v
                         JOIN {d} d ON v.{doc_id} = d.{id}
                         WHERE d.{ws}::text = $1 AND v.{emb} IS NOT NULL LIMIT 3"
                        ),
                        &[workspace],
                        3,
                        what,
                    )?
                    .iter()
                    .map(|r| value::<Option<i32>>(r, 0, what))
                    .collect::<Result<Vec<_>, _>>()?;
                match dims.as_slice() {
                    [] => None,
                    [Some(n)] if *n > 0 && *n as usize <= MAX_DIMENSION => Some(*n as usize),
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
            conn: client,
            sql,
            order: IdOrder::of(&id_type),
            shape: Shape {
                documents: 0,
                vectors: 0,
                dimension,
                embedding_type,
                orphan_vectors,
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
        let what = "counting documents";
        let documents = self
            .conn
            .one(&self.sql.count_documents, &[&workspace], what)?;
        let documents = count(&documents, 0, what)?;
        let what = "counting embeddings";
        let vectors = self
            .conn
            .one(&self.sql.count_vectors, &[&workspace], what)?;
        Ok((documents, count(&vectors, 0, what)?))
    }

    /// The documents of `workspace` after the id `after`, in id order, `limit` at a time; at
    /// most `most` of them (what the server counted) before it is refused.
    pub fn batches<'s>(
        &'s mut self,
        workspace: &str,
        after: Option<String>,
        limit: i64,
        most: u64,
    ) -> Batches<'s> {
        Batches {
            source: self,
            workspace: workspace.to_string(),
            limit,
            most,
            read: 0,
            seen: after.iter().cloned().collect(),
            after,
        }
    }

    /// The digest of every document of `workspace` (see [`row_digest`]), read afresh; at most
    /// `most` of them.
    pub fn digests(
        &mut self,
        workspace: &str,
        with_embeddings: bool,
        batch: i64,
        most: u64,
    ) -> Result<std::collections::BTreeMap<String, [u8; 32]>, MigrateError> {
        let mut out = std::collections::BTreeMap::new();
        let mut batches = self.batches(workspace, None, batch, most);
        loop {
            let docs = batches.next_batch()?;
            if docs.is_empty() {
                return Ok(out);
            }
            for d in &docs {
                let v = d.embedding.as_deref().filter(|_| with_embeddings);
                out.insert(d.source_id.clone(), row_digest(&d.source_id, &d.content, v));
            }
        }
    }
}

/// The documents of a workspace in id order, a keyset batch at a time, each batch checked to be
/// what was asked: at most `limit` rows, of the workspace, each id after the one before (and
/// after the resume point), and no more documents in all than the server counted. A server
/// that sends anything else is refused, so that reading always ends.
pub struct Batches<'s> {
    source: &'s mut Source,
    workspace: String,
    limit: i64,
    /// The most documents to read in all.
    most: u64,
    /// Documents read so far.
    read: u64,
    /// The last id read (or the resume point).
    after: Option<String>,
    /// Every id read, where the id's order cannot be checked ([`IdOrder::Unchecked`]).
    seen: HashSet<String>,
}

impl Batches<'_> {
    /// The next batch; empty after the last.
    pub fn next_batch(&mut self) -> Result<Vec<Document>, MigrateError> {
        let what = "reading documents";
        let Batches {
            source,
            workspace,
            limit,
            most,
            read,
            after,
            seen,
        } = self;
        let order = source.order;
        let most_rows = usize::try_from(*limit).unwrap_or(0);
        let asked_after = after.clone();
        let mut docs = Vec::new();
        source.conn.read(
            &source.sql.batch,
            &[workspace, &asked_after, limit],
            what,
            |row| {
                if docs.len() == most_rows {
                    return Err(more_rows(what, most_rows));
                }
                let doc = decode(&row, workspace)?;
                drop(row);
                let id = doc.source_id.as_str();
                let in_order = match (&*after, order) {
                    (_, IdOrder::Unchecked) => seen.insert(id.to_string()),
                    (Some(prev), order) => order.after(prev, id) == Some(true),
                    (None, _) => true,
                };
                if !in_order {
                    return Err(MigrateError::Source(format!(
                        "{what}: the server sent document \"{}\" where one after \"{}\" was \
                         asked for (the ids must come in order, each once)",
                        shown(id),
                        shown(after.as_deref().unwrap_or_default())
                    )));
                }
                *read += 1;
                if *read > *most {
                    return Err(MigrateError::Source(format!(
                        "{what}: the server sent more than the {most} documents it counted"
                    )));
                }
                *after = Some(doc.source_id.clone());
                docs.push(doc);
                Ok(())
            },
        )?;
        Ok(docs)
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
    fn of(c: &clawfs_args::pg::Columns) -> Names {
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

/// One row of the batch query as a document of `workspace`, refused with the document named
/// (escaped: its id is the source's, and may hold anything) when a value is not what a document
/// holds. Every text is bounded before it is copied: the server may have ignored the checks made
/// in SQL.
fn decode(r: &postgres::Row, workspace: &str) -> Result<Document, MigrateError> {
    let source_id = text(r, 0, "a document's id", MAX_ID_BYTES)?
        .ok_or_else(|| MigrateError::Refused("a document has no id (NULL)".into()))?;
    let shown = shown(&source_id);
    let refuse = |what: &str, e: &dyn std::fmt::Display| {
        MigrateError::Refused(format!("document \"{shown}\": {what}: {e}"))
    };
    let its = |what: &str| format!("document \"{shown}\": its {what}");
    let workspace_id = text(r, 1, &its("workspace"), workspace.len())?;
    if workspace_id.as_deref() != Some(workspace) {
        return Err(refuse("its workspace", &"not the one asked for"));
    }
    let metadata = text(r, 3, &its("metadata"), MAX_METADATA_BYTES)?
        .map(|m| serde_json::from_str(&m))
        .transpose()
        .map_err(|e| refuse("its metadata is not JSON", &e))?;
    let embedding: Option<Embedding> = value(r, 4, &its("embedding"))?;
    let content = text(r, 2, &its("content"), MAX_DOCUMENT_BYTES as usize)?;
    Ok(Document {
        workspace_id: workspace.to_string(),
        content: content.unwrap_or_default(),
        metadata,
        embedding: embedding.map(|e| e.0),
        created_at: text(r, 5, &its("embedding's time"), MAX_TIME_BYTES)?,
        source_id,
    })
}

/// The most text one document may have: what the daemon indexes of a file
/// ([`clawfs_search::chunk::MAX_FILE_BYTES`]).
pub const MAX_DOCUMENT_BYTES: u64 = clawfs_search::chunk::MAX_FILE_BYTES;

/// A bound on the size of a value, checked in SQL before anything is written (and again on
/// every row read, by [`decode`]).
struct Bound {
    /// The value's size in SQL.
    size: String,
    /// The most it may be.
    most: usize,
    /// What the refusal says of the values over it (followed by how many there are).
    over: String,
}

/// Refuses, before anything is written, documents the import could not keep: an id that is
/// NULL or held twice (equal as the id's type, or as text, which names the file), or a value
/// over its bound (a memory can hold rows of any size; the import would hold a batch of them):
/// a text over [`MAX_DOCUMENT_BYTES`], an id over [`MAX_ID_BYTES`], metadata over
/// [`MAX_METADATA_BYTES`].
fn check_documents(
    client: &mut Conn,
    description: &str,
    names: &Names,
    workspace: &String,
) -> Result<(), MigrateError> {
    let Names {
        d,
        id,
        ws,
        content,
        meta,
        ..
    } = names;
    let what = "checking the documents";
    let counts = client.one(
        &format!(
            "SELECT count(*), count(d.{id}), count(DISTINCT d.{id}), count(DISTINCT d.{id}::text)
             FROM {d} d WHERE d.{ws}::text = $1"
        ),
        &[workspace],
        what,
    )?;
    let [all, with_id, distinct, distinct_text] = [0, 1, 2, 3].map(|i| count(&counts, i, what));
    let (all, with_id, distinct, distinct_text) = (all?, with_id?, distinct?, distinct_text?);
    let refuse = |why: String| Err(MigrateError::Refused(format!("{description}: {why}")));
    if with_id < all {
        return refuse(format!("documents without an id (NULL): {}", all - with_id));
    }
    check_bounds(
        client,
        description,
        names,
        workspace,
        &format!("{d} d"),
        &[
            Bound {
                size: format!("octet_length(d.{content}::text)"),
                most: MAX_DOCUMENT_BYTES as usize,
                over: format!(
                    "documents with more than {MAX_DOCUMENT_BYTES} bytes of text (the most \
                     ClawFS indexes of a file)"
                ),
            },
            Bound {
                size: format!("octet_length(d.{id}::text)"),
                most: MAX_ID_BYTES,
                over: format!("documents with an id of more than {MAX_ID_BYTES} bytes"),
            },
            Bound {
                size: format!("octet_length(d.{meta}::text)"),
                most: MAX_METADATA_BYTES,
                over: format!("documents with more than {MAX_METADATA_BYTES} bytes of metadata"),
            },
        ],
    )?;
    if distinct < all || distinct_text < all {
        let twice = client.rows(
            &format!(
                "(SELECT min(d.{id}::text) FROM {d} d WHERE d.{ws}::text = $1
                  GROUP BY d.{id} HAVING count(*) > 1 LIMIT 1)
                 UNION ALL
                 (SELECT min(d.{id}::text) FROM {d} d WHERE d.{ws}::text = $1
                  GROUP BY d.{id}::text HAVING count(*) > 1 LIMIT 1) LIMIT 1"
            ),
            &[workspace],
            1,
            what,
        )?;
        let twice = match twice.first() {
            Some(r) => text(r, 0, what, MAX_ID_BYTES)?,
            None => None,
        };
        return refuse(format!(
            "the id \"{}\" is held by more than one document; a ClawFS document has one id",
            shown(&twice.unwrap_or_default())
        ));
    }
    Ok(())
}

/// Refuses the rows of the workspace in `from` (which names the documents `d`) with a value
/// over one of `bounds`: how many, and the first document's id.
fn check_bounds(
    client: &mut Conn,
    description: &str,
    names: &Names,
    workspace: &String,
    from: &str,
    bounds: &[Bound],
) -> Result<(), MigrateError> {
    let Names { id, ws, .. } = names;
    let what = "checking the sizes of the values";
    // For each bound: how many are over it, and the least id of those (cut, so that an id
    // over its own bound is not read whole).
    let columns: Vec<String> = bounds
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let over = format!("{} > ${}::bigint", b.size, i + 2);
            format!(
                "count(*) FILTER (WHERE {over}), min(left(d.{id}::text, 100)) FILTER (WHERE {over})"
            )
        })
        .collect();
    let most: Vec<i64> = bounds.iter().map(|b| b.most as i64).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![workspace];
    params.extend(most.iter().map(|m| m as &(dyn ToSql + Sync)));
    let row = client.one(
        &format!(
            "SELECT {} FROM {from} WHERE d.{ws}::text = $1",
            columns.join(", ")
        ),
        &params,
        what,
    )?;
    for (i, b) in bounds.iter().enumerate() {
        let n = count(&row, 2 * i, what)?;
        if n > 0 {
            let first = text(&row, 2 * i + 1, what, MAX_ID_BYTES)?.unwrap_or_default();
            return Err(MigrateError::Refused(format!(
                "{description}: {}: {n} (the first: document \"{}\")",
                b.over,
                shown(&first)
            )));
        }
    }
    Ok(())
}

/// Refuses, before anything is written, embeddings that are not vectors of finite numbers: an
/// array of more than one dimension, or a NaN or infinite component (the distance to a NaN is
/// NaN, which would rank that document first for every query of the workspace), or one of more
/// than [`MAX_DIMENSION`] components; and creation times of more than [`MAX_TIME_BYTES`].
fn check_embeddings(
    client: &mut Conn,
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
        created,
        ..
    } = names;
    check_bounds(
        client,
        description,
        names,
        workspace,
        &format!("{v} v JOIN {d} d ON v.{doc_id} = d.{id}"),
        &[
            Bound {
                size: format!("cardinality(v.{emb}::real[])"),
                most: MAX_DIMENSION,
                over: format!(
                    "embeddings of more than {MAX_DIMENSION} components (the largest workspace \
                     dimension)"
                ),
            },
            Bound {
                size: format!("octet_length(v.{created}::text)"),
                most: MAX_TIME_BYTES,
                over: format!("embeddings whose time has more than {MAX_TIME_BYTES} bytes"),
            },
        ],
    )?;
    let what = "checking the embeddings";
    let bad = client.rows(
        &format!(
            "SELECT left(d.{id}::text, 100) FROM {v} v JOIN {d} d ON v.{doc_id} = d.{id}
             WHERE d.{ws}::text = $1 AND v.{emb} IS NOT NULL AND (
                 array_ndims(v.{emb}::real[]) <> 1
                 OR 'NaN'::real = ANY(v.{emb}::real[])
                 OR 'Infinity'::real = ANY(v.{emb}::real[])
                 OR '-Infinity'::real = ANY(v.{emb}::real[]))
             LIMIT 1"
        ),
        &[workspace],
        1,
        what,
    )?;
    match bad.first() {
        Some(r) => Err(MigrateError::Refused(format!(
            "{description}: the embedding of document \"{}\" is not a vector of finite numbers \
             (NaN, infinity, or an array of more than one dimension)",
            shown(&text(r, 0, what, MAX_ID_BYTES)?.unwrap_or_default())
        ))),
        None => Ok(()),
    }
}

/// The type of `table.column` as PostgreSQL names it (`bigint`, `vector(1536)`, `real[]`), or
/// None if there is no such column.
fn column_type(
    client: &mut Conn,
    table: &str,
    column: &str,
) -> Result<Option<String>, MigrateError> {
    let what = "checking the columns";
    let row = client.opt(
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
         WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped
           AND a.attnum > 0",
        &[&ident(table), &column],
        what,
    )?;
    match row {
        Some(r) => text(&r, 0, what, MAX_NAME_BYTES),
        None => Ok(None),
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
