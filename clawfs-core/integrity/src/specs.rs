//! `specs/`: frozen documents and `specs/signatures.json`. A document is served only if its
//! SHA-256 matches its entry and, once the store has trusted signers, its entry carries valid
//! Ed25519 signatures: one for a first version, two by different signers for a changed one
//! (RULE-003). Drafts are served if their bytes match what was added.
//!
//! The daemon checks through [`SpecChecker`]; the admin commands (`clawfs specs ...`) change
//! the documents through [`SpecBook`].

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use base64::Engine as _;
use ed25519_dalek::SigningKey;
use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};

use super::signers::{self, Signers, SIGNERS_FILE};
use super::{sha256_fd, IntegrityError, Verdict};
use clawfs_store::beneath::{self, FileMode};

/// The signatures file, relative to `specs/`.
pub const SIGNATURES: &str = "signatures.json";

/// `specs/`, relative to the store root.
const SPECS: &str = "specs";

/// Where a changed document's earlier versions are kept, relative to `specs/`.
const HISTORY: &str = "history";

/// Where proposed changes wait for their approvals, relative to the store root (root's private
/// area: not visible through the mount).
const PROPOSALS: &str = ".clawfs/spec-proposals";

/// How many different signers must approve a change to a frozen document (RULE-003).
pub const APPROVALS_FOR_CHANGE: usize = 2;

/// `specs/signatures.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignatureBook {
    /// Format version (1).
    pub version: u32,
    /// One entry per document version.
    pub signatures: Vec<SpecEntry>,
}

/// Where a document stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Added, not yet frozen: served if its bytes match.
    Draft,
    /// Frozen: served if its bytes match and its signatures hold.
    Frozen,
    /// An earlier version of a changed document, kept under `specs/history/`.
    Superseded,
}

/// One document version (P1.4 signature schema, plus `path`, `version` and `ed25519`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpecEntry {
    /// The document's id, e.g. `P1.4-clawfs-spec`.
    pub spec_id: String,
    /// Where it is, relative to `specs/`.
    pub path: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
    /// Who signed (signers joined by ", "), or who recorded the hash.
    pub signed_by: String,
    /// When (RFC 3339).
    pub signed_at: String,
    /// Draft, frozen or superseded.
    pub status: Status,
    /// 1 for the first frozen text, then one more per approved change.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The Ed25519 signatures of [`message`] for this entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ed25519: Vec<Approval>,
    /// Where a superseded version is kept, relative to `specs/` (`history/<id>/v<N>.<ext>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_at: Option<String>,
}

impl SpecEntry {
    /// Where the entry's bytes are, relative to `specs/`.
    pub fn served_at(&self) -> &str {
        match (&self.status, &self.kept_at) {
            (Status::Superseded, Some(k)) => k,
            _ => &self.path,
        }
    }
}

fn first_version() -> u32 {
    1
}

/// One signer's signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// A name of `system/signers.json`.
    pub signer: String,
    /// When (RFC 3339).
    pub signed_at: String,
    /// Base64 Ed25519 signature of [`message`].
    pub signature: String,
}

/// What a signature signs: the document's id, version, path (where it was frozen) and SHA-256.
/// An earlier version moved under `history/` keeps its `path` and its signatures; where it is
/// kept follows from the id and version ([`history_path`]).
pub fn message(spec_id: &str, version: u32, path: &str, sha256: &str) -> Vec<u8> {
    format!(
        "clawfs-spec-signature-v2\nspec_id={spec_id}\nversion={version}\npath={path}\nsha256={sha256}\n"
    )
    .into_bytes()
}

impl SpecEntry {
    /// Whether the entry's signatures hold: none needed while the store trusts no signer;
    /// otherwise one valid signature for version 1 and [`APPROVALS_FOR_CHANGE`] by different
    /// signers for a later version. Drafts need none.
    pub fn check_signatures(&self, signers: &Signers) -> Result<(), IntegrityError> {
        if self.status == Status::Draft {
            return Ok(());
        }
        let msg = message(&self.spec_id, self.version, &self.path, &self.sha256);
        let mut distinct: Vec<&str> = Vec::new();
        for a in &self.ed25519 {
            signers.verify(&a.signer, &msg, &a.signature)?;
            if !distinct.contains(&a.signer.as_str()) {
                distinct.push(&a.signer);
            }
        }
        let needed = match (signers.is_empty(), self.version) {
            (true, _) => 0,
            (false, 1) => 1,
            (false, _) => APPROVALS_FOR_CHANGE,
        };
        if distinct.len() < needed {
            return Err(IntegrityError::Mismatch(format!(
                "{} (version {}) is signed by {} trusted signer(s); {needed} needed",
                self.spec_id,
                self.version,
                distinct.len()
            )));
        }
        Ok(())
    }
}

