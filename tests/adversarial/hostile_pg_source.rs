//! A hostile PostgreSQL source for `migrate-pg-to-sqlite`: rows whose values are huge or carry
//! terminal escapes in a real PostgreSQL, and a fake server that lies at the protocol level
//! (NULL counts, more rows than the LIMIT, an ignored resume point, more documents than it
//! counted, an array header claiming two billion components, values over the bounds its own
//! checks denied). Each must be refused with a clear, escaped message: never a panic, a
//! loop without end, or memory taken on the server's word.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::postgres::Postgres;
use crate::common::workspace_bin;

/// How long one import may take before it is called endless (and killed).
const DEADLINE: Duration = Duration::from_secs(60);

/// A running `migrate-pg-to-sqlite`, killed when dropped (also when the test fails).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What an import did: its exit code (None when killed by a signal or the deadline) and what
/// it printed.
struct Outcome {
    code: Option<i32>,
    said: String,
}

/// Imports from `url` into a fresh database in `dir` with `extra` options, killed after
/// [`DEADLINE`].
fn import(url: &str, dir: &Path, extra: &[&str]) -> Outcome {
    let db = dir.join("out.db");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new(workspace_bin(
        "migrate-pg-to-sqlite",
        "migrate-pg-to-sqlite",
    ))
    .args(["--pg-url", url, "--sqlite-path", db.to_str().unwrap()])
    .args(["--embedding-model", "m", "--quiet"])
    .args(extra)
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(&out).unwrap())
    .stderr(std::fs::File::create(&err).unwrap())
    .spawn()
    .expect("run migrate-pg-to-sqlite");
    let mut run = Running(child);
    let started = Instant::now();
    let code = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(run);
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Outcome {
        code,
        said: read(&out) + &read(&err),
    }
}

/// Checks that the import was refused (exit 1, not a panic, a signal or the deadline) with
/// `why`, and printed no control character.
fn assert_refused(o: &Outcome, why: &str) {
    let said = &o.said;
    assert_eq!(
        o.code,
        Some(1),
        "expected a refusal ({why:?}), got: {said:?}"
    );
    assert!(said.contains(why), "expected {why:?}: {said}");
    assert!(!said.contains("panicked"), "{said}");
    assert!(
        !said.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal: {said:?}"
    );
}

/// Checks that the import into `dir` wrote no document.
fn assert_nothing_written(dir: &Path) {
    let db = dir.join("out.db");
    let chunks = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT count(*) FROM chunks")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert!(
        !db.exists() || chunks.as_deref().is_ok_and(|n| n == "0" || n.is_empty()),
        "the refused import wrote documents into {}",
        db.display()
    );
}

/// P1.4 §6's tables with three documents and 4-component embeddings; `created_at` of type
/// `time_type`.
fn source(time_type: &str) -> Postgres {
    let pg = Postgres::start();
    pg.sql(&format!(
        "CREATE TABLE documents (id text, workspace_id text NOT NULL, content text, metadata jsonb);
         CREATE TABLE vectors (document_id text, embedding real[], created_at {time_type});
         INSERT INTO documents VALUES ('1', 'default', 'one', NULL), ('2', 'default', 'two', NULL),
             ('3', 'default', 'three', NULL);
         INSERT INTO vectors VALUES ('1', '{{1,0,0,0}}', '2024-01-01'), ('2', '{{0,1,0,0}}', '2024-01-01'),
             ('3', '{{0,0,1,0}}', '2024-01-01');"
    ));
    pg
}

