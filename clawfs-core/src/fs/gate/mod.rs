//! Who is calling and what they may do: the identity of each request (cgroup → agent, uid
//! mapping, admin, user), the policy decision on every call that reaches the daemon, the audit
//! record of each decision, the per-agent denials file, and quotas.

use clawfs_store::ToErrno;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::ClawFs;
use crate::creds::Caller;
use crate::error::{FsError, FsResult};
use crate::generated_files::GeneratedNode;
use crate::inodes::Node;
use clawfs_audit::{AuditEvent, AuditLog};
use clawfs_policy::{Access, AgentName, Denial, Identity, NsPath, Policy, PolicyError, Quota};
use clawfs_store::backing::proc_fd_path;

mod estop;
mod paths;
mod quota;
mod tool_ledger;

pub(in crate::fs) use tool_ledger::{Promised, ToolLedger};

/// A caller's pid, uid and gid: what the identity cache is keyed by.
type Credentials = (u32, u32, u32);

/// How long a pid's identity is trusted before `/proc/<pid>/cgroup` is read again. The cache is
/// keyed by pid, uid and gid: a pid reused within this time by a process of other credentials
/// (root's pid by an agent, one agent's by another: agents have uids of their own) misses it.
/// A pid reused within this time by another process of the same uid and gid (an agent run with
/// `--user` as a login user, and that user's own process) is the residual risk.
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
    identities: Mutex<HashMap<Credentials, (Instant, Identity)>>,
    /// The daemon's own threads acting for a caller (a WebAssembly tool's file operations go
    /// through the mount from the thread running it): thread id → the caller's uid, gid and
    /// identity, while the call runs (leaf).
    delegated: Mutex<HashMap<u32, (u32, u32, Identity)>>,
    store_owner: u32,
    audit: Option<Arc<AuditLog>>,
    /// The last [`MAX_DENIALS`] lines of each agent's denials file, held while it is rewritten.
    denials: Mutex<HashMap<String, VecDeque<String>>>,
    /// Bytes and files each owner holds, and which agent each uid is (leaf).
    pub(in crate::fs) held: Arc<crate::held::HeldUsage>,
    /// The shared store's quota count was unreadable at the last look (said once).
    pub(in crate::fs) usage_unreadable: std::sync::atomic::AtomicBool,
    /// The emergency stop in force (`.clawfs/estop`, as read last), if any (leaf).
    estop: RwLock<Option<serde_json::Value>>,
    /// Whether [`Self::estop`] holds a stop: checked on every mutating decision.
    /// Shared with the tool calls in progress, which ask it before each change they make.
    estop_on: Arc<std::sync::atomic::AtomicBool>,
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
    /// The decisions of the operation this thread is running, recorded with its outcome when
    /// it ends ([`ClawFs::audited`]); `None` outside an operation. A request runs start to end
    /// on one thread.
    static PENDING: std::cell::RefCell<Option<Vec<AuditEvent>>> = const { std::cell::RefCell::new(None) };
    /// How many records this thread has made or left to its operation's end: a call that
    /// changed neither recorded nothing ([`ClawFs::generated_call`]).
    static RECORDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Where this thread's records stand: the records made and the decisions pending.
fn trail_mark() -> (u64, usize) {
    let pending = PENDING.with(|p| p.borrow().as_ref().map_or(0, Vec::len));
    (RECORDED.with(std::cell::Cell::get), pending)
}

/// Forgets what the running operation decided and the paths it computed: it decides again.
pub(in crate::fs) fn decide_again() {
    forget_pending();
    paths::forget_anchors();
}

/// Forgets what the running operation decided so far: a refusal is its only record.
fn forget_pending() {
    PENDING.with(|p| {
        if let Some(pending) = p.borrow_mut().as_mut() {
            pending.clear();
        }
    });
}

