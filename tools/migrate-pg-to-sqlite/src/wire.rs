//! What the PostgreSQL server sends, read as untrusted input: a hostile server (or hostile rows
//! in an honest one) must not make the importer panic, allocate what a header claims, loop
//! forever, or write escape sequences to the terminal.
//!
//! - Every value is read with `try_get` ([`value`], [`count`], [`text`]): a NULL or a value of
//!   another type where one is expected is an error, never a panic.
//! - Text is bounded by its size before it is copied ([`text`] borrows the row's bytes first).
//! - Embeddings are decoded by [`Embedding`]: the array header is parsed by `postgres-protocol`
//!   and its length checked against [`MAX_DIMENSION`] before anything is allocated.
//! - Answers are read row by row ([`Conn::read`]), each checked as it arrives; one with more
//!   rows than asked for is refused at the first row too many, and its connection abandoned.
//! - Text from the server is shown through [`shown`], which escapes control characters.

use std::error::Error;
use std::mem::ManuallyDrop;

use fallible_iterator::FallibleIterator;
use postgres::types::{FromSql, ToSql, Type};
use postgres::{Client, Row};

use crate::MigrateError;

/// The most bytes a document's id may have (it names a file; ids longer than a plain name are
/// hashed, see [`crate::place::file_name`]).
pub const MAX_ID_BYTES: usize = 1024;
/// The most bytes of JSON a document's metadata may have.
pub const MAX_METADATA_BYTES: usize = 1 << 20;
/// The most bytes an embedding's creation time may have, as text.
pub const MAX_TIME_BYTES: usize = 256;
/// The most bytes of a name the server reports (a table, a type).
pub const MAX_NAME_BYTES: usize = 1024;
/// The most components an embedding may have: the largest workspace dimension.
pub const MAX_DIMENSION: usize = *clawfs_search::VECTOR_DIMENSION_RANGE.end() as usize;

/// The most characters of server text shown in one message.
const SHOWN_CHARS: usize = 200;

