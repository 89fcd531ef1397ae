//! `tools/`: the registry of tools (`tools/registry.json`), their definitions
//! (`tools/definitions/tool-<name>.json`) and binaries (`tools/binaries/<name>-vX.Y.Z.wasm`).
//!
//! The built-in agent tools come with the build: their part of the registry and their
//! definitions must be what this build generates. Added tools (`clawfs tools add`) are the
//! registry's `packages`, each entry signed with Ed25519 by a trusted signer over its id,
//! version and the SHA-256 of its definition and binary. The daemon serves a file of `tools/`
//! only if it is one of these and matches ([`ToolChecker`]).

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::signers::{self, Signers, SigningKey};
use super::{IntegrityError, Verdict};
use clawfs_store::beneath::{self, FileMode};

/// `tools/`, relative to the store root.
const TOOLS: &str = "tools";

/// The registry, relative to `tools/`.
pub const REGISTRY: &str = "registry.json";

/// One added tool version: the P1.4 tool definition's identity and limits, where its files are,
/// their hashes, and its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    /// The tool's name (`[a-z][a-z0-9-]*`, at most 64 bytes).
    pub tool_id: String,
    /// Its version, `X.Y.Z`.
    pub version: String,
    /// The definition, relative to `tools/`: `definitions/tool-<tool_id>.json`.
    pub definition: String,
    /// SHA-256 of the definition, hex.
    pub definition_sha256: String,
    /// The binary, relative to `tools/`: `binaries/<tool_id>-v<version>.wasm`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm_path: Option<String>,
    /// `sha256:<hex>` of the binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm_hash: Option<String>,
    /// What the tool may do (`network:outbound:telegram`, ...).
    pub capabilities: Vec<String>,
    /// Memory limit, MiB.
    pub memory_limit_mb: u64,
    /// CPU quota, percent of one CPU.
    pub cpu_quota_percent: u64,
    /// Longest run, seconds.
    pub timeout_seconds: u64,
    /// Who signed.
    pub signed_by: String,
    /// When (RFC 3339).
    pub signed_at: String,
    /// Base64 Ed25519 signature of [`message`].
    pub signature: String,
}

/// What a package's signature signs: every field of the entry but the signature itself
/// (capabilities, limits and paths included, so none can be widened or moved unsigned), as
/// JSON in the struct's field order.
pub fn message(p: &Package) -> Vec<u8> {
    let mut v = serde_json::to_value(p).expect("serialisable");
    if let Some(o) = v.as_object_mut() {
        o.remove("signature");
    }
    format!("clawfs-tool-signature-v2\n{v}\n").into_bytes()
}

/// Whether version `a` is newer than `b` (an unreadable version is never newer, and anything
/// is newer than an unreadable one).
pub fn newer(a: &str, b: &str) -> bool {
    version_key(a) > version_key(b)
}

/// The version `X.Y.Z` as numbers, for ordering: None unless each part is 1–9 digits without
/// a leading zero (`01.0.0` and `1.0.0` would be two versions that compare equal).
fn version_key(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| {
        let plain = !p.is_empty()
            && p.len() <= 9
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p.len() == 1 || !p.starts_with('0'));
        plain.then(|| p.parse::<u64>().ok()).flatten()
    });
    let key = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(key)
}

/// The registry's own rules, beyond each signature: the paths a package's name and version
/// give, and one entry per version.
fn check_packages(packages: &[Package]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for p in packages {
        let key = version_key(&p.version)
            .ok_or_else(|| format!("{} {}: not a version X.Y.Z", p.tool_id, p.version))?;
        if !seen.insert((p.tool_id.as_str(), key)) {
            return Err(format!("{} {}: listed twice", p.tool_id, p.version));
        }
        if p.definition != format!("definitions/tool-{}.json", p.tool_id) {
            return Err(format!(
                "{} {}: definition {:?} is not its own",
                p.tool_id, p.version, p.definition
            ));
        }
        if let Some(w) = &p.wasm_path {
            if *w != format!("binaries/{}-v{}.wasm", p.tool_id, p.version) {
                return Err(format!(
                    "{} {}: wasm_path {w:?} is not its own",
                    p.tool_id, p.version
                ));
            }
        }
    }
    Ok(())
}

