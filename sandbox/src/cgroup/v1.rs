//! The cgroup v1 fallback of hybrid hosts: the hierarchies that hold the controllers cgroup v2
//! does not offer, and the quotas.json keys translated to their files.

use super::*;

const V1_MOUNT_OPTIONS: [&str; 8] = [
    "rw",
    "ro",
    "noprefix",
    "clone_children",
    "xattr",
    "cpuset_v2_mode",
    "favordynmods",
    "nofavordynmods",
];

/// A cgroup v1 hierarchy (hybrid hosts): where it is mounted and which controllers it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupV1 {
    /// Where it is mounted (e.g. `/sys/fs/cgroup/memory`).
    mount: PathBuf,
    /// The cgroup path of the mount's root, as `/proc/<pid>/cgroup` shows paths.
    root: String,
    /// The controllers bound to it (`cpu`, `cpuacct` for a `cpu,cpuacct` mount).
    controllers: Vec<String>,
}

impl CgroupV1 {
    /// Every v1 hierarchy with a controller mounted in this mount namespace.
    pub fn find_all() -> Result<Vec<CgroupV1>, CgroupError> {
        let text = fs::read_to_string("/proc/self/mountinfo").map_err(CgroupError::MountInfo)?;
        Ok(Self::all_from_mountinfo(&text))
    }

    /// The v1 hierarchy that has `controller`, if one is mounted.
    pub fn find(controller: &str) -> Option<CgroupV1> {
        Self::find_all()
            .ok()?
            .into_iter()
            .find(|h| h.has(controller))
    }

    /// The v1 hierarchies in mountinfo text (`cgroup` mounts), one per hierarchy: of several
    /// mounts of one (bind mounts), the first whose root is `/`, else the first. Named
    /// hierarchies without a controller (`name=systemd`) are left out.
    pub fn all_from_mountinfo(text: &str) -> Vec<CgroupV1> {
        let mut found: Vec<(u64, CgroupV1)> = Vec::new();
        for m in mount_entries(text).filter(|m| m.fstype == "cgroup") {
            let controllers: Vec<String> = m
                .super_options
                .split(',')
                .filter(|o| !o.is_empty() && !o.contains('=') && !V1_MOUNT_OPTIONS.contains(o))
                .map(str::to_string)
                .collect();
            if controllers.is_empty() {
                continue;
            }
            let h = CgroupV1 {
                mount: m.mount_point,
                root: m.root,
                controllers,
            };
            match found.iter_mut().find(|(dev, _)| *dev == m.dev) {
                Some((_, seen)) if seen.root != "/" && h.root == "/" => *seen = h,
                Some(_) => {}
                None => found.push((m.dev, h)),
            }
        }
        found.into_iter().map(|(_, h)| h).collect()
    }

    /// A hierarchy with `controllers` mounted at `mount`, whose root is the cgroup path `root`.
    pub fn new(mount: impl Into<PathBuf>, root: impl Into<String>, controllers: &[&str]) -> Self {
        CgroupV1 {
            mount: mount.into(),
            root: root.into(),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
        }
    }

    /// Where it is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// The controllers bound to it.
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// Whether `controller` is bound to it.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// `<mount>/clawfs`.
    pub fn base_dir(&self) -> PathBuf {
        self.mount.join(BASE_DIR)
    }

    /// `<mount>/clawfs/agent-<agent>`.
    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        agent_group_dir(&self.mount, agent)
    }

    /// The agent whose group in this hierarchy holds `cgroup_path` (as in the hierarchy's line of
    /// `/proc/<pid>/cgroup`), anchored at the mount's root like [`Cgroup2::agent_of_path`].
    pub fn agent_of_path(&self, cgroup_path: &str) -> Option<String> {
        agent_under(&self.root, cgroup_path)
    }
}

/// One write into a cgroup v1 group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V1Write {
    /// The interface file.
    pub file: &'static str,
    /// What is written.
    pub value: String,
    /// Leave it out when the file does not exist (rather than fail the limit).
    pub optional: bool,
}

impl V1Write {
    pub(super) fn new(file: &'static str, value: impl Into<String>) -> V1Write {
        V1Write {
            file,
            value: value.into(),
            optional: false,
        }
    }
}

/// How a quotas.json key (a cgroup v2 interface file) is enforced in cgroup v1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum V1Limit {
    /// These writes, in this order, into the agent's v1 group.
    Writes(Vec<V1Write>),
    /// cgroup v1 has nothing equivalent (the limit is not enforced), and why.
    NoEquivalent(String),
    /// The value cannot be translated.
    Invalid(String),
}

