//! Compiling a whitelist into a BPF program (before fork) and loading it (in the child).
//!
//! Argument rules become libseccomp "masked equality" comparisons. libseccomp compares each
//! argument at most once per rule, and for a syscall that has conditional rules, calls matching
//! none of them get the filter's default action. So every condition is turned into an exact set
//! of "cubes" (`arg & mask == value`): the values a condition allows, and the values it refuses
//! (needed only when the refusal differs from the default action). `argN_not_in` therefore becomes
//! the cover of the complement of its values (at most `bits` cubes per value), which is exact and
//! compares only the bits the kernel reads.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{FromRawFd, OwnedFd};

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

use crate::error::Error;
use crate::whitelist::{native_arch_name, Action, CondOp, Condition, Whitelist};
use crate::ALWAYS_DENIED;

/// `x & mask == value`.
type Cube = (u64, u64);
/// A conjunction: at most one cube per argument, sorted by argument (one libseccomp rule).
type Conj = Vec<(u32, Cube)>;

/// The largest program the kernel accepts (BPF_MAXINSNS).
const MAX_INSTRUCTIONS: usize = 4096;

fn width_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn intersect(a: Cube, b: Cube) -> Option<Cube> {
    if (a.1 ^ b.1) & a.0 & b.0 != 0 {
        None
    } else {
        Some((a.0 | b.0, a.1 | b.1))
    }
}

/// Cubes whose union is exactly the `bits`-wide values not in `values` (a binary trie walk from
/// the top bit: every branch leaving the trie is one cube).
pub(crate) fn complement(values: &[u64], bits: u32) -> Vec<Cube> {
    fn walk(values: &[u64], bit: u32, mask: u64, value: u64, out: &mut Vec<Cube>) {
        if values.is_empty() {
            out.push((mask, value));
            return;
        }
        if bit == 0 {
            return;
        }
        let b = 1u64 << (bit - 1);
        let (ones, zeros): (Vec<u64>, Vec<u64>) = values.iter().partition(|v| *v & b != 0);
        walk(&zeros, bit - 1, mask | b, value, out);
        walk(&ones, bit - 1, mask | b, value | b, out);
    }
    let w = width_mask(bits);
    let mut values: Vec<u64> = values.iter().map(|v| v & w).collect();
    values.sort_unstable();
    values.dedup();
    let mut out = Vec::new();
    walk(&values, bits.min(64), 0, 0, &mut out);
    out
}

/// The cubes of argument values a condition allows.
fn allowed(c: &Condition) -> Vec<Cube> {
    let w = width_mask(c.bits);
    match c.op {
        CondOp::In => c.values.iter().map(|v| (w, v & w)).collect(),
        CondOp::NotIn => complement(&c.values, c.bits),
        CondOp::Clear => vec![(c.values.iter().fold(0, |m, v| m | v) & w, 0)],
    }
}

/// The cubes of argument values a condition refuses.
fn refused(c: &Condition) -> Vec<Cube> {
    let w = width_mask(c.bits);
    match c.op {
        CondOp::In => complement(&c.values, c.bits),
        CondOp::NotIn => c.values.iter().map(|v| (w, v & w)).collect(),
        CondOp::Clear => {
            let m = c.values.iter().fold(0, |m, v| m | v) & w;
            (0..64)
                .map(|i| 1u64 << i)
                .filter(|b| m & b != 0)
                .map(|b| (b, b))
                .collect()
        }
    }
}

fn and(a: &Conj, b: &Conj) -> Option<Conj> {
    let mut out: Conj = a.clone();
    for &(arg, cube) in b {
        match out.iter_mut().find(|(x, _)| *x == arg) {
            Some((_, existing)) => *existing = intersect(*existing, cube)?,
            None => out.push((arg, cube)),
        }
    }
    out.sort_unstable();
    Some(out)
}

