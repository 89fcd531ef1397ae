//! Who is calling and what they may do: the identity of each request (cgroup → agent, uid
//! mapping, admin, user), the policy decision on every call that reaches the daemon, the audit
//! record of each decision, the per-agent denials file, and quotas.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::ClawFs;
use crate::audit::{AuditEvent, AuditLog};
use crate::backing::proc_fd_path;
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::inodes::Node;
use crate::policy::{Access, AgentName, Denial, Identity, NsPath, Policy, PolicyError, Quota};

/// How long a pid's identity is trusted before `/proc/<pid>/cgroup` is read again. A pid reused
/// within this time by another process of a different identity is the residual risk.
const IDENTITY_TTL: Duration = Duration::from_secs(1);
/// Denials kept in `agents/<name>/denials`.
pub const MAX_DENIALS: usize = 1000;
/// The policy file in force, relative to the store.
pub const POLICY_FILE: &str = "system/policy.toml";

/// Identity, policy, audit and quota state of a mount. Its locks are leaves (see `ClawFs`'s
/// `# Locks`), but `denials`, held across the rewrite of one denials file.
pub struct Gate {
    /// The policy in force; readers clone the `Arc` (leaf).
    policy: RwLock<Arc<Policy>>,
    /// pid → identity, for [`IDENTITY_TTL`]; `/proc` is read outside the lock (leaf).
    identities: Mutex<HashMap<u32, (Instant, Identity)>>,
    store_owner: u32,
    audit: OnceLock<Arc<AuditLog>>,
    /// The last [`MAX_DENIALS`] lines of each agent's denials file, held while it is rewritten.
    denials: Mutex<HashMap<String, VecDeque<String>>>,
    /// Bytes and files each agent has written, and whether that changed since it was saved
    /// (leaf).
    usage: Mutex<(HashMap<String, Quota>, bool)>,
    /// The emergency stop in force (`.clawfs/estop`, as read last), if any (leaf).
    estop: RwLock<Option<serde_json::Value>>,
    /// Whether [`Self::estop`] holds a stop: checked on every mutating decision.
    estop_on: std::sync::atomic::AtomicBool,
    /// The last EACCES/EPERM answers (caller pid, `CLOCK_MONOTONIC` ns), so that a refusal seen
    /// from the kernel side ([`ClawFs::answered_refusal`]) is not recorded twice.
    refusals: Mutex<VecDeque<(u32, u64)>>,
}

/// EACCES/EPERM answers remembered for [`ClawFs::answered_refusal`].
const RECENT_REFUSALS: usize = 1024;

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

