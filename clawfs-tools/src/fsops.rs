//! File operations under the tools: bounded reads, streaming hashes, atomic replacement
//! (temp + fsync + rename + directory fsync), timestamped backups, and time formatting.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::error::{ToolError, ToolResult};
use crate::paths::show;
use crate::ToolRoot;

/// Opens a file for reading without following a symlink in the last component (the path was
/// resolved already; a link appearing now is a race and is refused).
pub(crate) fn open_read(abs: &Path, rel: &str) -> ToolResult<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(abs)
        .map_err(|e| ToolError::io(format!("opening '{}'", show(rel)), e))
}

/// Reads a whole file of at most `max` bytes.
pub(crate) fn read_limited(abs: &Path, rel: &str, max: u64) -> ToolResult<Vec<u8>> {
    let f = open_read(abs, rel)?;
    let len = f
        .metadata()
        .map_err(|e| ToolError::io(format!("reading '{}'", show(rel)), e))?
        .len();
    if len > max {
        return Err(ToolError::TooLarge(format!(
            "'{}' is {len} bytes; text tools load at most {max} bytes. Use info, then outline/search with read_range on a smaller file, or split the file.",
            show(rel)
        )));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::io(format!("reading '{}'", show(rel)), e))?;
    if buf.len() as u64 > max {
        return Err(ToolError::TooLarge(format!(
            "'{}' grew beyond {max} bytes while being read.",
            show(rel)
        )));
    }
    Ok(buf)
}

/// Lowercase hex sha256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Streams a file once: `(bytes, lines, sha256)`. Lines count like an editor: a last line
/// without a trailing newline counts.
pub(crate) fn stream_info(abs: &Path, rel: &str) -> ToolResult<(u64, u64, String)> {
    let mut f = open_read(abs, rel)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let (mut bytes, mut newlines, mut last) = (0u64, 0u64, b'\n');
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ToolError::io(format!("reading '{}'", show(rel)), e)),
        };
        h.update(&buf[..n]);
        bytes += n as u64;
        newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    let lines = newlines + u64::from(bytes > 0 && last != b'\n');
    Ok((bytes, lines, hex::encode(h.finalize())))
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces (or creates) `abs` with `bytes` atomically: a reader sees the old or the new content,
/// never a mix, and after return the new content is durable. Keeps the old file's permissions.
pub(crate) fn atomic_write(
    root: &ToolRoot,
    abs: &Path,
    rel: &str,
    bytes: &[u8],
    old: Option<&Metadata>,
) -> ToolResult<()> {
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let ctx = || format!("writing '{}'", show(rel));
    let (tmp, mut f) = loop {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".clawfs-tmp-{}-{n}", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(root.file_mode())
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ToolError::io(ctx(), e)),
        }
    };
    let result = (|| {
        f.write_all(bytes)?;
        if let Some(m) = old {
            f.set_permissions(m.permissions())?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, abs)?;
        sync_dir(dir)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(ToolError::io(ctx(), e));
    }
    root.changed(abs);
    Ok(())
}

/// fsyncs a directory so a rename or create in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `YYYYmmdd-HHMMSS` in UTC, for backup and trash names.
pub(crate) fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string()
}

/// RFC 3339 UTC of a system time.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Shows a path under the backup or trash directory: workspace-relative when inside the root
/// (then under a protected name), else relative to its own directory with a label.
pub(crate) fn show_store_path(root: &ToolRoot, base: &Path, p: &Path, label: &str) -> String {
    if let Ok(r) = p.strip_prefix(root.root()) {
        return r.to_string_lossy().into_owned();
    }
    match p.strip_prefix(base) {
        Ok(r) => format!("<{label}>/{}", r.to_string_lossy()),
        Err(_) => p.to_string_lossy().into_owned(),
    }
}

/// Writes a timestamped copy of `bytes` (the file's content before an edit) into the backup
/// directory, mirroring the file's workspace path. Returns the backup's shown path.
pub(crate) fn backup(root: &ToolRoot, rel: &str, bytes: &[u8]) -> ToolResult<String> {
    let ctx = |e| ToolError::io(format!("writing the backup of '{}'", show(rel)), e);
    let target: PathBuf = root.backup_dir.join(rel);
    let dir = target.parent().unwrap_or(&root.backup_dir).to_path_buf();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(ctx)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let base = format!("{name}.bak.{}", stamp());
    let mut n = 1;
    loop {
        let cand = if n == 1 {
            dir.join(&base)
        } else {
            dir.join(format!("{base}-{n}"))
        };
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&cand)
        {
            Ok(mut f) => {
                f.write_all(bytes).map_err(ctx)?;
                f.sync_all().map_err(ctx)?;
                return Ok(show_store_path(root, &root.backup_dir, &cand, "backups"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => n += 1,
            Err(e) => return Err(ctx(e)),
        }
    }
}

/// Creates the missing folders of `abs`'s parent chain, refusing if a part is a file.
pub(crate) fn create_parents(root: &ToolRoot, abs: &Path, rel: &str) -> ToolResult<()> {
    match abs.parent() {
        Some(parent) => create_dirs(root, parent, rel),
        None => Ok(()),
    }
}

/// Creates `dir` and its missing parents with the caller's folder mode, and reports the
/// topmost one created.
pub(crate) fn create_dirs(root: &ToolRoot, dir: &Path, rel: &str) -> ToolResult<()> {
    let topmost_new = dir
        .ancestors()
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .last()
        .map(Path::to_path_buf);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(root.dir_mode())
        .create(dir)
        .map_err(|e| ToolError::io(format!("creating the folders for '{}'", show(rel)), e))?;
    if let Some(t) = topmost_new {
        root.changed(&t);
    }
    Ok(())
}
