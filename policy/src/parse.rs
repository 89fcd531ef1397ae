//! Reading a policy file: TOML with spans → a validated [`Policy`], every mistake reported with
//! its line and column in one pass.
//!
//! Syntax errors stop the pass (a half-parsed document would produce misleading follow-on
//! errors); otherwise every key is checked, cross-references (uids, `read_agents`, `[uids]`) are
//! checked once the whole roster is known, and all errors are returned in file order.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{
    AgentName, AgentSpec, BackupRetention, Endpoint, Grant, Layer, Network, Policy, PolicyError,
    Quota, SandboxSpec, UsersMode, WorkspaceGrants, POLICY_VERSION,
};
use clawfs_store::names::{check_system_name, RESERVED_WORKSPACES};

/// Protected names when the policy does not list any (`[defaults] protected` absent).
pub(super) const DEFAULT_PROTECTED: [&str; 3] = [".git", ".obsidian", ".smarthole"];

type Key<'i> = Spanned<toml::de::DeString<'i>>;
type Val<'i> = Spanned<DeValue<'i>>;

const TOP_KEYS: &[&str] = &["version", "users", "admins", "defaults", "agents", "uids"];
const DEFAULTS_KEYS: &[&str] = &[
    "read_other_agents",
    "protected",
    "quota",
    "workspaces",
    "backups",
];
const BACKUPS_KEYS: &[&str] = &["keep", "max_age_days"];
const AGENT_KEYS: &[&str] = &[
    "uid",
    "gid",
    "allow_root",
    "workspaces",
    "read_agents",
    "secrets",
    "quota",
    "tools",
    "sandbox",
];
const SANDBOX_KEYS: &[&str] = &["read", "network", "require"];
const QUOTA_KEYS: &[&str] = &["bytes", "files"];

/// Errors collected as byte offsets, turned into lines and columns at the end.
struct Errors<'t> {
    text: &'t str,
    found: Vec<(usize, String)>,
}

impl<'t> Errors<'t> {
    fn at(&mut self, span: Range<usize>, msg: impl Into<String>) {
        self.found.push((span.start, msg.into()));
    }

    fn finish(self) -> Vec<PolicyError> {
        let mut found = self.found;
        found.sort_by_key(|(off, _)| *off);
        found
            .into_iter()
            .map(|(off, message)| {
                let (line, column) = line_col(self.text, off);
                PolicyError {
                    line,
                    column,
                    message,
                }
            })
            .collect()
    }
}

/// 1-based line and character column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut off = offset.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn reason(e: clawfs_store::NameError) -> &'static str {
    e.reason
}

/// One-of list for messages: `"a", "b" or "c"`.
fn one_of(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

fn keys_list(items: &[&str]) -> String {
    items.join(", ")
}

/// Reports every key of `table` not in `allowed`.
fn unknown_keys(errs: &mut Errors<'_>, table: &DeTable<'_>, allowed: &[&str], section: &str) {
    for (k, _) in table.iter() {
        if !allowed.contains(&k.get_ref().as_ref()) {
            errs.at(
                k.span(),
                format!(
                    "unknown key '{}' in {section}; expected one of: {}",
                    k.get_ref(),
                    keys_list(allowed)
                ),
            );
        }
    }
}

fn get<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> Option<(&'a Key<'i>, &'a Val<'i>)> {
    table.get_key_value(key)
}

fn type_err(errs: &mut Errors<'_>, v: &Val<'_>, what: &str, expected: &str) {
    errs.at(
        v.span(),
        format!("{what} must be {expected}, not {}", v.get_ref().type_str()),
    );
}

fn as_table<'a, 'i>(errs: &mut Errors<'_>, v: &'a Val<'i>, what: &str) -> Option<&'a DeTable<'i>> {
    let t = v.get_ref().as_table();
    if t.is_none() {
        type_err(errs, v, what, "a table");
    }
    t
}

fn as_str<'a>(errs: &mut Errors<'_>, v: &'a Val<'_>, what: &str) -> Option<&'a str> {
    let s = v.get_ref().as_str();
    if s.is_none() {
        type_err(errs, v, what, "a string");
    }
    s
}

