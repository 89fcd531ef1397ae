//! Writes of `agents/<name>/identity.json` are staged: the writer works on a private copy, and
//! closing it validates the document (JSON, P1.4 §5.3 schema, the right agent), stamps
//! `updated_at` and the checksum, keeps the previous version in `agents/<name>/backups/`, and
//! replaces the file atomically. A document that does not validate is refused (`close()` fails
//! with EINVAL, the reason goes to the denials file and the log) and the old version stays.

use clawfs_store::ToErrno;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::OFlags;
use std::sync::Arc;

use serde_json::Value;

use super::ClawFs;
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::open_files::{BackingFile, OpenFile, StagedTarget};
use clawfs_policy::{AgentName, Identity, NsPath};

/// The largest identity document accepted.
pub const MAX_IDENTITY_BYTES: u64 = 1 << 20;

/// The agent whose `identity.json` `path` is, if it is one.
pub fn identity_file_agent(path: &NsPath) -> Option<&str> {
    (path.depth() == 3 && path.get(0) == Some("agents") && path.get(2) == Some("identity.json"))
        .then(|| path.get(1))
        .flatten()
}

/// Why an identity document is refused (P1.4 §5.3).
#[derive(Debug, thiserror::Error)]
pub enum InvalidIdentity {
    /// Not JSON.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but not an object.
    #[error("the document must be a JSON object")]
    NotAnObject,
    /// `agent_id` names another agent.
    #[error("agent_id is {found:?}; this file belongs to {agent:?}")]
    OtherAgent {
        /// The `agent_id` written.
        found: String,
        /// The agent whose file it is.
        agent: String,
    },
    /// A field that must be there is missing or of the wrong type.
    #[error("{0}")]
    Field(&'static str),
}

/// Validates an identity document for `agent` (P1.4 §5.3).
pub fn validate(agent: &str, bytes: &[u8]) -> Result<Value, InvalidIdentity> {
    let doc: Value = serde_json::from_slice(bytes)?;
    let obj = doc.as_object().ok_or(InvalidIdentity::NotAnObject)?;
    match obj.get("agent_id").and_then(Value::as_str) {
        Some(a) if a == agent => {}
        Some(a) => {
            return Err(InvalidIdentity::OtherAgent {
                found: a.to_string(),
                agent: agent.to_string(),
            })
        }
        None => return Err(InvalidIdentity::Field("agent_id (a string) is missing")),
    }
    let version = obj.get("version").and_then(Value::as_u64);
    if version.is_none_or(|n| n < 1) {
        return Err(InvalidIdentity::Field(
            "version must be a whole number >= 1",
        ));
    }
    if !obj.get("created_at").is_some_and(Value::is_string) {
        return Err(InvalidIdentity::Field(
            "created_at (an RFC 3339 string) is missing",
        ));
    }
    for (section, why) in [
        ("state", "state must be an object"),
        ("memory", "memory must be an object"),
        ("history", "history must be an object"),
        ("performance", "performance must be an object"),
    ] {
        if !obj.get(section).is_some_and(Value::is_object) {
            return Err(InvalidIdentity::Field(why));
        }
    }
    Ok(doc)
}

impl ClawFs {
    /// Opens a private copy of an identity file for writing.
    pub(super) fn open_staged(
        &self,
        ino: u64,
        node_fd: &std::os::fd::OwnedFd,
        agent: &str,
        truncate: bool,
        charge: crate::descriptors::Charge,
    ) -> FsResult<(u64, Arc<OpenFile>)> {
        let staging = clawfs_store::beneath::create_dir_all(
            self.store.root_fd(),
            &self.store.host_rel().join("staging"),
            0o700,
            None,
        )?;
        let mut copy = File::from(rustix::fs::openat(
            &staging,
            ".",
            OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?);
        if !truncate {
            // Through the node's own descriptor: the file the caller opened, whatever its name.
            let proc = clawfs_store::backing::proc_fd_path(node_fd);
            let mut current = File::from(rustix::fs::open(
                proc.as_c_str(),
                OFlags::RDONLY | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?);
            std::io::copy(&mut current, &mut copy)?;
        }
        let dir = Path::new("agents").join(agent);
        Ok(self.files.insert(OpenFile {
            ino,
            // A private copy: nobody's charge (the identity file is counted when committed).
            held: Default::default(),
            backing: Arc::new(BackingFile::new(copy)),
            writer: None,
            io: None,
            exec: None,
            writing: None,
            charge,
            staged: Some(StagedTarget {
                agent: agent.to_string(),
                dir,
                dirty: Default::default(),
            }),
        }))
    }

    /// Commits a staged identity write at `close()`, on the audit trail as `identity:commit`
    /// (a refusal is recorded where it is decided).
    pub(super) fn commit_staged(&self, caller: &Caller, file: &OpenFile) -> FsResult<()> {
        let Some(target) = &file.staged else {
            return Ok(());
        };
        let result = self.commit_staged_file(caller, file, target);
        let ev = || {
            clawfs_audit::AuditEvent::new(
                super::audit_name(&self.identify(caller)),
                caller.pid,
                "identity:commit",
                format!("/agents/{}/identity.json", target.agent),
            )
        };
        match &result {
            Ok(true) => self.record(ev()),
            Err(e @ FsError::Io(_)) => self.record(ev().failed(e.errno()).reason(e.to_string())),
            _ => {}
        }
        result.map(|_| ())
    }

    /// Validates and commits; `Ok(false)` when there was nothing to commit.
    fn commit_staged_file(
        &self,
        caller: &Caller,
        file: &OpenFile,
        target: &StagedTarget,
    ) -> FsResult<bool> {
        if !target
            .dirty
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(false);
        }
        // An agent stopped (`clawfs estop`) with the file open: its close, when it is killed,
        // commits nothing; nor does the close of its descriptor by anyone it handed it to.
        // Only an admin writes another's identity file: anyone else closing one holds a
        // descriptor of the agent's, and acts for it.
        let acting = match self.identify(caller) {
            Identity::Admin => Identity::Admin,
            _ => Identity::Agent(AgentName::new(&target.agent)?),
        };
        if let Err(denial) = self.estop_check(&acting) {
            let path = NsPath::parse(&format!("/agents/{}/identity.json", target.agent))?;
            return self.refuse(caller, "write", &path, denial).map(|()| false);
        }
        let mut f = &file.backing.file;
        if f.metadata()?.len() > MAX_IDENTITY_BYTES {
            return self
                .refuse_identity(caller, target, "the document is larger than 1 MiB")
                .map(|()| false);
        }
        let mut bytes = Vec::new();
        f.seek(SeekFrom::Start(0))?;
        f.read_to_end(&mut bytes)?;
        let mut doc = match validate(&target.agent, &bytes) {
            Ok(d) => d,
            Err(reason) => {
                return self
                    .refuse_identity(caller, target, &reason.to_string())
                    .map(|()| false)
            }
        };
        doc["updated_at"] = Value::String(clawfs_store::clock::now_rfc3339());
        doc["checksum"] = Value::String(crate::identity::checksum(&doc));
        let mut out = serde_json::to_vec_pretty(&doc).expect("a Value serialises");
        out.push(b'\n');
        // The agent's directory is writable by the agent: every step by descriptor, no
        // symlink followed, so a planted link never redirects these root writes.
        let dir = clawfs_store::beneath::open_dir(self.store.root_fd(), &target.dir)?;
        let current = clawfs_store::beneath::open(
            dir.as_fd(),
            Path::new("identity.json"),
            OFlags::RDONLY,
            0,
        )?;
        let st = rustix::fs::fstat(&current)?;
        let mut old = Vec::new();
        File::from(current)
            .take(MAX_IDENTITY_BYTES)
            .read_to_end(&mut old)?;
        let who = self.identify(caller);
        if self.metered(&who) {
            let path = NsPath::parse(&format!("/agents/{}/identity.json", target.agent))?;
            let growth = (out.len() as u64).saturating_sub(old.len() as u64);
            let adding = clawfs_policy::Quota {
                bytes: growth,
                files: 0,
            };
            self.decide_quota(caller, &who, "write", &path, adding)?;
        }
        let backups =
            clawfs_store::beneath::create_dir_all(dir.as_fd(), Path::new("backups"), 0o750, None)?;
        prune_backups(backups.as_fd())?;
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
        let owner = Some((st.st_uid, st.st_gid));
        let keep = clawfs_store::beneath::FileMode {
            mode: st.st_mode & 0o777,
            owner,
        };
        clawfs_store::beneath::write_atomic(
            backups.as_fd(),
            &format!("identity-{stamp}.json"),
            &old,
            keep,
        )?;
        clawfs_store::beneath::write_atomic(dir.as_fd(), "identity.json", &out, keep)?;
        let current = self.store.root().join(&target.dir).join("identity.json");
        self.invalidate_paths(&[current]);
        Ok(true)
    }

    fn refuse_identity(
        &self,
        caller: &Caller,
        target: &StagedTarget,
        reason: &str,
    ) -> FsResult<()> {
        let path = NsPath::parse(&format!("/agents/{}/identity.json", target.agent))?;
        let denial = clawfs_policy::Denial {
            rule: "IDENTITY-SCHEMA",
            reason: format!("identity.json was not saved: {reason}; the previous version stays"),
            // EINVAL, for the writer and on the record: the content, not its right, is wrong.
            kind: clawfs_policy::DenyKind::Invalid,
        };
        self.refuse(caller, "write", &path, denial)
    }
}

/// Identity backups kept per agent: the newest, so that rewriting the file in a loop cannot
/// fill the disk with root-written copies.
pub const KEPT_BACKUPS: usize = 16;

/// Removes the oldest `identity-*.json` backups so that, with the one about to be written,
/// [`KEPT_BACKUPS`] remain.
fn prune_backups(dir: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let mut names: Vec<String> = rustix::fs::Dir::read_from(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| n.starts_with("identity-") && n.ends_with(".json"))
        .collect();
    names.sort(); // the stamps sort by time
    let excess = (names.len() + 1).saturating_sub(KEPT_BACKUPS);
    for name in &names[..excess] {
        rustix::fs::unlinkat(dir, name.as_str(), rustix::fs::AtFlags::empty())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_documents_are_validated() {
        let good = crate::identity::new_identity("fs-engine", "2026-01-01T00:00:00Z");
        assert!(validate("fs-engine", good.to_string().as_bytes()).is_ok());
        assert!(matches!(
            validate("kernel-engine", good.to_string().as_bytes()),
            Err(InvalidIdentity::OtherAgent { .. })
        ));
        assert!(matches!(
            validate("fs-engine", b"{not json"),
            Err(InvalidIdentity::Json(_))
        ));
        let mut no_state = good.clone();
        no_state.as_object_mut().unwrap().remove("state");
        assert!(validate("fs-engine", no_state.to_string().as_bytes()).is_err());
        let mut bad_version = good;
        bad_version["version"] = Value::from("one");
        assert!(validate("fs-engine", bad_version.to_string().as_bytes()).is_err());
    }

    #[test]
    fn identity_paths() {
        let p = NsPath::parse("/agents/fs-engine/identity.json").unwrap();
        assert_eq!(identity_file_agent(&p), Some("fs-engine"));
        let q = NsPath::parse("/workspaces/default/identity.json").unwrap();
        assert_eq!(identity_file_agent(&q), None);
    }
}