/// Where quota usage is kept across restarts, relative to the store's private area.
pub const QUOTA_USAGE_FILE: &str = crate::shared_usage::USAGE_FILE;
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
    /// A gate with `policy`, for a store owned by `store_owner`, recording on `audit`.
    pub fn new(policy: Policy, store_owner: u32, audit: Option<Arc<AuditLog>>) -> Self {
        Self {
            policy: RwLock::new(Arc::new(policy)),
            identities: Mutex::default(),
            delegated: Mutex::default(),
            store_owner,
            audit,
            denials: Mutex::default(),
            held: Default::default(),
            usage_unreadable: Default::default(),
            estop: RwLock::new(None),
            estop_on: Arc::new(std::sync::atomic::AtomicBool::new(false)),
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

    /// Re-reads `system/policy.toml` ([`installed_policy`]); an invalid file is refused and the
    /// old policy stays.
    pub fn reload_policy(&self) -> Result<(), Vec<PolicyError>> {
        // SIGHUP is also how `clawfs estop` reaches the daemon: the flag is re-read first, so
        // an invalid policy never delays a stop.
        self.refresh_estop();
        let policy = installed_policy(self.store.root_fd())?;
        *self
            .gate
            .policy
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
        self.learn_policy_uids();
        self.policy_acls_changed();
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

    /// The audit trail, if one is attached.
    pub fn audit_log(&self) -> Option<&Arc<AuditLog>> {
        self.gate.audit.as_ref()
    }

    pub(super) fn record(&self, event: AuditEvent) {
        RECORDED.with(|r| r.set(r.get() + 1));
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
        self.to_trail(event);
    }

    /// Hands `event` to the audit trail, counting it (and a refusal, by agent of the roster,
    /// a user being `-`, and rule) on the metrics.
    fn to_trail(&self, event: AuditEvent) {
        if event.result == clawfs_audit::Outcome::Denied && clawfs_metrics::active().is_some() {
            let policy = self.policy();
            let agent = AgentName::new(&event.agent)
                .ok()
                .filter(|a| policy.agent(a).is_some());
            clawfs_metrics::refusal(
                agent.as_ref().map(AgentName::as_str),
                event.rule.as_deref().unwrap_or("-"),
            );
        }
        if let Some(a) = self.gate.audit.as_ref() {
            clawfs_metrics::audit_record();
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
                "time": clawfs_store::clock::now_rfc3339(),
                "operation": ev.operation,
                "path": ev.path,
                "target": ev.target,
                "rule": ev.rule,
                "reason": ev.reason,
            });
            self.append_denial(&agent, line.to_string());
        }
        self.to_trail(ev);
    }

    /// Who `caller` is: an agent by its cgroup (what `clawfs run` set up, which the process
    /// cannot leave), else by the policy's uid mapping, else admin (root, the store owner, the
    /// policy's admins) or an ordinary user. Nothing the caller can write is consulted.
    pub fn identify(&self, caller: &Caller) -> Identity {
        self.identify_as_of(caller, IDENTITY_TTL)
    }

    /// [`Self::identify`], read from `/proc` now: for what the daemon carries out as the caller
    /// with no permission check of the kernel's before it (see [`Credentials::fresh`]).
    ///
    /// [`Credentials::fresh`]: crate::creds::Credentials::fresh
    pub fn identify_fresh(&self, caller: &Caller) -> Identity {
        self.identify_as_of(caller, Duration::ZERO)
    }

    /// The caller's identity, from the cache if read within `ttl`.
    fn identify_as_of(&self, caller: &Caller, ttl: Duration) -> Identity {
        if let Some(who) = self.delegated_identity(caller) {
            return who;
        }
        if caller.pid != 0 && !ttl.is_zero() {
            let cache = self
                .gate
                .identities
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some((at, who)) = cache.get(&(caller.pid, caller.uid, caller.gid)) {
                if at.elapsed() < ttl {
                    return who.clone();
                }
            }
        }
        let policy = self.policy();
        let by_cgroup = match clawfs_store::agent_groups::agent_of_pid(caller.pid) {
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
            cache.insert(
                (caller.pid, caller.uid, caller.gid),
                (Instant::now(), who.clone()),
            );
        }
        who
    }

    /// The identity a daemon thread acts with for a caller, if `caller` is that thread with
    /// the caller's uid and gid (see [`Gate::delegated`]).
    fn delegated_identity(&self, caller: &Caller) -> Option<Identity> {
        if caller.pid == 0 {
            return None;
        }
        let delegated = self
            .gate
            .delegated
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match delegated.get(&caller.pid) {
            Some((uid, gid, who)) if (*uid, *gid) == (caller.uid, caller.gid) => Some(who.clone()),
            _ => None,
        }
    }

    /// Takes the requests of this daemon thread (`tid`), made with `creds`' uid and gid, as
    /// `who`'s until the guard is dropped.
    pub(in crate::fs) fn delegate(
        &self,
        tid: u32,
        creds: &crate::creds::Credentials,
        who: &Identity,
    ) -> Delegation<'_> {
        self.gate
            .delegated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tid, (creds.caller.uid, creds.caller.gid, who.clone()));
        Delegation { fs: self, tid }
    }

    /// The git repositories around paths as `caller` sees them, for the git guard.
    pub(super) fn repos(&self, caller: &Caller) -> super::git_repos::Repos<'_> {
        super::git_repos::Repos::new(self.store.root_fd(), caller.uid).anchored(paths::anchors())
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
        .and_then(|()| {
            let git = self.repos(caller);
            self.policy().check_in(&who, access, path, &git)
        });
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
        let git = self.repos(caller);
        let verdict = self.estop_check(&who).and_then(|()| match op {
            "link" => policy.check_link_in(&who, from, to, &git),
            _ if exchange => policy
                .check_move_in(&who, from, to, &git)
                .and_then(|()| policy.check_move_in(&who, to, from, &git)),
            _ => policy.check_move_in(&who, from, to, &git),
        });
        self.conclude(caller, &who, op, from, Some(to), verdict)?;
        Ok(who)
    }

    /// Decides creating `name` in the directory `pnode` (reached through `dir`), and the file
    /// of `bytes` it adds to the caller's quota; returns the caller and the new node's path.
    pub(super) fn decide_create(
        &self,
        caller: &Caller,
        op: &'static str,
        (pnode, dir, name): (&Node, impl AsFd, &OsStr),
        bytes: u64,
    ) -> FsResult<(Identity, NsPath)> {
        let path = self.node_path(pnode, dir)?.join(name)?;
        let who = self.decide(caller, op, Access::Create, &path)?;
        self.decide_quota(caller, &who, op, &path, Quota { bytes, files: 1 })?;
        Ok((who, path))
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
        self.record_rule_refusal(caller, op, path, e)
    }

    /// Runs `call`, an operation on the generated file or folder `node` (`tools/requests/`, a
    /// response, `vault/secrets/`…). A refusal of ClawFS's own rules that it did not record
    /// itself (a folder, link or rename made in `tools/requests/`, a `chmod` of a response, a
    /// request badly named) is recorded as the rule `NAMESPACE` refusing it at `node`'s path,
    /// and written to the agent's denials, as every other refusal is.
    pub(super) fn generated_call<T>(
        &self,
        caller: &Caller,
        op: &'static str,
        node: &GeneratedNode,
        call: impl FnOnce() -> FsResult<T>,
    ) -> FsResult<T> {
        let before = trail_mark();
        match call() {
            Err(e) if e.is_rule_refusal() && trail_mark() == before => {
                Err(self.record_rule_refusal(caller, op, node.audit_path(), e))
            }
            result => result,
        }
    }

    /// The store node of `ino` for `op`: a generated file or folder has none, and the
    /// refusal is recorded ([`Self::generated_call`]).
    pub(super) fn node_for(&self, caller: &Caller, op: &'static str, ino: u64) -> FsResult<Node> {
        if let super::generated::Route::Generated(node) = self.route(ino)? {
            return self.generated_call(caller, op, &node, || self.node(ino));
        }
        self.node(ino)
    }

    /// Records the refusal `e` of `op` at `path` by a fixed rule; returns `e`.
    fn record_rule_refusal(
        &self,
        caller: &Caller,
        op: &'static str,
        path: String,
        e: FsError,
    ) -> FsError {
        let who = self.identify(caller);
        forget_pending();
        self.record(
            AuditEvent::new(audit_name(&who), caller.pid, op, path.clone()).denied(
                e.errno(),
                clawfs_policy::rule::NAMESPACE,
                e.to_string(),
            ),
        );
        if let (Identity::Agent(agent), Ok(ns)) = (&who, NsPath::parse(&path)) {
            let denial = Denial {
                rule: clawfs_policy::rule::NAMESPACE,
                reason: e.to_string(),
                kind: clawfs_policy::DenyKind::Permission,
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

    /// One more store descriptor held for `caller`'s open of `path` (`op`): refused, as a
    /// refusal of the rule `OPEN-FILES`, when the caller holds its limit (EMFILE) or callers
    /// together hold theirs (ENFILE), so that one caller cannot starve the others or the
    /// daemon ([`crate::descriptors`]).
    pub(super) fn charge_descriptor(
        &self,
        caller: &Caller,
        op: &'static str,
        path: &NsPath,
    ) -> FsResult<crate::descriptors::Charge> {
        use crate::descriptors::Exhausted;
        let exhausted = match self.descriptors.charge(caller.uid) {
            Ok(charge) => return Ok(charge),
            Err(e) => e,
        };
        let denial = match exhausted {
            Exhausted::Caller { limit } => Denial::caller_files(limit),
            Exhausted::Daemon { limit } => Denial::daemon_files(limit),
        };
        self.refuse(caller, op, path, denial)?;
        unreachable!("a refusal is an error")
    }

    /// [`Self::refuse`] for a move of `from` onto `to`, recorded as the move.
    pub(super) fn refuse_move(
        &self,
        caller: &Caller,
        op: &'static str,
        (from, to): (&NsPath, &NsPath),
        denial: Denial,
    ) -> FsResult<()> {
        let who = self.identify(caller);
        self.conclude_refusal(caller, &who, op, from, Some(to), Err(denial))
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
            // Recorded when the operation has run, with its outcome (see `audited`); a
            // decision made outside one has no outcome to wait for and is recorded now.
            let ev = event(caller, who, op, path, target);
            let outside = PENDING.with(|p| match p.borrow_mut().as_mut() {
                Some(pending) => {
                    pending.push(ev);
                    None
                }
                None => Some(ev),
            });
            if let Some(ev) = outside {
                debug_assert!(false, "{op} decided outside an audited operation");
                self.record(ev);
            }
        }
        self.conclude_refusal(caller, who, op, path, target, verdict)
    }

    /// Runs one operation and records what it decided with its outcome: the allowed operation
    /// as ok, or as failed with the errno the caller gets (ENOSPC, ENOTEMPTY, EDQUOT…). A
    /// refusal is recorded where it is decided, as the operation's only record. Every public
    /// operation that decides (namespace and metadata operations, opens) runs in one; data
    /// calls (read, write, release) decide nothing. An operation run by another (nested)
    /// belongs to the outer one, which records it.
    pub(super) fn audited<T>(&self, call: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        // Opens the scope unless an outer operation already has one.
        let outermost = PENDING.with(|p| {
            let mut p = p.borrow_mut();
            let outermost = p.is_none();
            if outermost {
                *p = Some(Vec::new());
            }
            outermost
        });
        if outermost {
            paths::forget_anchors();
        }
        let result = call();
        if !outermost {
            return result;
        }
        paths::forget_anchors();
        let decided = PENDING.with(|p| p.borrow_mut().take().unwrap_or_default());
        for ev in decided {
            self.record(match &result {
                Ok(_) => ev,
                Err(e) => ev.failed(e.errno()).reason(e.to_string()),
            });
        }
        result
    }

    pub(super) fn conclude_refusal(
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
        forget_pending();
        let errno = clawfs_policy::errno_of(denial.kind);
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
            "time": clawfs_store::clock::now_rfc3339(),
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
            clawfs_store::beneath::read(self.store.root_fd(), &dir.join("denials"), 4 << 20)
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
        let how = clawfs_store::beneath::FileMode {
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

/// The policy installed in the store: `system/policy.toml` read by descriptor beneath the
/// store, and only if the system manifest records it (one installed by ClawFS's commands: a
/// file edited in the store behind their back is refused); the default policy when the store
/// has none. What the daemon's reload and `clawfs run` apply.
pub fn installed_policy(store: BorrowedFd<'_>) -> Result<Policy, Vec<PolicyError>> {
    let refused = |message: String| {
        vec![PolicyError {
            line: 0,
            column: 0,
            message,
        }]
    };
    let bytes = clawfs_store::beneath::read(store, Path::new(POLICY_FILE), 1 << 20)
        .map_err(|e| refused(format!("{POLICY_FILE}: {e}")))?;
    clawfs_integrity::system::check_recorded(store, "policy.toml", bytes.as_deref())
        .map_err(|e| refused(e.to_string()))?;
    let Some(bytes) = bytes else {
        return Ok(Policy::default_policy());
    };
    let text =
        String::from_utf8(bytes).map_err(|_| refused(format!("{POLICY_FILE} is not UTF-8")))?;
    Policy::parse(&text)
}

/// A daemon thread acting for a caller ([`ClawFs::delegate`]); dropping it ends that.
pub(in crate::fs) struct Delegation<'a> {
    fs: &'a ClawFs,
    tid: u32,
}

impl Drop for Delegation<'_> {
    fn drop(&mut self) {
        self.fs
            .gate
            .delegated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.tid);
    }
}