/// `text` as it may be shown on a terminal: control characters (escape sequences, carriage
/// returns, newlines) escaped as Rust does, and cut after [`SHOWN_CHARS`] characters.
pub fn shown(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(SHOWN_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// What went wrong with a value of a row, shown: the decoder's own words when it has them
/// (`holds a NULL`), else the client's (`invalid column 3`).
pub fn cause(e: &postgres::Error) -> String {
    match e.source() {
        Some(c) => shown(&c.to_string()),
        None => shown(&e.to_string()),
    }
}

/// Column `i` of `row`, refused with `what` named when it is missing or of another type.
pub fn value<'a, T: FromSql<'a>>(row: &'a Row, i: usize, what: &str) -> Result<T, MigrateError> {
    row.try_get(i)
        .map_err(|e| MigrateError::Source(format!("{what}: {}", cause(&e))))
}

/// Column `i` of `row` as a count: a non-NULL, non-negative `bigint`.
pub fn count(row: &Row, i: usize, what: &str) -> Result<u64, MigrateError> {
    let n: Option<i64> = value(row, i, what)?;
    n.and_then(|n| u64::try_from(n).ok()).ok_or_else(|| {
        MigrateError::Source(format!("{what}: the server answered {n:?}, not a count"))
    })
}

/// Column `i` of `row` as text of at most `most` bytes, checked before it is copied.
pub fn text(row: &Row, i: usize, what: &str, most: usize) -> Result<Option<String>, MigrateError> {
    let t: Option<&str> = value(row, i, what)?;
    match t {
        Some(t) if t.len() > most => Err(too_long(what, t.len(), most)),
        t => Ok(t.map(str::to_owned)),
    }
}

/// The refusal of a value of `len` bytes where `most` are allowed.
fn too_long(what: &str, len: usize, most: usize) -> MigrateError {
    MigrateError::Refused(format!("{what}: {len} bytes, over the {most} allowed"))
}

/// A connection to the source. One whose answer was refused before its end is abandoned, not
/// closed: closing reads the rest of the answer, which a lying server need never end (its socket
/// is closed when the process exits).
pub struct Conn {
    client: ManuallyDrop<Client>,
    abandoned: bool,
}

impl Conn {
    /// `client`, closed when dropped (unless abandoned).
    pub fn new(client: Client) -> Conn {
        Conn {
            client: ManuallyDrop::new(client),
            abandoned: false,
        }
    }

    /// Runs `sql`, handing each row to `each` as it arrives; the first refusal of `each`
    /// stops the reading (and abandons the connection).
    pub fn read(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        what: &'static str,
        mut each: impl FnMut(Row) -> Result<(), MigrateError>,
    ) -> Result<(), MigrateError> {
        let mut it = self
            .client
            .query_raw(sql, params.iter().copied())
            .map_err(pg(what))?;
        while let Some(row) = it.next().map_err(pg(what))? {
            if let Err(e) = each(row) {
                self.abandoned = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The rows of `sql`, which asks for at most `most`: refused at the first row over `most`
    /// (a server that sends more is not to be believed, nor to be read forever).
    pub fn rows(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        most: usize,
        what: &'static str,
    ) -> Result<Vec<Row>, MigrateError> {
        let mut out = Vec::new();
        self.read(sql, params, what, |row| {
            if out.len() == most {
                return Err(more_rows(what, most));
            }
            out.push(row);
            Ok(())
        })?;
        Ok(out)
    }

    /// The one row of `sql` (an aggregate).
    pub fn one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        what: &'static str,
    ) -> Result<Row, MigrateError> {
        self.opt(sql, params, what)?.ok_or_else(|| {
            MigrateError::Source(format!("{what}: the server sent no row where one is due"))
        })
    }

    /// The row of `sql`, if any.
    pub fn opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        what: &'static str,
    ) -> Result<Option<Row>, MigrateError> {
        Ok(self.rows(sql, params, 1, what)?.pop())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.abandoned {
            // SAFETY: `self.client` is dropped only here, once, and `self` is not used after.
            unsafe { ManuallyDrop::drop(&mut self.client) }
        }
    }
}

/// The refusal of an answer of more rows than the `most` asked for.
pub fn more_rows(what: &str, most: usize) -> MigrateError {
    MigrateError::Source(format!(
        "{what}: the server sent more than the {most} rows asked for"
    ))
}

/// A PostgreSQL error while doing `what`, in the server's own words, shown.
pub fn pg(what: &'static str) -> impl Fn(postgres::Error) -> MigrateError {
    move |e| {
        // The server's own words (e.g. "permission denied for table documents").
        let detail = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.message().to_string());
        MigrateError::Source(format!("{what}: {}", shown(&detail)))
    }
}

/// An embedding as the server sent it: a `real[]` of one dimension and at most
/// [`MAX_DIMENSION`] finite components, none NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding(pub Vec<f32>);

impl<'a> FromSql<'a> for Embedding {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let array = postgres_protocol::types::array_from_sql(raw)?;
        if array.element_type() != Type::FLOAT4.oid() {
            return Err(
                format!("holds elements of type {}, not real", array.element_type()).into(),
            );
        }
        let mut dims = array.dimensions();
        let len = match (dims.next()?, dims.next()?) {
            (None, _) => 0,
            (Some(d), None) => usize::try_from(d.len).map_err(|_| "a negative length")?,
            (Some(_), Some(_)) => return Err("an array of more than one dimension".into()),
        };
        // The header's length, not yet the values: checked before the vector is allocated.
        if len > MAX_DIMENSION {
            return Err(format!(
                "{len} components, over the {MAX_DIMENSION} of the largest workspace dimension"
            )
            .into());
        }
        let mut out = Vec::with_capacity(len);
        let mut values = array.values();
        while let Some(v) = values.next()? {
            let x = postgres_protocol::types::float4_from_sql(v.ok_or("holds a NULL")?)?;
            if !x.is_finite() {
                return Err(format!("holds {x}").into());
            }
            out.push(x);
        }
        Ok(Embedding(out))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::FLOAT4_ARRAY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary `real[]` of one dimension whose header claims `len` components, followed by
    /// `values`.
    fn array(len: i32, values: &[Option<f32>]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&Type::FLOAT4.oid().to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        for v in values {
            match v {
                Some(x) => {
                    b.extend_from_slice(&4i32.to_be_bytes());
                    b.extend_from_slice(&x.to_be_bytes());
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        b
    }

    fn decode(raw: &[u8]) -> Result<Vec<f32>, String> {
        Embedding::from_sql(&Type::FLOAT4_ARRAY, raw)
            .map(|e| e.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_embedding_is_decoded() {
        assert_eq!(
            decode(&array(2, &[Some(1.0), Some(-0.5)])),
            Ok(vec![1.0, -0.5])
        );
    }

    #[test]
    fn a_huge_length_in_the_header_is_refused_before_any_allocation() {
        // Without the check, the header alone asked for 2^31 components.
        let e = decode(&array(i32::MAX, &[Some(1.0)])).unwrap_err();
        assert!(e.contains("2147483647 components, over the 4096"), "{e}");
    }

    #[test]
    fn a_null_a_nan_or_a_short_value_is_refused() {
        assert_eq!(
            decode(&array(2, &[Some(1.0), None])),
            Err("holds a NULL".into())
        );
        assert_eq!(
            decode(&array(1, &[Some(f32::NAN)])),
            Err("holds NaN".into())
        );
        assert!(decode(&array(3, &[Some(1.0)])).is_err());
        assert!(decode(&[0, 0, 0, 1]).is_err());
    }

    #[test]
    fn server_text_is_shown_escaped_and_cut() {
        assert_eq!(shown("a\u{1b}[2K\rb\n"), "a\\u{1b}[2K\\rb\\n");
        let long = "x".repeat(1000);
        assert_eq!(shown(&long).chars().count(), SHOWN_CHARS + 1);
    }
}