/// Rules whose union is the set of calls satisfying every condition.
fn allow_region(conds: &[Condition]) -> Vec<Conj> {
    let mut region: BTreeSet<Conj> = BTreeSet::from([Vec::new()]);
    for c in conds {
        let cubes = allowed(c);
        region = region
            .iter()
            .flat_map(|conj| {
                cubes
                    .iter()
                    .filter_map(|&cube| and(conj, &vec![(c.arg, cube)]))
            })
            .collect();
    }
    region.into_iter().collect()
}

/// Rules whose union is the set of calls failing at least one condition.
fn deny_region(conds: &[Condition]) -> Vec<Conj> {
    let set: BTreeSet<Conj> = conds
        .iter()
        .flat_map(|c| refused(c).into_iter().map(|cube| vec![(c.arg, cube)]))
        .collect();
    set.into_iter().collect()
}

/// `region` restricted to `within`.
fn restrict(region: &[Conj], within: &[Conj]) -> Vec<Conj> {
    let set: BTreeSet<Conj> = region
        .iter()
        .flat_map(|r| within.iter().filter_map(move |w| and(r, w)))
        .collect();
    set.into_iter().collect()
}

/// One BPF program and the flags it is loaded with.
struct Program {
    insns: Vec<libc::sock_filter>,
    flags: libc::c_ulong,
}

impl Program {
    /// `seccomp(SECCOMP_SET_MODE_FILTER)`.
    fn load(&self) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.insns.len() as libc::c_ushort,
            filter: self.insns.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points into `self.insns`, alive for the call; the kernel copies the
        // program and does not keep the pointer. `len` fits: compile() refuses more than 4096.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                self.flags,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A compiled filter, ready for the kernel. Built by [`Whitelist::compile`] before fork;
/// [`Filter::load`] installs it in the calling thread (in a `pre_exec` hook: the child of the
/// fork), where it survives `execve` and is inherited by every descendant.
///
/// It is made of one or two BPF programs: the rules, loaded with `SECCOMP_FILTER_FLAG_LOG` so
/// that refusals are logged, and, when some always-denied syscall is answered with a fixed errno
/// (`clone3` with ENOSYS), a small "quiet" program without the log flag that gives that answer
/// (the rules allow those calls). The kernel runs both and keeps the most restrictive result,
/// and logs it only if the program that produced it asked for logging: glibc's clone3 probe on
/// every `pthread_create` / `posix_spawn` would otherwise flood the log and its rate limit.
pub struct Filter {
    rules: Program,
    quiet: Option<Program>,
    pfc: String,
}

// No derive: libc::sock_filter has no Debug without libc's extra_traits.
impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("instructions", &self.instructions())
            .field("programs", &self.programs())
            .field("logs_denials", &self.logs_denials())
            .finish()
    }
}

impl Filter {
    /// Installs the filter on the calling thread: `prctl(PR_SET_NO_NEW_PRIVS)` then one
    /// `seccomp(SECCOMP_SET_MODE_FILTER)` per program. System calls only: no allocation, no lock,
    /// nothing from libseccomp, so it is safe in a `pre_exec` hook after `fork` of a
    /// multi-threaded process. After it returns, the thread can make only the syscalls the filter
    /// allows: call it last, after any setuid/setgid/chdir/Landlock step.
    pub fn load(&self) -> io::Result<()> {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The quiet program first: once the rules are in place, a second seccomp() call would
        // need the whitelist to allow `seccomp`.
        if let Some(quiet) = &self.quiet {
            quiet.load()?;
        }
        self.rules.load()
    }

    /// The number of BPF instructions (all programs).
    pub fn instructions(&self) -> usize {
        self.rules.insns.len() + self.quiet.as_ref().map_or(0, |q| q.insns.len())
    }

    /// The number of BPF programs [`Filter::load`] installs (1 or 2; each shows in
    /// `Seccomp_filters:` of `/proc/PID/status`).
    pub fn programs(&self) -> usize {
        1 + usize::from(self.quiet.is_some())
    }