/// Reads `specs/signatures.json` beneath the store root `store`.
pub fn load_book(store: BorrowedFd<'_>) -> Result<SignatureBook, IntegrityError> {
    let rel = format!("{SPECS}/{SIGNATURES}");
    super::read_json(store, &rel)?.ok_or_else(|| {
        IntegrityError::Mismatch(format!("{rel} is missing: no document of specs/ is served"))
    })
}

/// Whether the document at `rel` under `specs/`, whose bytes hash to `sha256`, may be served.
fn verdict(
    book: &SignatureBook,
    signers: &Signers,
    rel: &str,
    sha256: &str,
) -> Result<(), IntegrityError> {
    let mut naming = book.signatures.iter().filter(|e| e.served_at() == rel);
    let entry = naming
        .next()
        .ok_or_else(|| IntegrityError::Mismatch(format!("{rel} is not signed in {SIGNATURES}")))?;
    if naming.next().is_some() {
        return Err(IntegrityError::Mismatch(format!(
            "more than one entry of {SIGNATURES} names {rel}: not served"
        )));
    }
    check_entry(book, entry, signers)?;
    if !signers.is_empty() && entry.status == Status::Draft {
        return Err(IntegrityError::Mismatch(format!(
            "{rel} is a draft: not served until frozen (`clawfs specs freeze {}`)",
            entry.spec_id
        )));
    }
    if sha256 != entry.sha256 {
        return Err(IntegrityError::Mismatch(format!(
            "{rel} has SHA-256 {sha256}, but {SIGNATURES} records {}: not served",
            entry.sha256
        )));
    }
    Ok(())
}

/// The rules an entry keeps besides its hash: its signatures hold; a superseded version is kept
/// where its id and version say; a frozen entry is its document's latest version; no two
/// entries of one document share a version (so an old version cannot be made current again
/// while its record is there).
fn check_entry(
    book: &SignatureBook,
    e: &SpecEntry,
    signers: &Signers,
) -> Result<(), IntegrityError> {
    e.check_signatures(signers)?;
    let same_id = || book.signatures.iter().filter(|o| o.spec_id == e.spec_id);
    if same_id().filter(|o| o.version == e.version).count() > 1 {
        return Err(IntegrityError::Mismatch(format!(
            "{} has more than one entry for version {}",
            e.spec_id, e.version
        )));
    }
    match e.status {
        Status::Superseded => {
            let expected = history_path(&e.path, &e.spec_id, e.version);
            if e.kept_at.as_deref() != Some(&expected) {
                return Err(IntegrityError::Mismatch(format!(
                    "{} version {} is superseded but not kept at specs/{expected}",
                    e.spec_id, e.version
                )));
            }
        }
        Status::Frozen => {
            if same_id().any(|o| o.version > e.version) {
                return Err(IntegrityError::Mismatch(format!(
                    "{} version {} is frozen, but a later version exists",
                    e.spec_id, e.version
                )));
            }
        }
        Status::Draft => {}
    }
    Ok(())
}

/// The daemon's check of documents: `signatures.json` and `signers.json` parsed once per change
/// of either.
#[derive(Default)]
pub struct SpecChecker(super::Indexed<(SignatureBook, Signers)>);

impl SpecChecker {
    /// Whether the document at `rel` (relative to `specs/`), whose bytes hash to `sha256`, may
    /// be served; `store` is the store root.
    pub fn check(&self, store: BorrowedFd<'_>, rel: &str, sha256: &str) -> Verdict {
        if rel == SIGNATURES {
            return Ok(());
        }
        self.0
            .get(
                store,
                [&format!("{SPECS}/{SIGNATURES}"), SIGNERS_FILE],
                || Ok((load_book(store)?, Signers::load(store)?)),
            )
            .and_then(|b| verdict(&b.0, &b.1, rel, sha256))
    }
}