#[test]
fn values_over_their_bounds_in_a_real_postgres_are_refused_before_anything_is_written() {
    // Any one of these, of any size, was read whole (a few huge rows took gigabytes); each is
    // refused now with the first document named, escaped.
    let pg = source("text");
    let url = pg.url();
    let refused = |why: &str| {
        let dir = tempfile::tempdir().unwrap();
        assert_refused(&import(&url, dir.path(), &[]), why);
        assert_nothing_written(dir.path());
    };
    let escaped_id = "E'\\x1b[2J\\x1b]0;owned\\x07'";
    pg.sql(&format!(
        "UPDATE documents SET id = {escaped_id} WHERE id = '2';
         UPDATE vectors SET document_id = {escaped_id} WHERE document_id = '2';
         UPDATE documents SET metadata = jsonb_build_object('pad', repeat('m', 2000000))
             WHERE id = {escaped_id}"
    ));
    refused(
        "documents with more than 1048576 bytes of metadata: 1 \
         (the first: document \"\\u{1b}[2J\\u{1b}]0;owned\\u{7}\")",
    );
    pg.sql(&format!(
        "UPDATE documents SET metadata = NULL;
         UPDATE vectors SET created_at = repeat('t', 100000) WHERE document_id = {escaped_id}"
    ));
    refused("embeddings whose time has more than 256 bytes: 1");
    pg.sql(
        "UPDATE vectors SET created_at = '2024-01-01';
         UPDATE documents SET id = repeat('i', 5000) WHERE id = '3';
         UPDATE vectors SET document_id = repeat('i', 5000) WHERE document_id = '3'",
    );
    refused("documents with an id of more than 1024 bytes: 1");
    // Every embedding of one dimension, so that nothing else refuses them.
    pg.sql(
        "UPDATE documents SET id = '3' WHERE id LIKE 'iii%';
         UPDATE vectors SET document_id = '3' WHERE document_id LIKE 'iii%';
         UPDATE vectors SET embedding = array_fill(0.5::real, ARRAY[5000])",
    );
    refused("embeddings of more than 4096 components (the largest workspace dimension): 3");
}

#[test]
fn a_server_error_made_of_terminal_escapes_is_printed_escaped() {
    // The server's error message came to the terminal as it was: it could clear the screen
    // and print a forged report.
    let pg = source("timestamptz");
    pg.sql(
        "ALTER TABLE documents RENAME TO stored;
         CREATE FUNCTION boom(t text) RETURNS text LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION E'\\x1b[2J\\x1b[Hresult     OK\\r'; END $$;
         CREATE VIEW documents AS
             SELECT id, workspace_id, boom(content) AS content, metadata FROM stored;",
    );
    let dir = tempfile::tempdir().unwrap();
    let o = import(&pg.url(), dir.path(), &[]);
    assert_refused(&o, "\\u{1b}[2J\\u{1b}[Hresult     OK\\r");
    assert_nothing_written(dir.path());
}

/// One lie of the fake server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lie {
    /// None: an honest server.
    Honest,
    /// NULL where the documents are counted.
    NullCount,
    /// Rows without end, whatever the LIMIT.
    EndlessRows,
    /// Every batch from the first document, whatever the resume point.
    IgnoredResume,
    /// Three documents counted, new ones in every batch without end.
    MoreThanCounted,
    /// An embedding whose array header claims i32::MAX components.
    HugeArrayHeader,
    /// 2 MiB of metadata in a row, when its own check counted none.
    HugeMetadata,
    /// An embedding's time of 1 MiB, when its own check counted none.
    HugeTime,
    /// An error made of terminal escapes.
    EscapesInError,
}

/// Documents the fake server counts.
const DOCUMENTS: i64 = 3;

/// The fake server's rows: each value in the binary format, or NULL.
type Rows = Box<dyn Iterator<Item = Vec<Option<Vec<u8>>>> + Send>;

/// The OIDs of the types the fake server answers with.
const TEXT: u32 = 25;
const INT8: u32 = 20;
const INT4: u32 = 23;
const FLOAT4_ARRAY: u32 = 1021;

/// A binary `real[]` of one dimension whose header claims `len` components.
fn real_array(len: i32, values: &[f32]) -> Vec<u8> {
    let mut b = Vec::new();
    for n in [1, 0, 700, len, 1] {
        b.extend_from_slice(&i32::to_be_bytes(n));
    }
    for x in values {
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&x.to_be_bytes());
    }
    b
}

