//! The snapshot file: a SQLite database in the SQLite Archive layout (`sqlar`, so `sqlite3 -A`
//! lists and extracts it), plus ClawFS's own tables: what the snapshot is, each entry's owner
//! and exact modification time, and a copy of the workspace's search index.

use std::io::{Read, Write};
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::SnapshotError;

/// The layout version in `clawfs_snapshot`.
pub const FORMAT: &str = "clawfs-snapshot-1";

const SCHEMA: &str = "
CREATE TABLE sqlar(name TEXT PRIMARY KEY, mode INT, mtime INT, sz INT, data BLOB);
CREATE TABLE clawfs_snapshot(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE clawfs_owners(
    name TEXT PRIMARY KEY, uid INTEGER NOT NULL, gid INTEGER NOT NULL, mtime_ns INTEGER NOT NULL);
";

/// File type bits of `st_mode`, as sqlar stores them.
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// What one archive entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A folder.
    Dir,
    /// A regular file's bytes.
    File(Vec<u8>),
    /// A symlink's target.
    Symlink(String),
}

/// One entry read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Path in the workspace.
    pub name: String,
    /// Permission bits.
    pub mode: u32,
    /// Owner and group (the workspace's default when the archive names none).
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// What it is.
    pub content: Content,
}

/// An entry as the archive stores it: packing (compressing) is most of a snapshot's work, so
/// entries are packed on several threads and written in order on one.
#[derive(Debug)]
pub struct Packed {
    name: String,
    /// File type and permission bits.
    mode: u32,
    /// The original length (-1 for a symlink).
    sz: i64,
    data: Option<Vec<u8>>,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
}

/// Files from this size on are first compressed on a sample of [`SAMPLE`] bytes: data that does
/// not shrink there (media, archives, encrypted files) is stored as is without compressing the
/// rest of it. (`sqlite3 -A` compresses every file whole; both read either.)
const SAMPLE_FROM: usize = 1 << 20;
const SAMPLE: usize = 64 << 10;

/// `item` as the archive stores it: a file's bytes zlib-compressed when that makes them
/// smaller, as `sqlite3 -A` does (`sz` then differs from the stored length).
pub fn pack(item: Item) -> Result<Packed, SnapshotError> {
    let (kind, sz, data) = match item.content {
        Content::Dir => (S_IFDIR, 0, None),
        Content::Symlink(t) => (S_IFLNK, -1, Some(t.into_bytes())),
        Content::File(bytes) => (S_IFREG, bytes.len() as i64, Some(compressed(bytes)?)),
    };
    Ok(Packed {
        name: item.name,
        mode: kind | (item.mode & 0o7777),
        sz,
        data,
        uid: item.uid,
        gid: item.gid,
        mtime_ns: item.mtime_ns,
    })
}

fn compressed(bytes: Vec<u8>) -> Result<Vec<u8>, SnapshotError> {
    let zlib = |b: &[u8]| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b)
            .and_then(|()| z.finish())
            .map_err(|e| SnapshotError::io("compressing", e))
    };
    if bytes.len() >= SAMPLE_FROM && zlib(&bytes[..SAMPLE])?.len() >= SAMPLE / 100 * 95 {
        return Ok(bytes);
    }
    let packed = zlib(&bytes)?;
    Ok(match packed.len() < bytes.len() {
        true => packed,
        false => bytes,
    })
}

/// A snapshot file being written.
pub struct Writer {
    conn: Connection,
}

impl Writer {
    /// Starts the archive in the (new, empty) database at `path`.
    pub fn create(path: &str) -> Result<Writer, SnapshotError> {
        let conn = Connection::open(path)?;
        // One self-contained file: no WAL beside it.
        conn.pragma_update(None, "journal_mode", "DELETE")?;
        conn.execute_batch("BEGIN;")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Writer { conn })
    }

    /// Records `key = value` about the snapshot.
    pub fn set_info(&self, key: &str, value: &str) -> Result<(), SnapshotError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO clawfs_snapshot (key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
        Ok(())
    }

    /// Adds one entry, packed by [`pack`].
    pub fn add(&self, entry: &Packed) -> Result<(), SnapshotError> {
        self.conn.execute(
            "INSERT INTO sqlar (name, mode, mtime, sz, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                entry.name,
                entry.mode,
                entry.mtime_ns.div_euclid(1_000_000_000),
                entry.sz,
                entry.data
            ],
        )?;
        self.conn.execute(
            "INSERT INTO clawfs_owners (name, uid, gid, mtime_ns) VALUES (?1, ?2, ?3, ?4)",
            params![entry.name, entry.uid, entry.gid, entry.mtime_ns],
        )?;
        Ok(())
    }

    /// Copies the workspace's search index (the database at `index_db`, read in one
    /// transaction) into `index_*` tables; the text stays searchable with FTS5.
    pub fn add_index(&self, index_db: &Path) -> Result<(), SnapshotError> {
        Ok(crate::index::copy_index(
            &self.conn, index_db, "index_", None,
        )?)
    }

    /// Commits and closes the file.
    pub fn finish(self) -> Result<(), SnapshotError> {
        self.conn.execute_batch("COMMIT;")?;
        self.conn.close().map_err(|(_, e)| SnapshotError::Db(e))?;
        Ok(())
    }
}

/// A snapshot file opened read-only.
pub struct Reader {
    conn: Connection,
}