/// The outcome of checking one entry, for `clawfs specs verify`.
#[derive(Debug, Clone, Serialize)]
pub struct EntryReport {
    /// The document's id.
    pub spec_id: String,
    /// Its version.
    pub version: u32,
    /// Where it is, relative to `specs/`.
    pub path: String,
    /// Draft, frozen or superseded.
    pub status: Status,
    /// Who signed.
    pub signed_by: Vec<String>,
    /// `None` when it holds; why not otherwise.
    pub problem: Option<String>,
}

/// A proposed change of a frozen document, waiting for its approvals.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Proposal {
    spec_id: String,
    version: u32,
    sha256: String,
    proposed_at: String,
    approvals: Vec<Approval>,
    /// The new text, base64.
    content: String,
}

/// What an approval did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approved {
    /// Recorded; this many more different signers must approve.
    Waiting(usize),
    /// Enough signers approved: the new version is frozen, the old one kept at `kept_at`.
    Frozen {
        /// The new version.
        version: u32,
        /// Where the old version now is, relative to `specs/`.
        kept_at: String,
    },
}

/// The documents of one store, changed by the admin commands. Every file is reached by
/// descriptor beneath the store root and replaced atomically.
pub struct SpecBook<'a> {
    store: BorrowedFd<'a>,
}