fn as_bool(errs: &mut Errors<'_>, v: &Val<'_>, what: &str) -> Option<bool> {
    let b = v.get_ref().as_bool();
    if b.is_none() {
        type_err(errs, v, what, "true or false");
    }
    b
}

fn as_array<'a, 'i>(errs: &mut Errors<'_>, v: &'a Val<'i>, what: &str) -> Option<&'a [Val<'i>]> {
    let a = v.get_ref().as_array().map(|a| &a[..]);
    if a.is_none() {
        type_err(errs, v, what, "an array");
    }
    a
}

fn int_value(v: &DeValue<'_>) -> Option<Option<i128>> {
    v.as_integer()
        .map(|i| i128::from_str_radix(i.as_str(), i.radix()).ok())
}

/// A uid or gid: an integer in 0..=4294967294 (`u32::MAX` is the kernel's "no id").
fn as_id(errs: &mut Errors<'_>, v: &Val<'_>, what: &str) -> Option<u32> {
    match int_value(v.get_ref()) {
        None => {
            type_err(errs, v, what, "an integer");
            None
        }
        Some(Some(n)) if (0..i128::from(u32::MAX)).contains(&n) => Some(n as u32),
        Some(_) => {
            errs.at(v.span(), format!("{what} must be between 0 and 4294967294"));
            None
        }
    }
}

/// Parses a size: an integer number of bytes or a string like `"512MiB"`, `"1 GB"`,
/// `"unlimited"`.
pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(Quota::UNLIMITED);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let bad = || {
        format!(
            "invalid size {s:?}: write a whole number with an optional unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. \"512MiB\", or \"unlimited\""
        )
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(mult)
        .filter(|&b| b != Quota::UNLIMITED)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// A quota field: a non-negative integer, or a string (`parse_size` for bytes, `"unlimited"`).
fn quota_field(errs: &mut Errors<'_>, v: &Val<'_>, what: &str, is_bytes: bool) -> Option<u64> {
    match v.get_ref() {
        DeValue::String(s) if is_bytes => match parse_size(s) {
            Ok(n) => Some(n),
            Err(m) => {
                errs.at(v.span(), format!("{what}: {m}"));
                None
            }
        },
        DeValue::String(s) if s.trim().eq_ignore_ascii_case("unlimited") => Some(Quota::UNLIMITED),
        other => match int_value(other) {
            Some(Some(n)) if n >= 0 && n < i128::from(u64::MAX) => Some(n as u64),
            Some(_) => {
                errs.at(v.span(), format!("{what} must be a non-negative integer"));
                None
            }
            None => {
                let expected = if is_bytes {
                    "an integer or a size string like \"1GiB\""
                } else {
                    "an integer or \"unlimited\""
                };
                type_err(errs, v, what, expected);
                None
            }
        },
    }
}

/// A `backups = { keep, max_age_days }` table; missing fields keep their defaults.
fn backups_table(errs: &mut Errors<'_>, v: &Val<'_>) -> BackupRetention {
    let what = "[defaults] backups";
    let mut out = BackupRetention::default();
    let Some(t) = as_table(errs, v, what) else {
        return out;
    };
    unknown_keys(errs, t, BACKUPS_KEYS, what);
    let mut field = |key: &str, min: i128| {
        let (_, v) = get(t, key)?;
        match int_value(v.get_ref()) {
            Some(Some(n)) if n >= min && n <= i128::from(u32::MAX) => Some(n as u64),
            Some(_) => {
                errs.at(
                    v.span(),
                    format!("{what}.{key} must be an integer from {min} to 4294967295"),
                );
                None
            }
            None => {
                type_err(errs, v, &format!("{what}.{key}"), "an integer");
                None
            }
        }
    };
    if let Some(n) = field("keep", 1) {
        out.keep = n as usize;
    }
    if let Some(n) = field("max_age_days", 1) {
        out.max_age_days = n;
    }
    out
}

/// A `quota = { bytes, files }` table; missing fields stay `None` (inherit).
fn quota_table(errs: &mut Errors<'_>, v: &Val<'_>, what: &str) -> (Option<u64>, Option<u64>) {
    let Some(t) = as_table(errs, v, what) else {
        return (None, None);
    };
    unknown_keys(errs, t, QUOTA_KEYS, what);
    let bytes =
        get(t, "bytes").and_then(|(_, v)| quota_field(errs, v, &format!("{what}.bytes"), true));
    let files =
        get(t, "files").and_then(|(_, v)| quota_field(errs, v, &format!("{what}.files"), false));
    (bytes, files)
}

fn grant(errs: &mut Errors<'_>, v: &Val<'_>, what: &str, allowed: &[Grant]) -> Option<Grant> {
    let s = as_str(errs, v, what)?;
    let g = [Grant::None, Grant::Read, Grant::ReadWrite]
        .into_iter()
        .find(|g| g.as_str() == s && allowed.contains(g));
    if g.is_none() {
        let names: Vec<&str> = allowed.iter().map(|g| g.as_str()).collect();
        errs.at(
            v.span(),
            format!(
                "unknown access level \"{s}\" for {what}; expected {}",
                one_of(&names)
            ),
        );
    }
    g
}

/// A `workspaces = { name = "level", "*" = "level" }` table.
fn workspace_grants(errs: &mut Errors<'_>, v: &Val<'_>, what: &str) -> WorkspaceGrants {
    let mut out = WorkspaceGrants::default();
    let Some(t) = as_table(errs, v, what) else {
        return out;
    };
    let all = [Grant::None, Grant::Read, Grant::ReadWrite];
    for (k, v) in t.iter() {
        let name = k.get_ref().as_ref();
        let g = grant(errs, v, &format!("{what}.{name}"), &all);
        if name == "*" {
            out.others = g;
            continue;
        }
        match check_system_name(OsStr::new(name)) {
            Err(e) => errs.at(
                k.span(),
                format!(
                    "workspace name '{name}' in {what} is invalid: it {}",
                    reason(e)
                ),
            ),
            Ok(n) if n != "default" && RESERVED_WORKSPACES.contains(&n) => errs.at(
                k.span(),
                format!("'{name}' in {what} is a reserved name and never a workspace"),
            ),
            Ok(_) => {
                if let Some(g) = g {
                    out.named.insert(name.to_string(), g);
                }
            }
        }
    }
    out
}

/// One agent's table, before cross-checks.
struct RawAgent {
    spec: AgentSpec,
    uid_span: Option<Range<usize>>,
    quota: (Option<u64>, Option<u64>),
    /// `read_agents` entries with their spans, checked against the roster later.
    read_agents: Vec<(String, Range<usize>)>,
}

fn agent_table(errs: &mut Errors<'_>, name: AgentName, v: &Val<'_>) -> RawAgent {
    let section = format!("[agents.{name}]");
    let mut raw = RawAgent {
        spec: AgentSpec {
            name,
            uid: None,
            gid: None,
            allow_root: false,
            workspaces: WorkspaceGrants::default(),
            read_agents: BTreeSet::new(),
            read_all_agents: false,
            secrets: BTreeSet::new(),
            quota: Quota::NONE,
            tools: Grant::Read,
            sandbox: SandboxSpec::default(),
        },
        uid_span: None,
        quota: (None, None),
        read_agents: Vec::new(),
    };
    let Some(t) = as_table(errs, v, &section) else {
        return raw;
    };
    unknown_keys(errs, t, AGENT_KEYS, &section);
    let spec = &mut raw.spec;
    if let Some((_, v)) = get(t, "allow_root") {
        spec.allow_root = as_bool(errs, v, &format!("{section} allow_root")).unwrap_or(false);
    }
    for (key, slot) in [("uid", &mut spec.uid), ("gid", &mut spec.gid)] {
        let Some((_, v)) = get(t, key) else { continue };
        *slot = as_id(errs, v, &format!("{section} {key}"));
        if *slot == Some(0) && !spec.allow_root {
            errs.at(
                v.span(),
                format!(
                    "{section} {key} = 0 would run the agent as root; use an unprivileged id, or set allow_root = true if you really mean it"
                ),
            );
        }
        if key == "uid" {
            raw.uid_span = Some(v.span());
        }
    }
    if spec.gid.is_some() && spec.uid.is_none() && get(t, "uid").is_none() {
        errs.at(
            get(t, "gid").map_or(0..0, |(k, _)| k.span()),
            format!("{section} gives a gid but no uid; give both"),
        );
    }
    if let Some((_, v)) = get(t, "workspaces") {
        spec.workspaces = workspace_grants(errs, v, &format!("{section} workspaces"));
    }
    if let Some((_, v)) = get(t, "tools") {
        spec.tools = grant(
            errs,
            v,
            &format!("{section} tools"),
            &[Grant::Read, Grant::ReadWrite],
        )
        .unwrap_or(Grant::Read);
    }
    if let Some((_, v)) = get(t, "read_agents") {
        for item in as_array(errs, v, &format!("{section} read_agents")).unwrap_or_default() {
            if let Some(s) = as_str(errs, item, &format!("{section} read_agents entry")) {
                if s == "*" {
                    spec.read_all_agents = true;
                } else {
                    raw.read_agents.push((s.to_string(), item.span()));
                }
            }
        }
    }
    if let Some((_, v)) = get(t, "secrets") {
        for item in as_array(errs, v, &format!("{section} secrets")).unwrap_or_default() {
            let Some(s) = as_str(errs, item, &format!("{section} secrets entry")) else {
                continue;
            };
            match check_system_name(OsStr::new(s)) {
                Ok(_) => {
                    spec.secrets.insert(s.to_string());
                }
                Err(e) => errs.at(
                    item.span(),
                    format!(
                        "secret id '{s}' in {section} secrets is invalid: it {}",
                        reason(e)
                    ),
                ),
            }
        }
    }
    if let Some((_, v)) = get(t, "quota") {
        raw.quota = quota_table(errs, v, &format!("{section} quota"));
    }
    if let Some((_, v)) = get(t, "sandbox") {
        let name = raw.spec.name.clone();
        raw.spec.sandbox = sandbox_table(errs, &name, v);
    }
    raw
}

/// An `[agents.NAME.sandbox]` table.
fn sandbox_table(errs: &mut Errors<'_>, agent: &AgentName, v: &Val<'_>) -> SandboxSpec {
    let section = format!("[agents.{agent}.sandbox]");
    let mut out = SandboxSpec::default();
    let Some(t) = as_table(errs, v, &section) else {
        return out;
    };
    unknown_keys(errs, t, SANDBOX_KEYS, &section);
    if let Some((_, v)) = get(t, "read") {
        for item in as_array(errs, v, &format!("{section} read")).unwrap_or_default() {
            let Some(s) = as_str(errs, item, &format!("{section} read entry")) else {
                continue;
            };
            match sandbox_read_path(s) {
                Ok(p) if out.read.contains(&p) => {
                    errs.at(item.span(), format!("{section} read lists {s:?} twice"))
                }
                Ok(p) => out.read.push(p),
                Err(why) => errs.at(item.span(), format!("{section} read entry {s:?} {why}")),
            }
        }
    }
    if let Some((_, v)) = get(t, "network") {
        out.network = network(errs, v, &section);
    }
    if let Some((_, v)) = get(t, "require") {
        for item in as_array(errs, v, &format!("{section} require")).unwrap_or_default() {
            let Some(s) = as_str(errs, item, &format!("{section} require entry")) else {
                continue;
            };
            match Layer::ALL.into_iter().find(|l| l.as_str() == s) {
                Some(l) => {
                    out.require.insert(l);
                }
                None => {
                    let names: Vec<&str> = Layer::ALL.iter().map(|l| l.as_str()).collect();
                    errs.at(
                        item.span(),
                        format!(
                            "unknown sandbox layer \"{s}\" in {section} require; expected {}",
                            one_of(&names)
                        ),
                    );
                }
            }
        }
    }
    out
}

/// Checks one `read` path of a sandbox: absolute, plain (no `.` or `..`), and not `/`, `/etc`
/// or anything equal to, above or inside the paths no sandbox grant may cover
/// ([`crate::DEFAULT_DENY`]: the shadow files, `/root`, the default store, …). The
/// store actually used is checked again when the sandbox is prepared.
fn sandbox_read_path(s: &str) -> Result<std::path::PathBuf, String> {
    use std::path::{Component, Path, PathBuf};
    if s.contains('\0') {
        return Err("contains a NUL byte".to_string());
    }
    let p = Path::new(s);
    if !p.is_absolute() {
        return Err("must be an absolute path (starting with '/')".to_string());
    }
    if p.components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err("must not contain '.' or '..' components".to_string());
    }
    let clean: PathBuf = p.components().collect();
    if clean == Path::new("/") {
        return Err(
            "would make the whole host readable; list the directories the agent needs".to_string(),
        );
    }
    if clean == Path::new("/etc") {
        return Err("would make all of /etc readable (password hashes, keys); list the files the agent needs".to_string());
    }
    for deny in crate::DEFAULT_DENY {
        let deny = Path::new(deny);
        if clean.starts_with(deny) || deny.starts_with(&clean) {
            return Err(format!(
                "would expose {}, which no sandbox may read",
                deny.display()
            ));
        }
    }
    Ok(clean)
}

/// A sandbox's `network`: `"none"`, `"all"` or an array of `"host:port"` / `":port"`.
fn network(errs: &mut Errors<'_>, v: &Val<'_>, section: &str) -> Network {
    let what = format!("{section} network");
    match v.get_ref() {
        DeValue::String(s) => match s.as_ref() {
            "all" => Network::All,
            "none" => Network::None,
            other => {
                errs.at(
                    v.span(),
                    format!("unknown {what} \"{other}\"; expected \"none\", \"all\" or an array of \"host:port\" entries like \"127.0.0.1:8080\" or \":443\""),
                );
                Network::All
            }
        },
        DeValue::Array(items) => {
            let mut list = Vec::new();
            for item in items.iter() {
                let Some(s) = as_str(errs, item, &format!("{what} entry")) else {
                    continue;
                };
                match endpoint(s) {
                    Ok(e) => list.push(e),
                    Err(why) => errs.at(item.span(), format!("{what} entry {s:?}: {why}")),
                }
            }
            Network::Allow(list)
        }
        _ => {
            type_err(
                errs,
                v,
                &what,
                "\"none\", \"all\" or an array of \"host:port\" strings",
            );
            Network::All
        }
    }
}

/// One `"host:port"` (`"[::1]:80"` for IPv6) or `":port"` entry.
fn endpoint(s: &str) -> Result<Endpoint, String> {
    let form = "write \"host:port\" (e.g. \"127.0.0.1:8080\", \"localhost:5432\", \"[::1]:80\") or \":port\" for any host";
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("no port; {form}"));
    };
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 && !port.starts_with('+') => p,
        _ => return Err(format!("port {port:?} must be a number from 1 to 65535")),
    };
    if host.is_empty() {
        return Ok(Endpoint {
            host: None,
            prefix: None,
            port,
        });
    }
    if let Some((addr, len)) = network_prefix(host)? {
        return Ok(Endpoint {
            host: Some(addr),
            prefix: Some(len),
            port,
        });
    }
    let host = if let Some(inner) = host.strip_prefix('[') {
        match inner.strip_suffix(']') {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6,
            _ => return Err(format!("{host:?} is not an IPv6 address in brackets")),
        }
    } else if host.contains(':') {
        return Err(format!("an IPv6 host goes in brackets; {form}"));
    } else if host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
    {
        host
    } else {
        return Err(format!("{host:?} is not a host name or IP address"));
    };
    Ok(Endpoint {
        host: Some(host.to_string()),
        prefix: None,
        port,
    })
}