fn text(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

fn int8(n: i64) -> Option<Vec<u8>> {
    Some(n.to_be_bytes().to_vec())
}

/// Document `i` of the batch query's answer.
fn document(i: i64, lie: Lie) -> Vec<Option<Vec<u8>>> {
    let embedding = match (lie, i) {
        (Lie::HugeArrayHeader, 2) => real_array(i32::MAX, &[1.0]),
        _ => real_array(2, &[i as f32, 1.0]),
    };
    let metadata = match (lie, i) {
        (Lie::HugeMetadata, 2) => text(&format!("\"{}\"", "m".repeat(2 << 20))),
        _ => None,
    };
    let time = match (lie, i) {
        (Lie::HugeTime, 2) => text(&"t".repeat(1 << 20)),
        _ => text("2024-01-01 00:00:00+00"),
    };
    let content = format!("note {i}");
    vec![
        text(&i.to_string()),
        text("default"),
        text(&content),
        metadata,
        Some(embedding),
        time,
    ]
}

/// The fake server's answer to `sql` with `params` (empty when only described): the types of
/// its columns and its rows, or an error message.
fn answer(sql: &str, params: &[Option<Vec<u8>>], lie: Lie) -> Result<(Vec<u32>, Rows), String> {
    let param = |i: usize| params.get(i).cloned().flatten().unwrap_or_default();
    let one = |types: Vec<u32>, row: Vec<Option<Vec<u8>>>| -> (Vec<u32>, Rows) {
        (types, Box::new(std::iter::once(row)))
    };
    let none = |types: Vec<u32>| -> (Vec<u32>, Rows) { (types, Box::new(std::iter::empty())) };
    if sql.contains("to_regclass($1)::text") {
        return Ok(one(vec![TEXT], vec![Some(param(0))]));
    }
    if sql.contains("format_type") {
        let ty = match param(1).as_slice() {
            b"id" => "bigint",
            b"embedding" => "real[]",
            _ => "text",
        };
        return Ok(one(vec![TEXT], vec![text(ty)]));
    }
    if sql.contains("count(DISTINCT") {
        if lie == Lie::EscapesInError {
            return Err("\u{1b}[2J\u{1b}[Hresult     OK".into());
        }
        let n = match lie {
            Lie::NullCount => None,
            _ => int8(DOCUMENTS),
        };
        return Ok(one(vec![INT8; 4], vec![n; 4]));
    }
    if sql.contains("FILTER (WHERE") {
        // The sizes checked: none over its bound, whatever the rows hold.
        let n = sql.matches("FILTER (WHERE").count();
        let types = (0..n).map(|i| [INT8, TEXT][i % 2]).collect();
        let row = (0..n).map(|i| [int8(0), None][i % 2].clone()).collect();
        return Ok(one(types, row));
    }
    if sql.contains("HAVING count(*) > 1") {
        return Ok(none(vec![TEXT, INT8]));
    }
    if sql.contains("array_ndims") {
        return Ok(none(vec![TEXT]));
    }
    if sql.contains("NOT EXISTS") {
        return Ok(one(vec![INT8], vec![int8(0)]));
    }
    if sql.contains("SELECT DISTINCT cardinality") {
        return Ok(one(vec![INT4], vec![Some(2i32.to_be_bytes().to_vec())]));
    }
    if sql.contains("SELECT count(") {
        return Ok(one(vec![INT8], vec![int8(DOCUMENTS)]));
    }
    if sql.contains("ORDER BY d.") {
        let after: i64 = match &params.get(1) {
            Some(Some(a)) => String::from_utf8_lossy(a).parse().unwrap_or(0),
            _ => 0,
        };
        let limit = match params.get(2) {
            Some(Some(l)) => i64::from_be_bytes(l[..8].try_into().unwrap()),
            _ => 0,
        };
        let ids: Box<dyn Iterator<Item = i64> + Send> = match lie {
            Lie::EndlessRows => Box::new(after + 1..),
            Lie::IgnoredResume => Box::new((1..=DOCUMENTS).take(limit as usize)),
            Lie::MoreThanCounted => Box::new((after + 1..).take(limit as usize)),
            _ => Box::new((after + 1..=DOCUMENTS).take(limit as usize)),
        };
        let types = vec![TEXT, TEXT, TEXT, TEXT, FLOAT4_ARRAY, TEXT];
        return Ok((types, Box::new(ids.map(move |i| document(i, lie)))));
    }
    Err(format!("the fake server does not know {sql}"))
}

/// The types of the parameters of `sql`: `bigint` where it says so (or for a LIMIT), else text.
fn param_types(sql: &str) -> Vec<u32> {
    let n = (1..10)
        .take_while(|i| sql.contains(&format!("${i}")))
        .count();
    (1..=n)
        .map(|i| {
            match sql.contains(&format!("${i}::bigint")) || sql.contains(&format!("LIMIT ${i}")) {
                true => INT8,
                false => TEXT,
            }
        })
        .collect()
}

/// A fake PostgreSQL on a loopback port, speaking enough of the protocol (3.0) for the
/// importer: trust authentication, then Parse/Describe/Bind/Execute/Close/Sync, every result
/// in binary. It stops accepting when dropped; a connection ends with its client.
struct FakePg {
    port: u16,
    stop: Arc<AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl FakePg {
    fn start(lie: Lie) -> FakePg {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let accepting = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    std::thread::spawn(move || {
                        // Ends with an error when the client goes away.
                        let _ = serve(conn, lie);
                    });
                }
            }
        });
        FakePg {
            port,
            stop,
            accepting: Some(accepting),
        }
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for FakePg {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accepting.take() {
            let _ = t.join();
        }
    }
}