impl Reader {
    /// Opens the snapshot at `path` (read-only) and checks it is one.
    pub fn open(path: &str) -> Result<Reader, SnapshotError> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let format: Option<String> = conn
            .query_row(
                "SELECT value FROM clawfs_snapshot WHERE key = 'format'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|_| SnapshotError::NotASnapshot(path.to_string()))?;
        if format.as_deref() != Some(FORMAT) {
            return Err(SnapshotError::NotASnapshot(path.to_string()));
        }
        let tables: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('sqlar', 'clawfs_owners')",
            [],
            |r| r.get(0),
        )?;
        if tables != 2 {
            return Err(SnapshotError::Corrupt(
                "its sqlar or clawfs_owners table is missing".into(),
            ));
        }
        Ok(Reader { conn })
    }

    /// A value recorded about the snapshot.
    pub fn info(&self, key: &str) -> Result<Option<String>, SnapshotError> {
        Ok(self
            .conn
            .query_row(
                "SELECT value FROM clawfs_snapshot WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Calls `each` with every entry, folders before what they hold. Entries whose names could
    /// lead outside the workspace (absolute, `..`, empty parts) are refused.
    pub fn each(
        &self,
        each: &mut dyn FnMut(Item) -> Result<(), SnapshotError>,
    ) -> Result<(), SnapshotError> {
        let mut st = self.conn.prepare(
            "SELECT s.name, s.mode, s.mtime, s.sz, s.data, o.uid, o.gid, o.mtime_ns
             FROM sqlar s LEFT JOIN clawfs_owners o ON o.name = s.name ORDER BY s.name",
        )?;
        let mut rows = st.query([])?;
        let mut previous: Option<String> = None;
        while let Some(r) = rows.next()? {
            let name: String = r.get(0)?;
            // In name order, a name given twice comes twice in a row.
            if previous.as_deref() == Some(name.as_str()) {
                return Err(SnapshotError::Corrupt(format!("{name:?} is given twice")));
            }
            if name.is_empty()
                || name.starts_with('/')
                || name
                    .split('/')
                    .any(|p| p.is_empty() || p == "." || p == "..")
            {
                return Err(SnapshotError::Corrupt(format!("entry name {name:?}")));
            }
            let mode: u32 = r.get(1)?;
            let mtime: i64 = r.get(2)?;
            let sz: i64 = r.get(3)?;
            let data: Option<Vec<u8>> = r.get(4)?;
            let content = match mode & S_IFMT {
                S_IFDIR => Content::Dir,
                S_IFLNK => Content::Symlink(
                    String::from_utf8(data.unwrap_or_default())
                        .map_err(|_| SnapshotError::Corrupt(format!("{name}: symlink target")))?,
                ),
                S_IFREG => Content::File(unpack(&name, data.unwrap_or_default(), sz)?),
                _ => continue,
            };
            previous = Some(name.clone());
            each(Item {
                name,
                mode: mode & 0o7777,
                uid: r.get::<_, Option<u32>>(5)?.unwrap_or(0),
                gid: r.get::<_, Option<u32>>(6)?.unwrap_or(0),
                mtime_ns: r.get::<_, Option<i64>>(7)?.unwrap_or(mtime * 1_000_000_000),
                content,
            })?;
        }
        Ok(())
    }

    /// Regular files and their total size.
    pub fn totals(&self) -> Result<(u64, u64), SnapshotError> {
        Ok(self.conn.query_row(
            "SELECT count(*), coalesce(sum(sz), 0) FROM sqlar WHERE mode & ?1 = ?2",
            params![S_IFMT, S_IFREG],
            |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
        )?)
    }
}

/// The most a zlib stream expands: 1032 to 1 is deflate's limit; a size claimed beyond it
/// cannot be the stored data's.
const MAX_EXPANSION: u64 = 1100;

/// A file's bytes from `data`: stored as is when its length is `sz`, else zlib-compressed.
/// `sz` comes from the archive, so it is believed only as far as `data` can hold it: a size no
/// snapshot writes, or more than the stored bytes could inflate to, is damage, not a request to
/// allocate.
fn unpack(name: &str, data: Vec<u8>, sz: i64) -> Result<Vec<u8>, SnapshotError> {
    let damaged =
        || SnapshotError::Corrupt(format!("{name}: size {sz}, {} bytes stored", data.len()));
    let Ok(size) = u64::try_from(sz) else {
        return Err(damaged());
    };
    if data.len() as u64 == size {
        return Ok(data);
    }
    if size > super::MAX_FILE_BYTES || size > (data.len() as u64).saturating_mul(MAX_EXPANSION) {
        return Err(damaged());
    }
    let mut out = Vec::with_capacity(size as usize);
    flate2::read::ZlibDecoder::new(&data[..])
        .take(size + 1)
        .read_to_end(&mut out)
        .map_err(|e| SnapshotError::Corrupt(format!("{name}: {e}")))?;
    if out.len() as u64 != size {
        return Err(SnapshotError::Corrupt(format!(
            "{name}: {} bytes, the archive says {sz}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: Vec<u8>) -> Item {
        Item {
            name: "f".into(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            content: Content::File(bytes),
        }
    }

    /// Text is compressed, random bytes are stored as they are (decided on a sample), and
    /// both read back whole.
    #[test]
    fn packs_what_shrinks_and_reads_both_back() {
        let text: Vec<u8> = (0..SAMPLE_FROM * 2)
            .map(|i| b"the river bridge flood\n"[i % 23])
            .collect();
        let mut random = vec![0u8; SAMPLE_FROM * 2];
        getrandom::fill(&mut random).unwrap();
        for (bytes, shrinks) in [(text, true), (random, false)] {
            let p = pack(file(bytes.clone())).unwrap();
            let data = p.data.unwrap();
            assert_eq!(data.len() < bytes.len(), shrinks);
            assert_eq!(p.sz, bytes.len() as i64);
            assert_eq!(unpack("f", data, p.sz).unwrap(), bytes);
        }
    }
}