impl<'a> SpecBook<'a> {
    /// The documents of the store whose root is `store`.
    pub fn new(store: BorrowedFd<'a>) -> SpecBook<'a> {
        SpecBook { store }
    }

    /// Adds `content` as a draft `spec_id` at `rel` (relative to `specs/`).
    pub fn add(
        &self,
        spec_id: &str,
        rel: &str,
        content: &[u8],
        now: &str,
    ) -> Result<(), IntegrityError> {
        check_spec_id(spec_id)?;
        let rel = check_doc_path(rel)?;
        let mut book = load_book(self.store)?;
        if book.signatures.iter().any(|e| e.spec_id == spec_id) {
            return Err(IntegrityError::Refused(format!(
                "{spec_id} exists; a frozen document changes only by `clawfs specs propose`"
            )));
        }
        if book
            .signatures
            .iter()
            .any(|e| e.path == rel || e.served_at() == rel)
        {
            return Err(IntegrityError::Refused(format!(
                "specs/{rel} is another document's"
            )));
        }
        if beneath::open(self.store, &Path::new(SPECS).join(&rel), OFlags::PATH, 0).is_ok() {
            return Err(IntegrityError::Refused(format!("specs/{rel} exists")));
        }
        self.write_doc(&rel, content)?;
        book.signatures.push(SpecEntry {
            spec_id: spec_id.to_string(),
            path: rel,
            sha256: sha256_hex(content),
            signed_by: "clawfs specs add".to_string(),
            signed_at: now.to_string(),
            status: Status::Draft,
            version: 1,
            ed25519: Vec::new(),
            kept_at: None,
        });
        self.save_book(&book)
    }

    /// Freezes the draft `spec_id` (or signs a frozen entry that has only its hash), signed
    /// by `signer` with `key`. The document's bytes must still match what was added.
    pub fn freeze(
        &self,
        spec_id: &str,
        signer: &str,
        key: &SigningKey,
        now: &str,
    ) -> Result<u32, IntegrityError> {
        let mut book = load_book(self.store)?;
        let signers = Signers::load(self.store)?;
        signers.check_key(signer, key)?;
        let entry = current_mut(&mut book, spec_id)?;
        match (entry.status, entry.ed25519.is_empty()) {
            (Status::Draft, _) | (Status::Frozen, true) => {}
            _ => {
                return Err(IntegrityError::Refused(format!(
                    "{spec_id} is already frozen and signed; change it with `clawfs specs propose`"
                )))
            }
        }
        let actual = self.doc_sha256(&entry.path)?;
        if actual != entry.sha256 {
            return Err(IntegrityError::Mismatch(format!(
                "specs/{} has SHA-256 {actual}, but was recorded as {}: not frozen",
                entry.path, entry.sha256
            )));
        }
        entry.ed25519 = vec![Approval {
            signer: signer.to_string(),
            signed_at: now.to_string(),
            signature: signers::sign(
                key,
                &message(spec_id, entry.version, &entry.path, &entry.sha256),
            ),
        }];
        entry.status = Status::Frozen;
        entry.signed_by = signer.to_string();
        entry.signed_at = now.to_string();
        let version = entry.version;
        self.save_book(&book)?;
        Ok(version)
    }

    /// Signs, as `signer`, every frozen entry that has only its hash and still matches it
    /// (the first trusted signer does this, so that documents frozen before any key existed
    /// stay served). Returns the ids signed.
    pub fn sign_unsigned(
        &self,
        signer: &str,
        key: &SigningKey,
        now: &str,
    ) -> Result<Vec<String>, IntegrityError> {
        let book = load_book(self.store)?;
        let mut signed = Vec::new();
        for e in &book.signatures {
            if e.status == Status::Frozen
                && e.ed25519.is_empty()
                && self.doc_sha256(&e.path)? == e.sha256
            {
                signed.push(e.spec_id.clone());
            }
        }
        for id in &signed {
            self.freeze(id, signer, key, now)?;
        }
        Ok(signed)
    }

    /// Proposes `content` as the next version of the frozen `spec_id`.
    pub fn propose(&self, spec_id: &str, content: &[u8], now: &str) -> Result<u32, IntegrityError> {
        let mut book = load_book(self.store)?;
        let entry = current_mut(&mut book, spec_id)?;
        if entry.status != Status::Frozen {
            return Err(IntegrityError::Refused(format!(
                "{spec_id} is a draft: change its file and freeze it; proposals are for frozen documents"
            )));
        }
        let sha256 = sha256_hex(content);
        if sha256 == entry.sha256 {
            return Err(IntegrityError::Refused(format!(
                "the proposed text of {spec_id} is the frozen one"
            )));
        }
        let proposal = Proposal {
            spec_id: spec_id.to_string(),
            version: entry.version + 1,
            sha256,
            proposed_at: now.to_string(),
            approvals: Vec::new(),
            content: base64::engine::general_purpose::STANDARD.encode(content),
        };
        self.save_proposal(&proposal)?;
        Ok(proposal.version)
    }

    /// Approves the proposed change of `spec_id` as `signer`. Once [`APPROVALS_FOR_CHANGE`]
    /// different signers have, the new version is frozen and the old one kept.
    pub fn approve(
        &self,
        spec_id: &str,
        signer: &str,
        key: &SigningKey,
        now: &str,
    ) -> Result<Approved, IntegrityError> {
        check_spec_id(spec_id)?;
        let signers = Signers::load(self.store)?;
        signers.check_key(signer, key)?;
        let mut proposal = self.load_proposal(spec_id)?;
        if proposal.approvals.iter().any(|a| a.signer == signer) {
            return Err(IntegrityError::Refused(format!(
                "{signer} has already approved this change of {spec_id}; RULE-003 needs \
                 {APPROVALS_FOR_CHANGE} different signers"
            )));
        }
        let mut book = load_book(self.store)?;
        let path = current_mut(&mut book, spec_id)?.path.clone();
        let msg = message(spec_id, proposal.version, &path, &proposal.sha256);
        // Approvals already recorded must hold: the proposal file is not trusted.
        for a in &proposal.approvals {
            signers.verify(&a.signer, &msg, &a.signature).map_err(|e| {
                IntegrityError::Mismatch(format!(
                    "the proposal of {spec_id} holds an approval that does not verify ({e}): propose again"
                ))
            })?;
        }
        proposal.approvals.push(Approval {
            signer: signer.to_string(),
            signed_at: now.to_string(),
            signature: signers::sign(key, &msg),
        });
        if proposal.approvals.len() < APPROVALS_FOR_CHANGE {
            self.save_proposal(&proposal)?;
            return Ok(Approved::Waiting(
                APPROVALS_FOR_CHANGE - proposal.approvals.len(),
            ));
        }
        let content = base64::engine::general_purpose::STANDARD
            .decode(&proposal.content)
            .map_err(|_| {
                IntegrityError::Mismatch(format!("the proposal of {spec_id} is corrupt"))
            })?;
        if sha256_hex(&content) != proposal.sha256 {
            return Err(IntegrityError::Mismatch(format!(
                "the proposal of {spec_id} no longer matches its hash: not frozen"
            )));
        }
        let old = current_mut(&mut book, spec_id)?;
        if old.version + 1 != proposal.version {
            return Err(IntegrityError::Refused(format!(
                "{spec_id} changed since the proposal: propose again"
            )));
        }
        // The old version moves under history/ first: a crash leaves it there and the
        // signatures file still naming the old path, which `clawfs specs verify` reports.
        let kept_at = history_path(&old.path, spec_id, old.version);
        let new = SpecEntry {
            spec_id: spec_id.to_string(),
            path: old.path.clone(),
            sha256: proposal.sha256.clone(),
            signed_by: proposal
                .approvals
                .iter()
                .map(|a| a.signer.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            signed_at: now.to_string(),
            status: Status::Frozen,
            version: proposal.version,
            ed25519: proposal.approvals.clone(),
            kept_at: None,
        };
        let old_bytes = self.read_doc(&old.path)?;
        self.write_doc(&kept_at, &old_bytes)?;
        old.status = Status::Superseded;
        old.kept_at = Some(kept_at.clone());
        self.write_doc(&new.path, &content)?;
        book.signatures.push(new);
        self.save_book(&book)?;
        self.remove_proposal(spec_id)?;
        Ok(Approved::Frozen {
            version: proposal.version,
            kept_at,
        })
    }

    /// Checks every entry and every file of `specs/`: a file no entry names is reported too.
    pub fn verify(&self) -> Result<Vec<EntryReport>, IntegrityError> {
        let book = load_book(self.store)?;
        let signers = Signers::load(self.store)?;
        let mut out = Vec::new();
        for e in &book.signatures {
            let problem = match self.doc_sha256(e.served_at()) {
                Err(err) => Some(err.to_string()),
                Ok(actual) if actual != e.sha256 => Some(format!(
                    "SHA-256 {actual}, but {SIGNATURES} records {}",
                    e.sha256
                )),
                Ok(_) => check_entry(&book, e, &signers).err().map(|x| x.to_string()),
            };
            out.push(EntryReport {
                spec_id: e.spec_id.clone(),
                version: e.version,
                path: e.served_at().to_string(),
                status: e.status,
                signed_by: e.ed25519.iter().map(|a| a.signer.clone()).collect(),
                problem,
            });
        }
        let mut files = Vec::new();
        super::walk(self.store, SPECS, 16, &mut |rel, _| {
            files.push(rel.to_string());
            Ok(())
        })?;
        for f in files {
            if f != SIGNATURES && !book.signatures.iter().any(|e| e.served_at() == f) {
                out.push(EntryReport {
                    spec_id: String::new(),
                    version: 0,
                    path: f.clone(),
                    status: Status::Draft,
                    signed_by: Vec::new(),
                    problem: Some(format!("not in {SIGNATURES}: never served")),
                });
            }
        }
        Ok(out)
    }

    fn doc_sha256(&self, rel: &str) -> Result<String, IntegrityError> {
        let what = format!("{SPECS}/{rel}");
        let fd = beneath::open_file(self.store, &Path::new(SPECS).join(rel), OFlags::RDONLY)
            .map_err(IntegrityError::io(&what))?;
        sha256_fd(fd.as_fd()).map_err(IntegrityError::io(what))
    }

    fn read_doc(&self, rel: &str) -> Result<Vec<u8>, IntegrityError> {
        let what = format!("{SPECS}/{rel}");
        beneath::read(self.store, &Path::new(SPECS).join(rel), super::MAX_FILE)
            .map_err(IntegrityError::io(&what))?
            .ok_or_else(|| IntegrityError::Mismatch(format!("{what} is missing")))
    }

    /// Writes a document (0444, root's), creating its folders (0555).
    fn write_doc(&self, rel: &str, content: &[u8]) -> Result<(), IntegrityError> {
        let what = format!("{SPECS}/{rel}");
        let path = Path::new(SPECS).join(rel);
        let (dir, name) = (
            path.parent().expect("under specs/"),
            path.file_name().expect("a file name"),
        );
        let dir = beneath::create_dir_all(self.store, dir, 0o555, Some((0, 0)))
            .map_err(IntegrityError::io(&what))?;
        beneath::write_atomic(
            dir.as_fd(),
            &name.to_string_lossy(),
            content,
            FileMode::mode(0o444),
        )
        .map_err(IntegrityError::io(what))
    }

    fn save_book(&self, book: &SignatureBook) -> Result<(), IntegrityError> {
        let dir =
            beneath::open_dir(self.store, Path::new(SPECS)).map_err(IntegrityError::io(SPECS))?;
        beneath::write_atomic(
            dir.as_fd(),
            SIGNATURES,
            &super::to_pretty(book),
            FileMode::mode(0o444),
        )
        .map_err(IntegrityError::io(format!("{SPECS}/{SIGNATURES}")))
    }

    fn load_proposal(&self, spec_id: &str) -> Result<Proposal, IntegrityError> {
        super::read_json(self.store, &format!("{PROPOSALS}/{spec_id}.json"))?.ok_or_else(|| {
            IntegrityError::Refused(format!(
                "no change of {spec_id} is proposed (`clawfs specs propose {spec_id} FILE`)"
            ))
        })
    }

    fn save_proposal(&self, p: &Proposal) -> Result<(), IntegrityError> {
        let dir = beneath::create_dir_all(self.store, Path::new(PROPOSALS), 0o700, Some((0, 0)))
            .map_err(IntegrityError::io(PROPOSALS))?;
        beneath::write_atomic(
            dir.as_fd(),
            &format!("{}.json", p.spec_id),
            &super::to_pretty(p),
            FileMode::mode(0o600),
        )
        .map_err(IntegrityError::io(PROPOSALS))
    }

    fn remove_proposal(&self, spec_id: &str) -> Result<(), IntegrityError> {
        let dir = beneath::open_dir(self.store, Path::new(PROPOSALS))
            .map_err(IntegrityError::io(PROPOSALS))?;
        rustix::fs::unlinkat(
            &dir,
            format!("{spec_id}.json"),
            rustix::fs::AtFlags::empty(),
        )
        .map_err(|e| IntegrityError::io(PROPOSALS)(e.into()))
    }
}

/// The entry of `spec_id`'s current version (draft or frozen).
fn current_mut<'b>(
    book: &'b mut SignatureBook,
    spec_id: &str,
) -> Result<&'b mut SpecEntry, IntegrityError> {
    book.signatures
        .iter_mut()
        .filter(|e| e.spec_id == spec_id && e.status != Status::Superseded)
        .max_by_key(|e| e.version)
        .ok_or_else(|| {
            IntegrityError::Refused(format!("no document {spec_id} in specs/{SIGNATURES}"))
        })
}