    /// Whether the rules are loaded with `SECCOMP_FILTER_FLAG_LOG`, so that the kernel logs
    /// refused calls (errno actions included) to the audit log (or, without auditd, the kernel
    /// log), for the actions listed in `/proc/sys/kernel/seccomp/actions_logged`. Kills are logged
    /// whatever this says.
    pub fn logs_denials(&self) -> bool {
        self.rules.flags & libc::SECCOMP_FILTER_FLAG_LOG != 0
    }

    /// libseccomp's human-readable pseudo filter code of the program(s), for debugging.
    pub fn pfc(&self) -> &str {
        &self.pfc
    }
}

fn memfd(name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: a valid C string, integer flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

fn read_back(mut file: File) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

struct Builder {
    ctx: ScmpFilterContext,
    default: ScmpAction,
}

impl Builder {
    fn add(&mut self, action: ScmpAction, name: &str, conj: &[(u32, Cube)]) -> Result<(), Error> {
        if action == self.default {
            // libseccomp refuses rules that repeat the default action; they change nothing.
            return Ok(());
        }
        let syscall =
            ScmpSyscall::from_name(name).map_err(Error::lib(format!("resolving {name}")))?;
        let cmps: Vec<ScmpArgCompare> = conj
            .iter()
            .filter(|(_, (mask, _))| *mask != 0)
            .map(|&(arg, (mask, value))| {
                ScmpArgCompare::new(arg, ScmpCompareOp::MaskedEqual(mask), value)
            })
            .collect();
        self.ctx
            .add_rule_conditional(action, syscall, &cmps)
            .map_err(Error::lib(format!("adding a rule for {name}")))?;
        Ok(())
    }
}

impl Whitelist {
    /// The context of the quiet program: allow everything (the rules decide), same arches.
    fn quiet_context(&self) -> Result<ScmpFilterContext, Error> {
        let mut q =
            ScmpFilterContext::new(ScmpAction::Allow).map_err(Error::lib("creating a filter"))?;
        for (name, arch) in &self.arches {
            let present = q
                .is_arch_present(*arch)
                .map_err(Error::lib(format!("checking architecture {name}")))?;
            if !present {
                q.add_arch(*arch)
                    .map_err(Error::lib(format!("adding architecture {name}")))?;
            }
        }
        // Foreign ABIs are the rules' business (it kills).
        q.set_act_badarch(ScmpAction::Allow)
            .map_err(Error::lib("setting the bad-architecture action"))?;
        Ok(q)
    }

    /// Builds the filter: the libseccomp context(s), their rules, and the BPF program(s), exported
    /// to memory. Call it before forking (it allocates and calls into libseccomp); the returned
    /// [`Filter`] is `Send + Sync` and is what the `pre_exec` hook loads.
    ///
    /// Fails if the whitelist does not cover this host's architecture, if it uses an action the
    /// host cannot do, or if libseccomp refuses a rule.
    pub fn compile(&self) -> Result<Filter, Error> {
        let native = ScmpArch::native();
        if !self.arches.iter().any(|(_, a)| *a == native) {
            return Err(Error::ArchNotCovered {
                listed: self.arches().join(", "),
                native: native_arch_name(),
            });
        }
        let api = libseccomp::get_api();
        let uses_log = self.default_action == Action::Log
            || self.rules.values().any(|r| r.action == Some(Action::Log));
        if uses_log && api < 3 {
            return Err(Error::Unsupported(format!(
                "the \"log\" action needs libseccomp API level 3 (kernel 4.14 or later); this host has level {api}"
            )));
        }

        let default = self.default_action.to_scmp();
        let ctx = ScmpFilterContext::new(default).map_err(Error::lib("creating a filter"))?;
        let mut b = Builder { ctx, default };
        for (name, arch) in &self.arches {
            let present = b
                .ctx
                .is_arch_present(*arch)
                .map_err(Error::lib(format!("checking architecture {name}")))?;
            if !present {
                b.ctx
                    .add_arch(*arch)
                    .map_err(Error::lib(format!("adding architecture {name}")))?;
            }
        }
        // A call from an architecture the filter does not cover (e.g. the i386 `int 0x80` ABI of
        // an x86_64 process) would bypass every rule: kill.
        b.ctx
            .set_act_badarch(ScmpAction::KillProcess)
            .map_err(Error::lib("setting the bad-architecture action"))?;
        if api >= 4 {
            // A binary tree of syscall numbers instead of a linear list (libseccomp >= 2.5).
            b.ctx
                .set_ctl_optimize(2)
                .map_err(Error::lib("setting the optimisation level"))?;
        }

        let deny_action = self.deny_action();

        // Always-denied syscalls with a fixed errno (clone3: ENOSYS) are answered by the quiet
        // program; the rules let them through to it.
        let mut quiet_ctx: Option<ScmpFilterContext> = None;
        for d in ALWAYS_DENIED {
            if ScmpSyscall::from_name(d.name).is_err() {
                // An older libseccomp that does not know the name: no whitelist can name it
                // either, so the default action refuses it.
                continue;
            }
            let action = match (self.deny.get(d.name), d.errno) {
                (Some(a), _) => *a,
                (None, Some(errno)) => {
                    let q = match &mut quiet_ctx {
                        Some(q) => q,
                        None => quiet_ctx.insert(self.quiet_context()?),
                    };
                    let sys = ScmpSyscall::from_name(d.name)
                        .map_err(Error::lib(format!("resolving {}", d.name)))?;
                    q.add_rule(ScmpAction::Errno(errno), sys)
                        .map_err(Error::lib(format!("adding a rule for {}", d.name)))?;
                    b.add(ScmpAction::Allow, d.name, &[])?;
                    continue;
                }
                (None, None) => deny_action,
            };
            b.add(action.to_scmp(), d.name, &[])?;
        }
        for (name, action) in &self.deny {
            if crate::always_denied(name).is_none() {
                b.add(action.to_scmp(), name, &[])?;
            }
        }

        for name in &self.syscalls {
            let forced: Vec<Condition> = if name == "clone" {
                vec![Whitelist::forced_clone_condition()]
            } else {
                Vec::new()
            };
            let rule = self.rules.get(name);
            if forced.is_empty() && rule.is_none() {
                b.add(ScmpAction::Allow, name, &[])?;
                continue;
            }
            let user: &[Condition] = rule.map(|r| r.conditions.as_slice()).unwrap_or(&[]);
            let all: Vec<Condition> = forced.iter().chain(user).cloned().collect();
            for conj in allow_region(&all) {
                b.add(ScmpAction::Allow, name, &conj)?;
            }
            let forced_action = deny_action.to_scmp();
            if forced_action != default {
                for conj in deny_region(&forced) {
                    b.add(forced_action, name, &conj)?;
                }
            }
            let rule_action = rule
                .and_then(|r| r.action)
                .unwrap_or(self.default_action)
                .to_scmp();
            if rule_action != default {
                let within = allow_region(&forced);
                for conj in restrict(&deny_region(user), &within) {
                    b.add(rule_action, name, &conj)?;
                }
            }
        }

        // API level 3 = the kernel has SECCOMP_FILTER_FLAG_LOG (4.14+).
        let log_flag = if api >= 3 {
            libc::SECCOMP_FILTER_FLAG_LOG
        } else {
            0
        };
        let (insns, mut pfc) = export(&b.ctx)?;
        let rules = Program {
            insns,
            flags: log_flag,
        };
        let quiet = match quiet_ctx {
            None => None,
            Some(ctx) => {
                let (insns, text) = export(&ctx)?;
                pfc.push_str("#\n# quiet program (loaded without SECCOMP_FILTER_FLAG_LOG)\n");
                pfc.push_str(&text);
                Some(Program { insns, flags: 0 })
            }
        };
        Ok(Filter { rules, quiet, pfc })
    }
}

/// The BPF program and pseudo filter code of a context.
fn export(ctx: &ScmpFilterContext) -> Result<(Vec<libc::sock_filter>, String), Error> {
    let bpf_file = memfd(c"clawfs-seccomp-bpf")?;
    ctx.export_bpf(&bpf_file)
        .map_err(Error::lib("exporting the BPF program"))?;
    let bytes = read_back(bpf_file)?;
    let size = std::mem::size_of::<libc::sock_filter>();
    if bytes.is_empty() || bytes.len() % size != 0 {
        return Err(Error::Unsupported(format!(
            "libseccomp exported a BPF program of {} bytes, not a whole number of {size}-byte instructions",
            bytes.len()
        )));
    }
    let insns: Vec<libc::sock_filter> = bytes
        .chunks_exact(size)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    if insns.len() > MAX_INSTRUCTIONS {
        return Err(Error::Unsupported(format!(
            "the filter has {} BPF instructions, more than the kernel's limit of {MAX_INSTRUCTIONS}",
            insns.len()
        )));
    }
    let pfc_file = memfd(c"clawfs-seccomp-pfc")?;
    ctx.export_pfc(&pfc_file)
        .map_err(Error::lib("exporting the pseudo filter code"))?;
    let pfc = String::from_utf8_lossy(&read_back(pfc_file)?).into_owned();
    Ok((insns, pfc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(cubes: &[Cube], x: u64) -> bool {
        cubes.iter().any(|&(m, v)| x & m == v)
    }

    #[test]
    fn complement_is_exact() {
        let sets: &[&[u64]] = &[
            &[0],
            &[255],
            &[0x12],
            &[1, 2, 3],
            &[0, 255, 7, 8, 200],
            &[5, 6],
        ];
        for set in sets {
            let cubes = complement(set, 8);
            for x in 0..256u64 {
                assert_eq!(matches(&cubes, x), !set.contains(&x), "set {set:?}, x {x}");
            }
            assert!(cubes.len() <= 8 * set.len());
        }
    }

    #[test]
    fn not_in_ignores_upper_half_of_int_args() {
        let c = Condition {
            arg: 1,
            op: CondOp::NotIn,
            values: vec![0x5412],
            bits: 32,
        };
        let allow = allowed(&c);
        let deny = refused(&c);
        for x in [0x5412u64, 0xffff_ffff_0000_5412, 0x1_0000_5412] {
            assert!(!matches(&allow, x) && matches(&deny, x), "{x:#x}");
        }
        for x in [0x5401u64, 0x5413, 0, 0xffff_ffff, 0x8000_5412] {
            assert!(matches(&allow, x) && !matches(&deny, x), "{x:#x}");
        }
    }

    #[test]
    fn clear_and_in_regions_are_disjoint_and_complete() {
        let clear = Condition {
            arg: 0,
            op: CondOp::Clear,
            values: vec![0x1000_0000, 0x4000_0000],
            bits: 32,
        };
        let within = Condition {
            arg: 0,
            op: CondOp::In,
            values: vec![0x11, 0x1000_0011, 0x100],
            bits: 32,
        };
        let conds = [clear, within];
        let allow = allow_region(&conds);
        let deny = deny_region(&conds);
        let eval = |rules: &[Conj], x: u64| {
            rules
                .iter()
                .any(|r| r.iter().all(|&(_, (m, v))| x & m == v))
        };
        for x in [0x11u64, 0x100, 0x1000_0011, 0x4000_0011, 0x12, 0] {
            let ok = x == 0x11 || x == 0x100;
            assert_eq!(eval(&allow, x), ok, "{x:#x}");
            assert_eq!(eval(&deny, x), !ok, "{x:#x}");
        }
    }
}