/// `addr/len` (`[addr/len]` for IPv6) as the network's address and prefix length, if `host` is
/// written as a network.
fn network_prefix(host: &str) -> Result<Option<(String, u8)>, String> {
    let (inner, bracketed) = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(inner) => (inner, true),
        None => (host, false),
    };
    let Some((addr, len)) = inner.split_once('/') else {
        return Ok(None);
    };
    let max = match (addr.parse::<std::net::IpAddr>(), bracketed) {
        (Ok(std::net::IpAddr::V4(_)), false) => 32,
        (Ok(std::net::IpAddr::V6(_)), true) => 128,
        _ => {
            return Err(format!(
                "{addr:?} is not a network address; write \"10.0.0.0/8:5432\" or \"[fd00::/8]:443\""
            ))
        }
    };
    match len.parse::<u8>() {
        Ok(n) if n <= max && !len.starts_with('+') => Ok(Some((addr.to_string(), n))),
        _ => Err(format!(
            "prefix length {len:?} must be a number from 0 to {max}"
        )),
    }
}

fn protected_names(errs: &mut Errors<'_>, v: &Val<'_>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in as_array(errs, v, "[defaults] protected").unwrap_or_default() {
        let Some(s) = as_str(errs, item, "[defaults] protected entry") else {
            continue;
        };
        if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0', '\u{FFFD}']) {
            errs.at(
                item.span(),
                format!("protected name {s:?} must be a single file or folder name (no '/', not '.' or '..')"),
            );
        } else if out.iter().any(|p| p.to_lowercase() == s.to_lowercase()) {
            errs.at(
                item.span(),
                format!("protected name {s:?} is listed twice (names match in any letter case)"),
            );
        } else {
            out.push(s.to_string());
        }
    }
    out
}