/// Where version `version` of a document at `path` is kept once superseded.
fn history_path(path: &str, spec_id: &str, version: u32) -> String {
    let ext = Path::new(path)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    format!("{HISTORY}/{spec_id}/v{version}{ext}")
}

/// Document ids: `[A-Za-z0-9._-]`, 1–128 bytes, not starting with `.` or `-`.
pub fn check_spec_id(id: &str) -> Result<(), IntegrityError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with(['.', '-'])
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    match ok {
        true => Ok(()),
        false => Err(IntegrityError::Refused(format!(
            "'{id}' is not a document id: use 1-128 of A-Z, a-z, 0-9, '.', '_' and '-'"
        ))),
    }
}

/// A document's place under `specs/`: relative, plain names only, not the signatures file and
/// not under `history/`.
fn check_doc_path(rel: &str) -> Result<String, IntegrityError> {
    let refuse =
        |why: &str| IntegrityError::Refused(format!("'{rel}' cannot hold a document: {why}"));
    // Split by hand: Path::components would drop an empty step or a trailing '/'.
    let plain = rel
        .split('/')
        .all(|c| !c.is_empty() && !c.starts_with('.') && !c.contains('\0'));
    if !plain {
        return Err(refuse(
            "give a path relative to specs/ of plain names, none empty or starting with '.'",
        ));
    }
    if rel == SIGNATURES || rel.split('/').next() == Some(HISTORY) {
        return Err(refuse("reserved"));
    }
    Ok(rel.to_string())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