/// A backend message: its type byte and body.
fn send(w: &mut impl Write, kind: u8, body: &[u8]) -> std::io::Result<()> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    w.write_all(&m)
}

fn ready(w: &mut impl Write) -> std::io::Result<()> {
    send(w, b'Z', b"I")
}

/// A reader of a message's body.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn cstr(&mut self) -> String {
        let end = self.0.iter().position(|b| *b == 0).unwrap_or(self.0.len());
        let s = String::from_utf8_lossy(&self.0[..end]).into_owned();
        self.0 = &self.0[(end + 1).min(self.0.len())..];
        s
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }

    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }

    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
}

fn serve(conn: TcpStream, lie: Lie) -> std::io::Result<()> {
    let mut r = std::io::BufReader::new(conn.try_clone()?);
    let mut w = std::io::BufWriter::new(conn);
    let mut read_exact = |n: usize| -> std::io::Result<Vec<u8>> {
        let mut b = vec![0; n];
        r.read_exact(&mut b)?;
        Ok(b)
    };
    // The startup packet, after an SSL or GSS request refused.
    loop {
        let len = i32::from_be_bytes(read_exact(4)?.try_into().unwrap()) as usize;
        let body = read_exact(len - 4)?;
        match i32::from_be_bytes(body[..4].try_into().unwrap()) {
            80877103 | 80877104 => {
                w.write_all(b"N")?;
                w.flush()?;
            }
            _ => break,
        }
    }
    send(&mut w, b'R', &0i32.to_be_bytes())?;
    ready(&mut w)?;
    w.flush()?;
    let mut statements = std::collections::HashMap::<String, String>::new();
    // The statement bound to the portal, and its parameters.
    let mut bound = (String::new(), Vec::new());
    // After an error, messages are skipped up to the next Sync.
    let mut failed = false;
    loop {
        let kind = read_exact(1)?[0];
        let len = i32::from_be_bytes(read_exact(4)?.try_into().unwrap()) as usize;
        let raw = read_exact(len - 4)?;
        let mut body = Body(&raw);
        if failed && kind != b'S' {
            continue;
        }
        match kind {
            b'P' => {
                let name = body.cstr();
                statements.insert(name, body.cstr());
                send(&mut w, b'1', &[])?;
            }
            b'D' => {
                let (_, name) = (body.take(1)[0], body.cstr());
                let sql = statements.get(&name).cloned().unwrap_or_default();
                let types = param_types(&sql);
                let mut t = (types.len() as i16).to_be_bytes().to_vec();
                types
                    .iter()
                    .for_each(|o| t.extend_from_slice(&o.to_be_bytes()));
                send(&mut w, b't', &t)?;
                match answer(&sql, &[], lie) {
                    Ok((columns, _)) => send(&mut w, b'T', &row_description(&columns))?,
                    Err(_) => send(&mut w, b'n', &[])?,
                }
            }
            b'B' => {
                let (_, name) = (body.cstr(), body.cstr());
                let formats = body.i16();
                body.take(2 * formats as usize);
                let params = (0..body.i16())
                    .map(|_| match body.i32() {
                        n if n < 0 => None,
                        n => Some(body.take(n as usize).to_vec()),
                    })
                    .collect();
                bound = (statements.get(&name).cloned().unwrap_or_default(), params);
                send(&mut w, b'2', &[])?;
            }
            b'E' => match answer(&bound.0, &bound.1, lie) {
                Ok((_, rows)) => {
                    let mut n = 0;
                    for row in rows {
                        send(&mut w, b'D', &data_row(&row))?;
                        n += 1;
                    }
                    send(&mut w, b'C', format!("SELECT {n}\0").as_bytes())?;
                }
                Err(message) => {
                    let mut e = Vec::new();
                    for (field, value) in [(b'S', "ERROR"), (b'C', "XX000"), (b'M', &message)] {
                        e.push(field);
                        e.extend_from_slice(value.as_bytes());
                        e.push(0);
                    }
                    e.push(0);
                    send(&mut w, b'E', &e)?;
                    failed = true;
                }
            },
            b'C' => send(&mut w, b'3', &[])?,
            b'S' => {
                failed = false;
                ready(&mut w)?;
                w.flush()?;
            }
            b'H' => w.flush()?,
            b'X' => return Ok(()),
            other => panic!("the fake server does not know message {:?}", other as char),
        }
    }
}