/// A byte count as the kernel's `memparse` reads it: digits with an optional K, M, G, T, P or E
/// (either case).
pub(super) fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&s[..s.len() - 1], 10),
        b'm' => (&s[..s.len() - 1], 20),
        b'g' => (&s[..s.len() - 1], 30),
        b't' => (&s[..s.len() - 1], 40),
        b'p' => (&s[..s.len() - 1], 50),
        b'e' => (&s[..s.len() - 1], 60),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The cgroup v1 form of the quotas.json key `key` (its value is `limits[key]`; `memory.swap.max`
/// also needs `memory.max`):
///
/// - `pids.max` N or `max` → `pids.max` N or `max`;
/// - `memory.max` M or `max` → `memory.limit_in_bytes` M or -1 (after resetting
///   `memory.memsw.limit_in_bytes` to -1, if it exists: memory+swap may never be below memory);
/// - `memory.swap.max` S or `max` → `memory.memsw.limit_in_bytes` M+S or -1 (v1 limits memory
///   and swap only together, so a finite S needs a finite `memory.max`);
/// - `cpu.max` `"Q P"` or `"Q"` (Q a number or `max`) → `cpu.cfs_period_us` P, then
///   `cpu.cfs_quota_us` Q or -1;
/// - `cpu.weight` W → `cpu.shares` W×1024/100 (the defaults, 100 and 1024, match).
///
/// Any other key of those controllers has no v1 equivalent.
pub fn v1_limit(key: &str, limits: &BTreeMap<String, String>) -> V1Limit {
    let Some(value) = limits.get(key).map(|v| v.trim()) else {
        return V1Limit::Invalid(format!("no value for {key}"));
    };
    let bad = |what: &str| V1Limit::Invalid(format!("{value:?} is not {what}"));
    match key {
        "pids.max" => {
            if value != "max" && value.parse::<u64>().is_err() {
                return bad("a number or \"max\"");
            }
            V1Limit::Writes(vec![V1Write::new("pids.max", value)])
        }
        "memory.max" => {
            let bytes = match value {
                "max" => "-1".to_string(),
                v => match parse_bytes(v) {
                    Some(n) => n.to_string(),
                    None => return bad("a byte count or \"max\""),
                },
            };
            // Memory plus swap may never be below memory: lift a limit left by an earlier
            // setting first (memory.swap.max, written after this, sets it again).
            V1Limit::Writes(vec![
                V1Write {
                    optional: true,
                    ..V1Write::new("memory.memsw.limit_in_bytes", "-1")
                },
                V1Write::new("memory.limit_in_bytes", bytes),
            ])
        }
        "memory.swap.max" => {
            let memsw = if value == "max" {
                "-1".to_string()
            } else {
                let Some(swap) = parse_bytes(value) else {
                    return bad("a byte count or \"max\"");
                };
                let memory = limits
                    .get("memory.max")
                    .map(|m| m.trim())
                    .filter(|m| *m != "max");
                let Some(memory) = memory else {
                    return V1Limit::NoEquivalent(
                        "cgroup v1 limits memory and swap only together \
                         (memory.memsw.limit_in_bytes): set memory.max as well"
                            .to_string(),
                    );
                };
                match parse_bytes(memory).and_then(|m| m.checked_add(swap)) {
                    Some(total) => total.to_string(),
                    None => {
                        return V1Limit::Invalid(format!(
                            "memory.max {memory:?} plus {value:?} is not a byte count"
                        ))
                    }
                }
            };
            V1Limit::Writes(vec![V1Write::new("memory.memsw.limit_in_bytes", memsw)])
        }
        "cpu.max" => {
            let mut parts = value.split_whitespace();
            let (quota, period) = (parts.next(), parts.next());
            if parts.next().is_some() {
                return bad("\"QUOTA PERIOD\"");
            }
            let quota = match quota {
                Some("max") => "-1".to_string(),
                Some(q) if q.parse::<u64>().is_ok() => q.to_string(),
                _ => return bad("\"QUOTA PERIOD\" (QUOTA a number or \"max\")"),
            };
            let mut writes = Vec::new();
            if let Some(p) = period {
                if p.parse::<u64>().is_err() {
                    return bad("\"QUOTA PERIOD\" (PERIOD a number)");
                }
                writes.push(V1Write::new("cpu.cfs_period_us", p));
            }
            writes.push(V1Write::new("cpu.cfs_quota_us", quota));
            V1Limit::Writes(writes)
        }
        "cpu.weight" => match value.parse::<u64>() {
            Ok(w @ 1..=10000) => V1Limit::Writes(vec![V1Write::new(
                "cpu.shares",
                (w * 1024 / 100).max(2).to_string(),
            )]),
            _ => bad("a weight from 1 to 10000"),
        },
        _ => V1Limit::NoEquivalent(format!("cgroup v1 has no equivalent of {key}")),
    }
}

/// A run's groups in one cgroup v1 hierarchy (hybrid hosts): the agent's group, which holds the
/// limits, and the run's leaf, which holds its processes.
#[derive(Clone, Debug)]
pub struct V1Group {
    pub(super) controllers: Vec<String>,
    pub(super) agent: Group,
    pub(super) run: Group,
}

impl V1Group {
    /// Creates `<mount>/clawfs/agent-<agent>/run-<run_id>` in `hierarchy`, for `controllers`.
    pub(super) fn create(
        hierarchy: &CgroupV1,
        agent: &str,
        run_id: u32,
        controllers: Vec<String>,
    ) -> Result<V1Group, CgroupError> {
        Group::create(hierarchy.base_dir())?;
        let (agent, run) = create_agent_and_run(&hierarchy.agent_dir(agent), run_id)?;
        Ok(V1Group {
            controllers,
            agent,
            run,
        })
    }

    /// The controllers `clawfs run` uses from this hierarchy.
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// The agent's group in this hierarchy (its limits).
    pub fn agent(&self) -> &Group {
        &self.agent
    }

    /// The run's leaf in this hierarchy, where its processes go.
    pub fn run(&self) -> &Group {
        &self.run
    }
}