pub(super) fn parse(text: &str) -> Result<Policy, Vec<PolicyError>> {
    let mut errs = Errors {
        text,
        found: Vec::new(),
    };
    let (doc, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in syntax {
            errs.at(
                e.span().unwrap_or(0..0),
                format!("TOML syntax: {}", e.message()),
            );
        }
        return Err(errs.finish());
    }
    let root = doc.get_ref();
    unknown_keys(&mut errs, root, TOP_KEYS, "the policy");

    match get(root, "version") {
        None => errs.at(
            0..0,
            format!("missing `version = {POLICY_VERSION}` at the top of the policy"),
        ),
        Some((_, v)) => match int_value(v.get_ref()) {
            Some(Some(n)) if n == i128::from(POLICY_VERSION) => {}
            Some(_) => errs.at(
                v.span(),
                format!("unsupported policy version; this ClawFS reads version {POLICY_VERSION}"),
            ),
            None => type_err(&mut errs, v, "version", "an integer"),
        },
    }

    let mut users = UsersMode::default();
    if let Some((_, v)) = get(root, "users") {
        if let Some(s) = as_str(&mut errs, v, "users") {
            let modes = [UsersMode::Posix, UsersMode::ReadOnly, UsersMode::None];
            match modes.into_iter().find(|m| m.as_str() == s) {
                Some(m) => users = m,
                None => {
                    let names: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
                    errs.at(
                        v.span(),
                        format!("unknown users mode \"{s}\"; expected {}", one_of(&names)),
                    );
                }
            }
        }
    }

    let mut admins: BTreeMap<u32, Range<usize>> = BTreeMap::new();
    if let Some((_, v)) = get(root, "admins") {
        for item in as_array(&mut errs, v, "admins").unwrap_or_default() {
            if let Some(uid) = as_id(&mut errs, item, "an admins entry") {
                admins.insert(uid, item.span());
            }
        }
    }

    let mut read_other_agents = false;
    let mut protected: Vec<String> = DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect();
    let mut default_quota = (None, None);
    let mut default_workspaces = WorkspaceGrants::default();
    let mut backups = BackupRetention::default();
    if let Some((_, v)) = get(root, "defaults") {
        if let Some(t) = as_table(&mut errs, v, "[defaults]") {
            unknown_keys(&mut errs, t, DEFAULTS_KEYS, "[defaults]");
            if let Some((_, v)) = get(t, "read_other_agents") {
                read_other_agents =
                    as_bool(&mut errs, v, "[defaults] read_other_agents").unwrap_or(false);
            }
            if let Some((_, v)) = get(t, "protected") {
                protected = protected_names(&mut errs, v);
            }
            if let Some((_, v)) = get(t, "quota") {
                default_quota = quota_table(&mut errs, v, "[defaults] quota");
            }
            if let Some((_, v)) = get(t, "workspaces") {
                default_workspaces = workspace_grants(&mut errs, v, "[defaults] workspaces");
            }
            if let Some((_, v)) = get(t, "backups") {
                backups = backups_table(&mut errs, v);
            }
        }
    }

    let mut raw_agents: Vec<RawAgent> = Vec::new();
    if let Some((_, v)) = get(root, "agents") {
        if let Some(t) = as_table(&mut errs, v, "[agents]") {
            for (k, v) in t.iter() {
                let name = k.get_ref().as_ref();
                match AgentName::new(name) {
                    Ok(n) => raw_agents.push(agent_table(&mut errs, n, v)),
                    Err(e) => errs.at(
                        k.span(),
                        format!("agent name '{name}' is invalid: it {}", reason(e)),
                    ),
                }
            }
        }
    }
    let known: BTreeSet<String> = raw_agents
        .iter()
        .map(|a| a.spec.name.as_str().to_string())
        .collect();

    // Cross-checks: every uid names one agent and no admin; read_agents name known agents.
    let mut uid_map: BTreeMap<u32, AgentName> = BTreeMap::new();
    for a in &raw_agents {
        let (Some(uid), Some(span)) = (a.spec.uid, &a.uid_span) else {
            continue;
        };
        if uid == 0 {
            // Root outside an agent cgroup stays the admin; allow_root agents are identified
            // by their cgroup only.
            continue;
        }
        if let Some(other) = uid_map.get(&uid) {
            errs.at(
                span.clone(),
                format!(
                    "uid {uid} of agent {} is already agent {other}'s uid; each agent needs its own uid",
                    a.spec.name
                ),
            );
        } else {
            uid_map.insert(uid, a.spec.name.clone());
        }
    }
    if let Some((_, v)) = get(root, "uids") {
        if let Some(t) = as_table(&mut errs, v, "[uids]") {
            for (k, v) in t.iter() {
                let key = k.get_ref().as_ref();
                let uid = match key.parse::<u32>() {
                    Ok(u) if u != u32::MAX => u,
                    _ => {
                        errs.at(
                            k.span(),
                            format!("[uids] key '{key}' is not a uid (a number)"),
                        );
                        continue;
                    }
                };
                if uid == 0 {
                    errs.at(k.span(), "[uids] cannot map uid 0 (root) to an agent");
                    continue;
                }
                let Some(agent) = as_str(&mut errs, v, &format!("[uids] {key}")) else {
                    continue;
                };
                if !known.contains(agent) {
                    errs.at(
                        v.span(),
                        format!("[uids] maps uid {uid} to unknown agent '{agent}'; add [agents.{agent}] or fix the name"),
                    );
                    continue;
                }
                match uid_map.get(&uid) {
                    Some(other) if other.as_str() != agent => errs.at(
                        k.span(),
                        format!("[uids] maps uid {uid} to {agent}, but it is agent {other}'s uid"),
                    ),
                    Some(_) => {}
                    None => {
                        let name = AgentName::new(agent).expect("known agents have valid names");
                        uid_map.insert(uid, name);
                    }
                }
            }
        }
    }
    for (uid, span) in &admins {
        if let Some(agent) = uid_map.get(uid) {
            errs.at(
                span.clone(),
                format!("uid {uid} is listed in admins but is also agent {agent}'s uid; a uid is one or the other"),
            );
        }
    }

    let mut agents = BTreeMap::new();
    for mut a in raw_agents {
        for (other, span) in &a.read_agents {
            match AgentName::new(other) {
                Ok(n) if known.contains(other.as_str()) => {
                    a.spec.read_agents.insert(n);
                }
                _ => errs.at(
                    span.clone(),
                    format!(
                        "[agents.{}] read_agents names unknown agent '{other}'; use an agent from [agents] or \"*\"",
                        a.spec.name
                    ),
                ),
            }
        }
        a.spec.quota = Quota {
            bytes: a.quota.0.or(default_quota.0).unwrap_or(Quota::UNLIMITED),
            files: a.quota.1.or(default_quota.1).unwrap_or(Quota::UNLIMITED),
        };
        agents.insert(a.spec.name.clone(), a.spec);
    }

    if !errs.found.is_empty() {
        return Err(errs.finish());
    }
    let protected_folded = protected.iter().map(|p| p.to_lowercase()).collect();
    Ok(Policy {
        users,
        admins: admins.into_keys().collect(),
        read_other_agents,
        protected,
        protected_folded,
        default_workspaces,
        backups,
        agents,
        uid_map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("42"), Ok(42));
        assert_eq!(parse_size("7b"), Ok(7));
        assert_eq!(parse_size("unlimited"), Ok(Quota::UNLIMITED));
        for bad in [
            "",
            "1.5GiB",
            "1G",
            "GiB",
            "-1MiB",
            "1 parsec",
            "99999999999TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn line_columns() {
        let t = "ab\ncdé\nf";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 6), (2, 3)); // inside 'é': its start
        assert_eq!(line_col(t, 7), (2, 4));
        assert_eq!(line_col(t, 8), (3, 1));
        assert_eq!(line_col(t, 999), (3, 2));
    }
}