/// The registry file: the built-in tools of this build, then `packages`. Its protocol names
/// the tool files under `mount`, where the store is served.
pub fn registry_bytes(packages: &[Package], mount: &Path) -> Vec<u8> {
    let mut v = clawfs_agent_tools::registry(mount);
    v["packages"] = serde_json::to_value(packages).expect("serialisable");
    super::to_pretty(&v)
}

/// The definition file of the built-in tool `name`, if it is one.
pub fn builtin_definition(name: &str) -> Option<Vec<u8>> {
    clawfs_agent_tools::definition(name).map(|d| super::to_pretty(&d))
}

/// The packages of the registry at `bytes` (none if it has no `packages`).
fn packages_of(bytes: &[u8]) -> Result<Vec<Package>, IntegrityError> {
    let what = format!("{TOOLS}/{REGISTRY}");
    let v: Value = serde_json::from_slice(bytes).map_err(IntegrityError::json(&what))?;
    match v.get("packages") {
        None => Ok(Vec::new()),
        Some(p) => serde_json::from_value(p.clone()).map_err(IntegrityError::json(what)),
    }
}

/// The packages recorded in the store's registry (none if it is missing or has none).
pub fn load_packages(store: BorrowedFd<'_>) -> Result<Vec<Package>, IntegrityError> {
    let rel = format!("{TOOLS}/{REGISTRY}");
    match beneath::read(store, Path::new(&rel), super::MAX_FILE)
        .map_err(IntegrityError::io(&rel))?
    {
        None => Ok(Vec::new()),
        Some(bytes) => packages_of(&bytes),
    }
}

/// Writes the registry (this build's tools and `packages`, its protocol naming `mount`) and the
/// built-in definitions where they differ from what is there, owned like `tools/`. Run at every
/// mount (a new build may serve new tools; the mount may be another) and by `clawfs tools add`.
pub fn write_registry(
    store: BorrowedFd<'_>,
    packages: &[Package],
    mount: &Path,
) -> Result<(), IntegrityError> {
    let tools = beneath::open_dir(store, Path::new(TOOLS)).map_err(IntegrityError::io(TOOLS))?;
    let st = rustix::fs::fstat(&tools).map_err(|e| IntegrityError::io(TOOLS)(e.into()))?;
    let owner = Some((st.st_uid, st.st_gid));
    let defs = beneath::create_dir_all(tools.as_fd(), Path::new("definitions"), 0o755, owner)
        .map_err(IntegrityError::io("tools/definitions"))?;
    let how = FileMode { mode: 0o644, owner };
    replace_if_changed(
        tools.as_fd(),
        REGISTRY,
        &registry_bytes(packages, mount),
        how,
    )?;
    for tool in clawfs_agent_tools::TOOL_NAMES {
        let def = builtin_definition(tool).expect("every listed tool has a definition");
        replace_if_changed(defs.as_fd(), &format!("tool-{tool}.json"), &def, how)?;
    }
    Ok(())
}

fn replace_if_changed(
    dir: BorrowedFd<'_>,
    name: &str,
    content: &[u8],
    how: FileMode,
) -> Result<(), IntegrityError> {
    let what = format!("{TOOLS}/{name}");
    if beneath::read(dir, Path::new(name), super::MAX_FILE)
        .ok()
        .flatten()
        .as_deref()
        == Some(content)
    {
        return Ok(());
    }
    beneath::write_atomic(dir, name, content, how).map_err(IntegrityError::io(what))
}