thread_local! {
    /// The decisions of the request this thread is serving, recorded with its outcome by
    /// [`ClawFs::audited`]. FUSE requests run start to end on one thread.
    static PENDING: std::cell::RefCell<Vec<AuditEvent>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where quota usage is kept across restarts, relative to the store's private area.
pub const QUOTA_USAGE_FILE: &str = "quota-usage.json";
/// The emergency stop flag (`clawfs estop`), relative to the store's private area.
pub const ESTOP_FILE: &str = "estop";
/// What the daemon last saw of the flag (`{"in_force", "id"}`), written on every refresh, so
/// `clawfs estop` knows the daemon has taken the change.
pub const ESTOP_SEEN_FILE: &str = "estop-seen.json";
/// The rule behind a refusal while an emergency stop is in force.
pub const ESTOP_RULE: &str = "ESTOP";
/// What an agent is told while an emergency stop is in force.
pub const ESTOP_REASON: &str = "an emergency stop is in force (clawfs estop): agents may not change anything or call tools until an admin runs `clawfs estop --clear`";

impl Gate {
    /// A gate with `policy`, for a store owned by `store_owner`.
    pub fn new(policy: Policy, store_owner: u32) -> Self {
        Self {
            policy: RwLock::new(Arc::new(policy)),
            identities: Mutex::default(),
            store_owner,
            audit: OnceLock::new(),
            denials: Mutex::default(),
            usage: Mutex::new((HashMap::new(), false)),
            estop: RwLock::new(None),
            estop_on: std::sync::atomic::AtomicBool::new(false),
            refusals: Mutex::default(),
        }
    }
}

/// The audit event of a decision about `op` on `path` (and `target`) by `who`.
fn event(
    caller: &Caller,
    who: &Identity,
    op: &'static str,
    path: &NsPath,
    target: Option<&NsPath>,
) -> AuditEvent {
    let ev = AuditEvent::new(audit_name(who), caller.pid, op, path.to_string());
    match target {
        Some(t) => ev.target(t.to_string()),
        None => ev,
    }
}

/// The name an audit record gives an identity.
pub fn audit_name(who: &Identity) -> String {
    match who {
        Identity::Admin => "admin".into(),
        Identity::Agent(a) => a.as_str().to_string(),
        Identity::User { uid } => format!("user:{uid}"),
    }
}

impl ClawFs {
    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(
            &self
                .gate
                .policy
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Re-reads `system/policy.toml`; an invalid file is refused and the old policy stays.
    pub fn reload_policy(&self) -> Result<(), Vec<PolicyError>> {
        // SIGHUP is also how `clawfs estop` reaches the daemon: the flag is re-read first, so
        // an invalid policy never delays a stop.
        self.refresh_estop();
        let path = self.store.root().join(POLICY_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            vec![PolicyError {
                line: 0,
                column: 0,
                message: format!("{}: {e}", path.display()),
            }]
        })?;
        let policy = Policy::parse(&text)?;
        *self
            .gate
            .policy
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
        self.gate
            .identities
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.record(AuditEvent::new(
            "admin",
            0,
            "policy:reload",
            format!("/{POLICY_FILE}"),
        ));
        Ok(())
    }

    /// Starts recording decisions in `audit`.
    pub fn set_audit(&self, audit: Arc<AuditLog>) {
        let _ = self.gate.audit.set(audit);
    }

    /// The audit trail, if one is attached.
    pub fn audit_log(&self) -> Option<&Arc<AuditLog>> {
        self.gate.audit.get()
    }

    pub(super) fn record(&self, event: AuditEvent) {
        if matches!(event.errno, Some(libc::EACCES | libc::EPERM)) {
            let mut recent = self
                .gate
                .refusals
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if recent.len() >= RECENT_REFUSALS {
                recent.pop_front();
            }
            recent.push_back((event.pid, monotonic_ns()));
        }
        if let Some(a) = self.gate.audit.get() {
            a.record(event);
        }
    }

    /// Whether this daemon answered the request of thread `tid` with EACCES or EPERM (and
    /// recorded it) between `from_ns` and `to_ns` ([`monotonic_ns`]): a refusal the kernel
    /// reports for that thread's call of that time is then this daemon's, already on record.
    pub fn answered_refusal(&self, tid: u32, (from_ns, to_ns): (u64, u64)) -> bool {
        self.gate
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|&(pid, at)| pid == tid && (from_ns..=to_ns).contains(&at))
    }

    /// The namespace path of inode `ino` (as the kernel knows it: `st_ino` through the mount),
    /// if it is a live node of the store.
    pub fn ns_path_of_ino(&self, ino: u64) -> Option<NsPath> {
        let node = self.inodes.get(ino)?;
        let fd = self.open_path(&node).ok()?;
        self.node_path(&node, &*fd).ok()
    }

    /// Records a refusal the daemon did not decide — the kernel refused a system call of an
    /// agent process (file mode bits on the mount, the sandbox's Landlock, seccomp or network
    /// rules) — and adds it to the agent's denials file. `ev` is the complete denied record.
    pub fn record_kernel_refusal(&self, ev: AuditEvent) {
        if let Ok(agent) = AgentName::new(&ev.agent) {
            let line = serde_json::json!({
                "time": crate::seed::now_rfc3339(),
                "operation": ev.operation,
                "path": ev.path,
                "target": ev.target,
                "rule": ev.rule,
                "reason": ev.reason,
            });
            self.append_denial(&agent, line.to_string());
        }
        if let Some(a) = self.gate.audit.get() {
            a.record(ev);
        }
    }

    /// Who `caller` is: an agent by its cgroup (what `clawfs run` set up, which the process
    /// cannot leave), else by the policy's uid mapping, else admin (root, the store owner, the
    /// policy's admins) or an ordinary user. Nothing the caller can write is consulted.
    pub fn identify(&self, caller: &Caller) -> Identity {
        if caller.pid != 0 {
            let cache = self
                .gate
                .identities
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some((at, who)) = cache.get(&caller.pid) {
                if at.elapsed() < IDENTITY_TTL {
                    return who.clone();
                }
            }
        }
        let policy = self.policy();
        let by_cgroup = match crate::cgroup::agent_of_pid(caller.pid) {
            Ok(Some(agent)) => AgentName::new(&agent).ok(),
            _ => None,
        };
        let who = match by_cgroup {
            Some(agent) => Identity::Agent(agent),
            None => policy.identity_for_uid(caller.uid, self.gate.store_owner),
        };
        if caller.pid != 0 {
            let mut cache = self
                .gate
                .identities
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if cache.len() > 4096 {
                cache.retain(|_, (at, _)| at.elapsed() < IDENTITY_TTL);
            }
            cache.insert(caller.pid, (Instant::now(), who.clone()));
        }
        who
    }

    /// The namespace path of an open backing descriptor (`/workspaces/default/notes.md`).
    pub(super) fn ns_path(&self, fd: impl AsFd) -> FsResult<NsPath> {
        let real = match std::fs::read_link(OsStr::from_bytes(proc_fd_path(&fd.as_fd()).as_bytes()))
        {
            Ok(real) => real,
            // Longer than the kernel names (a page): rebuilt from the names it was reached by.
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                return self.ns_path_by_links(fd.as_fd())
            }
            Err(e) => return Err(e.into()),
        };
        let rel = real
            .strip_prefix(self.store.root())
            .map_err(|_| FsError::Io(std::io::Error::from_raw_os_error(libc::ESTALE)))?;
        Ok(NsPath::from_components(
            rel.components().map(|c| c.as_os_str()),
        )?)
    }

    /// The namespace path of the node open as `fd`, from the directory and name each node on
    /// the way up was last reached by, each step checked against the store (the name still
    /// leads to that inode), so a stale name is an error, never a wrong path.
    fn ns_path_by_links(&self, fd: std::os::fd::BorrowedFd<'_>) -> FsResult<NsPath> {
        let stale = || FsError::Io(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        let st = rustix::fs::fstat(fd)?;
        let (mut ino, mut backing_ino) = (self.inodes.mount_ino(st.st_ino), st.st_ino);
        let mut names = Vec::new();
        while ino != crate::inodes::ROOT_INO {
            let node = self.inodes.get(ino).ok_or_else(stale)?;
            let (parent, name) = node.link.as_deref().ok_or_else(stale)?;
            let pnode = self.inodes.get(*parent).ok_or_else(stale)?;
            let dir = self.open_path(&pnode)?;
            let child = rustix::fs::statat(&*dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
            if child.st_ino != backing_ino {
                return Err(stale());
            }
            names.push(name.clone());
            backing_ino = rustix::fs::fstat(&*dir)?.st_ino;
            ino = *parent;
        }
        Ok(NsPath::from_components(
            names.iter().rev().map(|n| n.as_os_str()),
        )?)
    }

    /// The namespace path of `node`, reached through `fd` (a descriptor of it) unless cached.
    pub(super) fn node_path(&self, node: &Node, fd: impl AsFd) -> FsResult<NsPath> {
        if let Some(path) = self.paths.get(&node.handle) {
            return Ok(path);
        }
        let generation = self.paths.generation();
        let path = self.ns_path(fd)?;
        self.paths.insert(generation, &node.handle, &path);
        Ok(path)
    }

    /// Forgets cached namespace paths: something was renamed.
    pub(crate) fn paths_changed(&self) {
        self.paths.clear();
    }

    /// `dir`'s namespace path joined with `name`.
    pub(super) fn ns_child(&self, dir: impl AsFd, name: &OsStr) -> FsResult<NsPath> {
        Ok(self.ns_path(dir)?.join(name)?)
    }

    /// Decides `access` to `path` for `caller`, records the decision, and on refusal writes the
    /// agent's denials file. `op` names the operation in the record.
    pub(super) fn decide(
        &self,
        caller: &Caller,
        op: &'static str,
        access: Access,
        path: &NsPath,
    ) -> FsResult<Identity> {
        let who = self.identify(caller);
        let verdict = match access.is_read() {
            true => Ok(()),
            false => self.estop_check(&who),
        }
        .and_then(|()| self.policy().check(&who, access, path));
        self.conclude(caller, &who, op, path, None, verdict)?;
        Ok(who)
    }

    /// Like [`Self::decide`] for a rename (`exchange`: both ways) or a link.
    pub(super) fn decide_move(
        &self,
        caller: &Caller,
        op: &'static str,
        from: &NsPath,
        to: &NsPath,
        exchange: bool,
    ) -> FsResult<Identity> {
        let who = self.identify(caller);
        let policy = self.policy();
        let verdict = self.estop_check(&who).and_then(|()| match op {
            "link" => policy.check_link(&who, from, to),
            _ if exchange => policy
                .check_move(&who, from, to)
                .and_then(|()| policy.check_move(&who, to, from)),
            _ => policy.check_move(&who, from, to),
        });
        self.conclude(caller, &who, op, from, Some(to), verdict)?;
        Ok(who)
    }

    /// Decides creating `name` in the directory `pnode` (reached through `dir`), and the file
    /// it adds to the caller's quota; returns the caller and the new node's path.
    pub(super) fn decide_create(
        &self,
        caller: &Caller,
        op: &'static str,
        pnode: &Node,
        dir: impl AsFd,
        name: &OsStr,
    ) -> FsResult<(Identity, NsPath)> {
        let path = self.node_path(pnode, dir)?.join(name)?;
        let who = self.decide(caller, op, Access::Create, &path)?;
        self.decide_quota(caller, &who, op, &path, Quota { bytes: 0, files: 1 }, true)?;
        Ok((who, path))
    }

    /// Checks that `who` may add `adding` (files, bytes) to what it has written; `commit`
    /// counts it.
    pub(super) fn decide_quota(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &NsPath,
        adding: Quota,
        commit: bool,
    ) -> FsResult<()> {
        let Identity::Agent(agent) = who else {
            return Ok(());
        };
        let used = self.usage(agent);
        let verdict = self.policy().check_quota(who, used, adding);
        if verdict.is_ok() && commit {
            self.add_usage(agent, adding);
        }
        self.conclude_refusal(caller, who, op, path, None, verdict)
    }

    /// Whether `who` is an agent with a byte quota, whose writes are charged one by one.
    pub(super) fn metered(&self, who: &Identity) -> bool {
        match who {
            Identity::Agent(agent) => self.policy().quota(agent).bytes != Quota::UNLIMITED,
            _ => false,
        }
    }

    /// Charges the growth of a write ending at `end` (what it adds past the file's current
    /// size) to the metered writer `w`; see [`Self::charge`].
    pub(super) fn charge_growth(
        &self,
        w: &crate::open_files::WriteHandle,
        op: &'static str,
        end: u64,
        file: &crate::open_files::OpenFile,
    ) -> FsResult<()> {
        let size = file.backing.file.metadata()?.len();
        self.charge(w, op, end.saturating_sub(size))
    }

    /// Charges `bytes` to the metered writer `w`; refused with EDQUOT (audited, and in the
    /// agent's denials file) when it would cross the quota.
    pub(super) fn charge(
        &self,
        w: &crate::open_files::WriteHandle,
        op: &'static str,
        bytes: u64,
    ) -> FsResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        let caller = Caller {
            uid: 0,
            gid: 0,
            pid: w.pid,
        };
        let adding = Quota { bytes, files: 0 };
        self.decide_quota(&caller, &w.who, op, &w.path, adding, true)
    }

    pub(super) fn usage(&self, agent: &AgentName) -> Quota {
        let usage = self
            .gate
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        usage
            .0
            .get(agent.as_str())
            .copied()
            .unwrap_or(Quota { bytes: 0, files: 0 })
    }

    /// Loads the quota usage saved by a previous daemon (none if there is none).
    pub(super) fn load_usage(&self) {
        // A stop recorded before this daemon started is in force from its first request.
        self.set_estop(self.read_estop());
        let path = Path::new(crate::store::PRIVATE_DIR).join(QUOTA_USAGE_FILE);
        let Ok(Some(text)) = crate::beneath::read(self.store.root_fd(), &path, 16 << 20) else {
            return;
        };
        let text = String::from_utf8_lossy(&text);
        let Ok(saved) = serde_json::from_str::<HashMap<String, (u64, u64)>>(&text) else {
            tracing::warn!(path = %path.display(), "unreadable quota usage; counting from zero");
            return;
        };
        let mut usage = self
            .gate
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        usage.0 = saved
            .into_iter()
            .map(|(a, (bytes, files))| (a, Quota { bytes, files }))
            .collect();
    }

    /// Saves the quota usage if it changed (atomically), so it survives a restart.
    pub fn save_usage(&self) {
        let snapshot: HashMap<String, (u64, u64)> = {
            let mut usage = self
                .gate
                .usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !usage.1 {
                return;
            }
            usage.1 = false;
            usage
                .0
                .iter()
                .map(|(a, q)| (a.clone(), (q.bytes, q.files)))
                .collect()
        };
        let json = serde_json::to_vec(&snapshot).expect("a map serialises");
        let dir = Path::new(crate::store::PRIVATE_DIR);
        let how = crate::beneath::FileMode::mode(0o600);
        if let Err(e) = self.store.write_beneath(dir, QUOTA_USAGE_FILE, &json, how) {
            tracing::warn!(error = %e, "could not save quota usage");
        }
    }

    /// Adds to an agent's usage (bytes written are counted when a handle is closed).
    pub(super) fn add_usage(&self, agent: &AgentName, adding: Quota) {
        let mut usage = self
            .gate
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let u = usage
            .0
            .entry(agent.as_str().to_string())
            .or_insert(Quota { bytes: 0, files: 0 });
        u.bytes = u.bytes.saturating_add(adding.bytes);
        u.files = u.files.saturating_add(adding.files);
        usage.1 = true;
    }

    /// Records a refusal by ClawFS's fixed namespace rules (read-only areas, naming rules,
    /// managed files, areas) and returns the error unchanged. `name` is the child the call was
    /// about, if any.
    pub(super) fn rule_refusal(
        &self,
        caller: &Caller,
        op: &'static str,
        node: &crate::inodes::Node,
        name: Option<&OsStr>,
        e: FsError,
    ) -> FsError {
        let path = self.open_path(node).ok().and_then(|fd| match name {
            Some(n) => self.ns_child(&fd, n).ok(),
            None => self.ns_path(&fd).ok(),
        });
        let path = path.map_or_else(|| "?".to_string(), |p| p.to_string());
        let who = self.identify(caller);
        PENDING.with(|p| p.borrow_mut().clear());
        self.record(
            AuditEvent::new(audit_name(&who), caller.pid, op, path.clone()).denied(
                e.errno(),
                crate::policy::rule::NAMESPACE,
                e.to_string(),
            ),
        );
        if let (Identity::Agent(agent), Ok(ns)) = (&who, NsPath::parse(&path)) {
            let denial = Denial {
                rule: crate::policy::rule::NAMESPACE,
                reason: e.to_string(),
                kind: crate::policy::DenyKind::Permission,
            };
            self.write_denial(agent, op, &ns, None, &denial);
        }
        e
    }

    /// Records a refusal decided outside the policy (e.g. an invalid identity document).
    pub(super) fn refuse(
        &self,
        caller: &Caller,
        op: &'static str,
        path: &NsPath,
        denial: Denial,
    ) -> FsResult<()> {
        let who = self.identify(caller);
        self.conclude_refusal(caller, &who, op, path, None, Err(denial))
    }

    fn conclude(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &NsPath,
        target: Option<&NsPath>,
        verdict: Result<(), Denial>,
    ) -> FsResult<()> {
        if verdict.is_ok() {
            // Recorded when the operation has run, with its outcome (see `audited`).
            PENDING.with(|p| p.borrow_mut().push(event(caller, who, op, path, target)));
        }
        self.conclude_refusal(caller, who, op, path, target, verdict)
    }

    /// Runs one request's core call and records what it decided with the final outcome: the
    /// allowed operation as ok, or as failed with the errno the caller gets (ENOSPC, ENOTEMPTY,
    /// EDQUOT…). A refusal is recorded where it is decided, as the operation's only record.
    /// Wraps the calls that decide (namespace and metadata operations, opens); data calls
    /// (read, write, release) decide nothing and are not wrapped.
    pub fn audited<T>(&self, call: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        PENDING.with(|p| p.borrow_mut().clear());
        let result = call();
        let decided = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
        for ev in decided {
            self.record(match &result {
                Ok(_) => ev,
                Err(e) => ev.failed(e.errno()).reason(e.to_string()),
            });
        }
        result
    }

    fn conclude_refusal(
        &self,
        caller: &Caller,
        who: &Identity,
        op: &'static str,
        path: &NsPath,
        target: Option<&NsPath>,
        verdict: Result<(), Denial>,
    ) -> FsResult<()> {
        let Err(denial) = verdict else {
            return Ok(());
        };
        // The refusal is the operation's record: what was allowed before it (the access, when
        // the quota refuses) did not happen.
        PENDING.with(|p| p.borrow_mut().clear());
        let errno = crate::policy::errno_of(denial.kind);
        let ev =
            event(caller, who, op, path, target).denied(errno, denial.rule, denial.reason.clone());
        self.record(ev);
        if let Identity::Agent(agent) = who {
            self.write_denial(agent, op, path, target, &denial);
        }
        Err(FsError::Denied(denial))
    }

    /// Appends to `agents/<agent>/denials`, keeping the last [`MAX_DENIALS`].
    pub(super) fn write_denial(
        &self,
        agent: &AgentName,
        op: &str,
        path: &NsPath,
        target: Option<&NsPath>,
        denial: &Denial,
    ) {
        let line = serde_json::json!({
            "time": crate::seed::now_rfc3339(),
            "operation": op,
            "path": path.to_string(),
            "target": target.map(|t| t.to_string()),
            "rule": denial.rule,
            "reason": denial.reason,
        })
        .to_string();
        self.append_denial(agent, line);
    }

    /// Appends one JSON line to `agents/<agent>/denials`, keeping the last [`MAX_DENIALS`].
    fn append_denial(&self, agent: &AgentName, line: String) {
        // The agent's directory is writable by the agent: reached by descriptor, with no
        // symlink followed, so a planted link never redirects this root write.
        let dir = Path::new("agents").join(agent.as_str());
        let mut all = self
            .gate
            .denials
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mine = all.entry(agent.as_str().to_string()).or_insert_with(|| {
            crate::beneath::read(self.store.root_fd(), &dir.join("denials"), 4 << 20)
                .ok()
                .flatten()
                .map(|t| {
                    String::from_utf8_lossy(&t)
                        .lines()
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        });
        mine.push_back(line);
        while mine.len() > MAX_DENIALS {
            mine.pop_front();
        }
        let mut text = mine
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n");
        text.push('\n');
        let how = crate::beneath::FileMode {
            mode: 0o640,
            owner: Some((0, crate::seed::agents_group().unwrap_or(0))),
        };
        match self
            .store
            .write_beneath(&dir, "denials", text.as_bytes(), how)
        {
            Ok(()) => {}
            // An agent without a directory has no denials file.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(agent = agent.as_str(), error = %e, "could not write the denials file")
            }
        }
    }
}

// ---- emergency stop -----------------------------------------------------------------------

impl ClawFs {
    /// The emergency stop in force (the JSON `clawfs estop` wrote), if any.
    pub fn estop(&self) -> Option<serde_json::Value> {
        self.gate
            .estop
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether an emergency stop is in force.
    pub fn estop_in_force(&self) -> bool {
        self.gate
            .estop_on
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The flag as the store holds it now (an unreadable flag is a stop: failing closed).
    fn read_estop(&self) -> Option<serde_json::Value> {
        let path = Path::new(crate::store::PRIVATE_DIR).join(ESTOP_FILE);
        match crate::beneath::read(self.store.root_fd(), &path, 1 << 16) {
            Ok(None) => None,
            Ok(Some(bytes)) => Some(
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| serde_json::json!({"by": "?", "unreadable": true})),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "unreadable emergency stop flag; treated as in force");
                Some(serde_json::json!({"by": "?", "unreadable": true}))
            }
        }
    }

    fn set_estop(&self, flag: Option<serde_json::Value>) {
        let on = flag.is_some();
        *self
            .gate
            .estop
            .write()
            .unwrap_or_else(PoisonError::into_inner) = flag;
        self.gate
            .estop_on
            .store(on, std::sync::atomic::Ordering::Release);
    }

    /// Re-reads `.clawfs/estop` (on SIGHUP, and periodically); a change is recorded on the
    /// audit trail as `estop:on` / `estop:off`, and what was seen is acknowledged in
    /// `.clawfs/estop-seen.json`. Returns whether a stop is in force.
    pub fn refresh_estop(&self) -> bool {
        let now = self.read_estop();
        let before = self.estop();
        let id = |f: &Option<serde_json::Value>| f.as_ref().map(|v| v["id"].clone());
        if now != before {
            let (op, flag) = match &now {
                Some(f) => ("estop:on", f),
                None => ("estop:off", before.as_ref().expect("a change from a stop")),
            };
            let by = match op {
                "estop:off" => "admin".to_string(),
                _ => flag["by"].as_str().unwrap_or("admin").to_string(),
            };
            tracing::warn!(op, by = %by, "emergency stop changed");
            self.record(AuditEvent::new("admin", 0, op, "/").reason(format!("by {by}")));
            self.set_estop(now.clone());
        }
        let (in_force, seen_id) = (now.is_some(), id(&now).or_else(|| id(&before)));
        let dir = Path::new(crate::store::PRIVATE_DIR);
        let acked = crate::beneath::read(self.store.root_fd(), &dir.join(ESTOP_SEEN_FILE), 4096)
            .ok()
            .flatten()
            .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["in_force"] == in_force && Some(&v["id"]) == seen_id.as_ref());
        if acked || (!in_force && seen_id.is_none()) {
            return in_force;
        }
        let seen = serde_json::json!({
            "in_force": in_force,
            "id": seen_id,
            "at": crate::seed::now_rfc3339(),
        });
        let how = crate::beneath::FileMode::mode(0o644);
        if let Err(e) =
            self.store
                .write_beneath(dir, ESTOP_SEEN_FILE, seen.to_string().as_bytes(), how)
        {
            tracing::warn!(error = %e, "could not acknowledge the emergency stop");
        }
        now.is_some()
    }

    /// Refuses an agent while a stop is in force; admins and users keep working.
    fn estop_check(&self, who: &Identity) -> Result<(), Denial> {
        match who {
            Identity::Agent(_) if self.estop_in_force() => Err(Denial {
                rule: ESTOP_RULE,
                reason: ESTOP_REASON.to_string(),
                kind: crate::policy::DenyKind::Permission,
            }),
            _ => Ok(()),
        }
    }

    /// Before a tool call on the open generated file `fh` runs (its first read, its close):
    /// while a stop is in force, an agent's call is answered `denied` instead of running,
    /// audited with rule ESTOP and written to the agent's denials file.
    pub(super) fn estop_tool_call(&self, fh: u64) {
        if !self.estop_in_force() {
            return;
        }
        let Ok(handle) = self.vfiles.get(fh) else {
            return;
        };
        let Identity::Agent(agent) = &handle.opener.0 else {
            return;
        };
        let request = match &handle.node {
            crate::virtual_files::VirtualNode::Call(_) => None,
            crate::virtual_files::VirtualNode::Request { owner, id } => {
                Some((owner.clone(), id.clone()))
            }
            _ => return,
        };
        let mut state = handle.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.response.is_some() {
            return;
        }
        let tool = match &handle.node {
            crate::virtual_files::VirtualNode::Call(t) => t.clone(),
            _ => serde_json::from_slice::<serde_json::Value>(&state.request)
                .ok()
                .and_then(|v| v["tool"].as_str().map(str::to_string))
                .unwrap_or_else(|| "?".into()),
        };
        let out = clawfs_agent_tools::render(Err(clawfs_agent_tools::ToolError::Denied(
            ESTOP_REASON.to_string(),
        )));
        let op = format!("tool:{tool}");
        let pid = handle.opener.1.caller.pid;
        self.record(
            AuditEvent::new(agent.as_str(), pid, op.clone(), "/tools").denied(
                libc::EPERM,
                ESTOP_RULE,
                ESTOP_REASON,
            ),
        );
        let denial = Denial {
            rule: ESTOP_RULE,
            reason: ESTOP_REASON.to_string(),
            kind: crate::policy::DenyKind::Permission,
        };
        if let Ok(ns) = NsPath::parse("/tools") {
            self.write_denial(agent, &op, &ns, None, &denial);
        }
        let Some((owner, id)) = request else {
            state.response = Some(out);
            return;
        };
        // A two-file request: its answer is kept for tools/responses/<id>.json.
        state.response = Some(Vec::new());
        drop(state);
        self.keep_response(owner, id, out);
    }
}