fn row_description(types: &[u32]) -> Vec<u8> {
    let mut b = (types.len() as i16).to_be_bytes().to_vec();
    for (i, oid) in types.iter().enumerate() {
        b.extend_from_slice(format!("c{i}\0").as_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&oid.to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
    }
    b
}

fn data_row(values: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut b = (values.len() as i16).to_be_bytes().to_vec();
    for v in values {
        match v {
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v);
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b
}

#[test]
fn the_fake_server_is_imported_from_when_it_tells_the_truth() {
    // The control: the lies below are refused for the lie, not for the fake.
    let fake = FakePg::start(Lie::Honest);
    let dir = tempfile::tempdir().unwrap();
    let o = import(&fake.url(), dir.path(), &["--batch-size", "2"]);
    assert_eq!(o.code, Some(0), "{}", o.said);
    assert!(o.said.contains("documents  3 -> 3  ok"), "{}", o.said);
}

#[test]
fn a_server_that_lies_is_refused_not_believed() {
    for (lie, why) in [
        // A panic (`Row::get` on a NULL).
        (
            Lie::NullCount,
            "checking the documents: the server answered None, not a count",
        ),
        // Rows read into memory without end.
        (
            Lie::EndlessRows,
            "the server sent more than the 2 rows asked for",
        ),
        // The same batch copied again and again.
        (
            Lie::IgnoredResume,
            "the server sent document \"1\" where one after \"2\" was asked for",
        ),
        // Batches without end.
        (
            Lie::MoreThanCounted,
            "the server sent more than the 3 documents it counted",
        ),
        // A vector of 2^31 components allocated on the header's word.
        (Lie::HugeArrayHeader, "2147483647 components, over the 4096"),
        (
            Lie::HugeMetadata,
            "document \"2\": its metadata: 2097154 bytes, over the 1048576 allowed",
        ),
        (
            Lie::HugeTime,
            "document \"2\": its embedding's time: 1048576 bytes, over the 256 allowed",
        ),
        // The server's words reached the terminal unescaped.
        (Lie::EscapesInError, "\\u{1b}[2J\\u{1b}[Hresult     OK"),
    ] {
        let fake = FakePg::start(lie);
        let dir = tempfile::tempdir().unwrap();
        let o = import(&fake.url(), dir.path(), &["--batch-size", "2"]);
        // A lie found in a later batch comes after earlier batches were committed (each batch
        // is a transaction): the import stops there.
        assert_refused(&o, why);
    }
}
