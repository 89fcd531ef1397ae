//! Agents' byte and file quotas: what each has written (kept across restarts), charged as it
//! writes, refused past the policy's limit.

use super::*;

impl ClawFs {
    /// Checks that `who` may add `adding` (files, bytes) to what it has written; `commit`
    /// counts it.
    pub(in crate::fs) fn decide_quota(
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
    pub(in crate::fs) fn metered(&self, who: &Identity) -> bool {
        match who {
            Identity::Agent(agent) => self.policy().quota(agent).bytes != Quota::UNLIMITED,
            _ => false,
        }
    }

    /// Charges the growth of a write ending at `end` (what it adds past the file's current
    /// size) to the metered writer `w`; see [`Self::charge`].
    pub(in crate::fs) fn charge_growth(
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
    pub(in crate::fs) fn charge(
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

    pub(in crate::fs) fn usage(&self, agent: &AgentName) -> Quota {
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
    pub(in crate::fs) fn load_usage(&self) {
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
    pub(in crate::fs) fn add_usage(&self, agent: &AgentName, adding: Quota) {
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
}
