//! What a metrics scrape samples rather than counts: each agent's quota use and limit and its
//! running processes, the emergency stop, the vault, the audit writer's lag, the search
//! index's queue and when each workspace was last indexed.

use clawfs_metrics::{Agent, Metrics};
use clawfs_policy::Quota;

use super::ClawFs;

impl ClawFs {
    /// Sets the sampled metrics to what holds now. Agents are those of the policy's roster.
    pub fn sample_metrics(&self, m: &Metrics) {
        m.estop.set(i64::from(self.estop_in_force()));
        let unsealed = self
            .vault()
            .ok()
            .and_then(|v| v.status().ok())
            .is_some_and(|s| s.unlocked);
        m.vault_unsealed.set(i64::from(unsealed));
        let lag = self.audit_log().map_or(0, |log| log.lag());
        m.audit_lag.set(clamp(lag));
        if let Some(ix) = self.indexer() {
            m.index_pending.set(clamp(ix.pending()));
            for (workspace, at) in ix.last_indexed() {
                let secs = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                m.index_last
                    .get_or_create(&clawfs_metrics::Workspace { workspace })
                    .set(clamp(secs));
            }
        }
        let policy = self.policy();
        let cgroups = clawfs_store::agent_groups::Cgroup2::cached().ok();
        for spec in policy.agents() {
            let name = spec.name.as_str();
            let label = Agent {
                agent: name.to_string(),
            };
            let held = self.gate.held.of_agent(name);
            m.quota_bytes.get_or_create(&label).set(clamp(held.bytes));
            m.quota_files.get_or_create(&label).set(clamp(held.files));
            for (family, limit) in [
                (&m.quota_bytes_limit, spec.quota.bytes),
                (&m.quota_files_limit, spec.quota.files),
            ] {
                if limit == Quota::UNLIMITED {
                    family.remove(&label);
                } else {
                    family.get_or_create(&label).set(clamp(limit));
                }
            }
            let procs = cgroups
                .and_then(|c| std::fs::read_to_string(c.agent_dir(name).join("cgroup.procs")).ok())
                .map_or(0, |p| p.lines().count());
            m.agent_processes
                .get_or_create(&label)
                .set(i64::try_from(procs).unwrap_or(i64::MAX));
        }
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