/// Checks a definition (P1.4 §1.2 tool schema) and the names of its files: `def_name` must be
/// `tool-<tool_id>.json`, `wasm_name` `<tool_id>-v<version>.wasm`. Returns the definition.
pub fn check_definition(
    def: &[u8],
    def_name: &str,
    wasm_name: Option<&str>,
) -> Result<Value, IntegrityError> {
    let refuse = |why: String| IntegrityError::Refused(format!("{def_name}: {why}"));
    let v: Value = super::strict_json(def).map_err(|e| refuse(format!("not JSON: {e}")))?;
    let str_field = |k: &str| -> Result<&str, IntegrityError> {
        v.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| refuse(format!("'{k}' (a string) is required")))
    };
    let id = str_field("tool_id")?;
    let id_ok = !id.is_empty()
        && id.len() <= 64
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !id_ok {
        return Err(refuse(format!(
            "tool_id '{id}': use a-z, 0-9 and '-', starting with a letter, at most 64"
        )));
    }
    // `read-file` would read as the built-in `read_file` to a person or a model.
    if clawfs_agent_tools::TOOL_NAMES.contains(&id.replace('-', "_").as_str()) {
        return Err(refuse(format!("'{id}' is (or reads as) a built-in tool")));
    }
    let version = str_field("version")?;
    if version_key(version).is_none() {
        return Err(refuse(format!(
            "version '{version}': use X.Y.Z (numbers without leading zeros)"
        )));
    }
    if def_name != format!("tool-{id}.json") {
        return Err(refuse(format!(
            "a definition of '{id}' must be named tool-{id}.json"
        )));
    }
    // Capabilities are read by people and policy alike: printable words, no spaces or
    // control characters, a bounded list.
    let capability =
        |s: &str| !s.is_empty() && s.len() <= 256 && s.chars().all(|c| c.is_ascii_graphic());
    match v.get("capabilities").and_then(Value::as_array) {
        Some(caps)
            if caps.len() <= 64 && caps.iter().all(|c| c.as_str().is_some_and(capability)) => {}
        _ => {
            return Err(refuse(
                "'capabilities' must be a list of at most 64 strings of printable ASCII \
                 without spaces"
                    .into(),
            ))
        }
    }
    for (k, max) in [
        ("memory_limit_mb", 65_536),
        ("cpu_quota_percent", 100),
        ("timeout_seconds", 86_400),
    ] {
        match v.get(k).and_then(Value::as_u64) {
            Some(n) if (1..=max).contains(&n) => {}
            _ => {
                return Err(refuse(format!(
                    "'{k}' must be a whole number from 1 to {max}"
                )))
            }
        }
    }
    let wasm_path = v.get("wasm_path").and_then(Value::as_str);
    match wasm_name {
        Some(name) => {
            let expected = format!("{id}-v{version}.wasm");
            if name != expected {
                return Err(refuse(format!(
                    "the binary of {id} {version} must be named {expected}"
                )));
            }
            if wasm_path != Some(&format!("/clawfs/tools/binaries/{expected}")) {
                return Err(refuse(format!(
                    "'wasm_path' must be /clawfs/tools/binaries/{expected}"
                )));
            }
        }
        None if wasm_path.is_some() => {
            return Err(refuse(
                "'wasm_path' names a binary, but none was given".into(),
            ))
        }
        None => {}
    }
    Ok(v)
}

/// What `clawfs tools add` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// Published, signed by the signer.
    Published,
    /// This exact version was already published (nothing changed).
    AlreadyPublished,
}

/// Adds (publishes) a tool version: checks the definition and binary, writes both (0444),
/// records the entry signed by `signer`, and rewrites the registry for `mount` (where the
/// store is served). A published version never changes.
pub fn add(
    store: BorrowedFd<'_>,
    (def, def_name): (&[u8], &str),
    wasm: Option<(&[u8], &str)>,
    (signer, key): (&str, &SigningKey),
    now: &str,
    mount: &Path,
) -> Result<Added, IntegrityError> {
    Signers::load(store)?.check_key(signer, key)?;
    let v = check_definition(def, def_name, wasm.map(|w| w.1))?;
    if let Some((bytes, name)) = wasm {
        if !bytes.starts_with(b"\0asm") {
            return Err(IntegrityError::Refused(format!(
                "{name}: not a WebAssembly module (no \\0asm header)"
            )));
        }
    }
    let id = v["tool_id"].as_str().expect("checked").to_string();
    let version = v["version"].as_str().expect("checked").to_string();
    let mut entry = Package {
        tool_id: id.clone(),
        version: version.clone(),
        definition: format!("definitions/tool-{id}.json"),
        definition_sha256: hex_sha256(def),
        wasm_path: wasm.map(|(_, name)| format!("binaries/{name}")),
        wasm_hash: wasm.map(|(bytes, _)| format!("sha256:{}", hex_sha256(bytes))),
        capabilities: v["capabilities"]
            .as_array()
            .expect("checked")
            .iter()
            .map(|c| c.as_str().expect("checked").to_string())
            .collect(),
        memory_limit_mb: v["memory_limit_mb"].as_u64().expect("checked"),
        cpu_quota_percent: v["cpu_quota_percent"].as_u64().expect("checked"),
        timeout_seconds: v["timeout_seconds"].as_u64().expect("checked"),
        signed_by: signer.to_string(),
        signed_at: now.to_string(),
        signature: String::new(),
    };
    if let Some(hash) = v.get("wasm_hash").and_then(Value::as_str) {
        if Some(hash) != entry.wasm_hash.as_deref() {
            return Err(IntegrityError::Refused(format!(
                "{def_name}: wasm_hash {hash} is not the binary's ({})",
                entry.wasm_hash.as_deref().unwrap_or("no binary")
            )));
        }
    }
    let mut packages = load_packages(store)?;
    if let Some(old) = packages
        .iter()
        .find(|p| p.tool_id == id && p.version == version)
    {
        let same =
            old.definition_sha256 == entry.definition_sha256 && old.wasm_hash == entry.wasm_hash;
        return match same {
            true => Ok(Added::AlreadyPublished),
            false => Err(IntegrityError::Refused(format!(
                "{id} {version} is published and cannot change: publish a new version"
            ))),
        };
    }
    entry.signature = signers::sign(key, &message(&entry));
    let tools = beneath::open_dir(store, Path::new(TOOLS)).map_err(IntegrityError::io(TOOLS))?;
    let st = rustix::fs::fstat(&tools).map_err(|e| IntegrityError::io(TOOLS)(e.into()))?;
    let owner = Some((st.st_uid, st.st_gid));
    let how = FileMode { mode: 0o444, owner };
    if let (Some((bytes, name)), Some(path)) = (wasm, &entry.wasm_path) {
        let bins = beneath::create_dir_all(tools.as_fd(), Path::new("binaries"), 0o755, owner)
            .map_err(IntegrityError::io("tools/binaries"))?;
        if beneath::open(bins.as_fd(), Path::new(name), OFlags::PATH, 0).is_ok() {
            return Err(IntegrityError::Refused(format!(
                "tools/{path} exists but is not published: remove it from the store first"
            )));
        }
        beneath::write_atomic(bins.as_fd(), name, bytes, how)
            .map_err(IntegrityError::io(format!("tools/{path}")))?;
    }
    let defs = beneath::create_dir_all(tools.as_fd(), Path::new("definitions"), 0o755, owner)
        .map_err(IntegrityError::io("tools/definitions"))?;
    beneath::write_atomic(defs.as_fd(), def_name, def, how)
        .map_err(IntegrityError::io(format!("tools/{}", entry.definition)))?;
    packages.push(entry);
    write_registry(store, &packages, mount)?;
    Ok(Added::Published)
}

/// The registry's packages, each of whose signatures holds (else why not).
type Signed = Result<Vec<Package>, String>;

/// The store's packages, with every signature checked against the trusted signers.
fn signed_packages(store: BorrowedFd<'_>) -> Result<Signed, IntegrityError> {
    let (packages, problem) = match audited_packages(store) {
        Ok(checked) => checked,
        Err(e @ (IntegrityError::Json { .. } | IntegrityError::Mismatch(_))) => {
            return Ok(Err(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    if let Some((p, why)) = packages
        .iter()
        .find_map(|(p, v)| v.as_ref().err().map(|e| (p, e)))
    {
        return Ok(Err(format!(
            "{TOOLS}/{REGISTRY}: {} {}: {why}",
            p.tool_id, p.version
        )));
    }
    match problem {
        Some(e) => Ok(Err(format!("{TOOLS}/{REGISTRY}: {e}"))),
        None => Ok(Ok(packages.into_iter().map(|(p, _)| p).collect())),
    }
}

/// Each package with whether its signature holds (else why not), and what breaks the
/// registry's own rules, if anything.
pub type Audited = (Vec<(Package, Result<(), String>)>, Option<String>);

/// The store's packages, each with whether its signature holds, and what breaks the
/// registry's own rules if anything does (an entry listed twice, files of another's): what
/// `clawfs tools list` shows, and what the daemon serves only when all is well.
pub fn audited_packages(store: BorrowedFd<'_>) -> Result<Audited, IntegrityError> {
    let signers = Signers::load(store)?;
    let packages = load_packages(store)?;
    let problem = check_packages(&packages).err();
    let checked = packages
        .into_iter()
        .map(|p| {
            let v = signers
                .verify(&p.signed_by, &message(&p), &p.signature)
                .map_err(|e| e.to_string());
            (p, v)
        })
        .collect();
    Ok((checked, problem))
}

/// Whether the stored file `rel` of `tools/`, whose bytes hash to `sha256`, may be served at
/// `mount`.
fn verdict(packages: &Signed, rel: &str, sha256: &str, mount: &Path) -> Result<(), IntegrityError> {
    let mismatch = |why: String| IntegrityError::Mismatch(format!("tools/{rel} {why}: not served"));
    let packages = packages
        .as_ref()
        .map_err(|e| IntegrityError::Mismatch(e.clone()))?;
    if rel == REGISTRY {
        return match sha256 == hex_sha256(&registry_bytes(packages, mount)) {
            true => Ok(()),
            false => Err(mismatch(
                "differs from this build's tools and its signed packages".into(),
            )),
        };
    }
    if let Some(name) = rel
        .strip_prefix("definitions/tool-")
        .and_then(|n| n.strip_suffix(".json"))
    {
        if let Some(def) = builtin_definition(name) {
            return match sha256 == hex_sha256(&def) {
                true => Ok(()),
                false => Err(mismatch(
                    "is not this build's definition of the tool".into(),
                )),
            };
        }
        // The latest published version's definition (by version, not by place in the list).
        let latest = packages
            .iter()
            .filter(|p| p.definition == rel)
            .max_by_key(|p| version_key(&p.version))
            .ok_or_else(|| mismatch("is not in the registry".into()))?;
        return match sha256 == latest.definition_sha256 {
            true => Ok(()),
            false => Err(mismatch(format!(
                "does not match the signed hash of {} {}",
                latest.tool_id, latest.version
            ))),
        };
    }
    let p = packages
        .iter()
        .find(|p| p.wasm_path.as_deref() == Some(rel))
        .ok_or_else(|| mismatch("is not in the registry".into()))?;
    match Some(format!("sha256:{sha256}")) == p.wasm_hash {
        true => Ok(()),
        false => Err(mismatch(format!(
            "does not match the signed hash of {} {}",
            p.tool_id, p.version
        ))),
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The daemon's check of tool files: the registry's packages (signatures checked) and the
/// signers, read again only when either file changed; and the mount the registry must name.
#[derive(Default)]
pub struct ToolChecker {
    packages: super::Indexed<Signed>,
    /// Where the store is served; [`clawfs_store::layout::DEFAULT_MOUNT`] if not said.
    mount: Option<std::path::PathBuf>,
}

impl ToolChecker {
    /// A checker for a store served at `mount`: the registry served must name that mount.
    pub fn new(mount: Option<std::path::PathBuf>) -> Self {
        Self {
            packages: Default::default(),
            mount,
        }
    }

    /// Whether the stored file at `rel` (relative to `tools/`), whose bytes hash to `sha256`,
    /// may be served; `store` is the store root.
    pub fn check(&self, store: BorrowedFd<'_>, rel: &str, sha256: &str) -> Verdict {
        let mount = self
            .mount
            .as_ref()
            .map_or(Path::new(clawfs_store::layout::DEFAULT_MOUNT), |m| {
                m.as_path()
            });
        self.packages
            .get(
                store,
                [&format!("{TOOLS}/{REGISTRY}"), super::signers::SIGNERS_FILE],
                || signed_packages(store),
            )
            .and_then(|packages| verdict(&packages, rel, sha256, mount))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut v = serde_json::json!({
            "tool_id": "echo",
            "version": "1.0.0",
            "capabilities": ["filesystem:read:/clawfs/workspaces"],
            "memory_limit_mb": 64,
            "cpu_quota_percent": 10,
            "timeout_seconds": 30,
        });
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn definitions_name_one_version_and_plain_capabilities() {
        assert!(check_definition(&def(|_| {}), "tool-echo.json", None).is_ok());
        let refused: [fn(&mut Value); 5] = [
            |v| v["version"] = "01.0.0".into(),
            |v| v["capabilities"] = serde_json::json!(["net work"]),
            |v| v["capabilities"] = serde_json::json!(["a\nb"]),
            |v| v["capabilities"] = serde_json::json!(vec!["x"; 65]),
            |v| v["tool_id"] = "read-file".into(),
        ];
        for edit in refused {
            let bytes = def(edit);
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            let name = format!("tool-{}.json", v["tool_id"].as_str().unwrap());
            assert!(
                check_definition(&bytes, &name, None).is_err(),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }

    #[test]
    fn each_entry_names_its_own_files_once() {
        let package = |id: &str, version: &str| Package {
            tool_id: id.into(),
            version: version.into(),
            definition: format!("definitions/tool-{id}.json"),
            definition_sha256: "00".into(),
            wasm_path: Some(format!("binaries/{id}-v{version}.wasm")),
            wasm_hash: None,
            capabilities: vec![],
            memory_limit_mb: 1,
            cpu_quota_percent: 1,
            timeout_seconds: 1,
            signed_by: "alice".into(),
            signed_at: "now".into(),
            signature: String::new(),
        };
        let good = [package("echo", "1.0.0"), package("echo", "1.1.0")];
        assert!(check_packages(&good).is_ok());
        let mut twice = good.to_vec();
        twice.push(package("echo", "1.0.0"));
        assert!(check_packages(&twice).unwrap_err().contains("listed twice"));
        let mut moved = package("echo", "1.0.0");
        moved.wasm_path = Some("binaries/trusted-v9.9.9.wasm".into());
        assert!(check_packages(&[moved])
            .unwrap_err()
            .contains("not its own"));
        let mut moved = package("echo", "1.0.0");
        moved.definition = "definitions/tool-other.json".into();
        assert!(check_packages(&[moved])
            .unwrap_err()
            .contains("not its own"));
        // Listed out of order, the definition served is still the highest version's.
        let (mut old, mut new) = (package("echo", "1.0.0"), package("echo", "1.10.0"));
        (old.definition_sha256, new.definition_sha256) = ("aa".into(), "bb".into());
        let reordered: Signed = Ok(vec![new, old]);
        assert!(verdict(
            &reordered,
            "definitions/tool-echo.json",
            "bb",
            Path::new("/m")
        )
        .is_ok());
        assert!(verdict(
            &reordered,
            "definitions/tool-echo.json",
            "aa",
            Path::new("/m")
        )
        .is_err());
        // The signature covers the capabilities: the message changes with them.
        let mut wider = package("echo", "1.0.0");
        wider.capabilities = vec!["network:outbound:*".into()];
        assert_ne!(message(&wider), message(&package("echo", "1.0.0")));
    }

    #[test]
    fn versions_order_as_numbers() {
        assert!(version_key("1.10.0") > version_key("1.9.0"));
        assert_eq!(version_key("1.0"), None);
        assert_eq!(version_key("1.0.0.0"), None);
        assert_eq!(version_key("+1.0.0"), None);
        assert_eq!(version_key("1.01.0"), None);
        assert_eq!(version_key("0.10.0"), Some((0, 10, 0)));
    }
}
