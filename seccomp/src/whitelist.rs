//! The whitelist file (`system/seccomp/whitelist.json`): parsing and validation. See the crate's
//! README.md for the format.

use std::collections::BTreeMap;
use std::fmt;

use libseccomp::{ScmpArch, ScmpSyscall};
use serde::Deserialize;
use serde_json::Value;

use crate::constants;
use crate::error::Error;
use crate::{always_denied, NAMESPACE_CLONE_FLAGS};

/// What happens to a syscall a filter does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The call fails with this errno (`"errno:EPERM"`, `"errno:38"`).
    Errno(i32),
    /// The whole process is killed with SIGSYS (`"kill"`).
    Kill,
    /// The call is allowed and logged (`"log"`): an audit mode for building a whitelist. The
    /// always-denied syscalls and namespace clone flags stay denied (with EPERM) even then.
    Log,
}

impl Action {
    /// Parses `errno:NAME`, `errno:N`, `kill`, `log`. `entry` names the place for errors.
    pub fn parse(text: &str, entry: &str) -> Result<Action, Error> {
        let bad = |why: &str| Error::BadAction {
            entry: entry.to_string(),
            action: text.to_string(),
            why: why.to_string(),
        };
        match text {
            "kill" => Ok(Action::Kill),
            "log" => Ok(Action::Log),
            _ => {
                let Some(errno) = text.strip_prefix("errno:") else {
                    return Err(bad("expected \"errno:EPERM\" (or another errno name or number), \"kill\" or \"log\""));
                };
                let n = match constants::errno_by_name(errno) {
                    Some(n) => n,
                    None => errno.parse::<i32>().map_err(|_| {
                        bad("unknown errno name (use e.g. EPERM, ENOSYS, EACCES, or a number)")
                    })?,
                };
                if !(1..=4095).contains(&n) {
                    return Err(bad("an errno must be between 1 and 4095"));
                }
                Ok(Action::Errno(n))
            }
        }
    }

    /// Whether this action refuses the call (everything but `log`).
    pub fn denies(self) -> bool {
        !matches!(self, Action::Log)
    }

    pub(crate) fn to_scmp(self) -> libseccomp::ScmpAction {
        match self {
            Action::Errno(n) => libseccomp::ScmpAction::Errno(n),
            Action::Kill => libseccomp::ScmpAction::KillProcess,
            Action::Log => libseccomp::ScmpAction::Log,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Errno(n) => match constants::errno_name(*n) {
                Some(name) => write!(f, "errno:{name}"),
                None => write!(f, "errno:{n}"),
            },
            Action::Kill => f.write_str("kill"),
            Action::Log => f.write_str("log"),
        }
    }
}

/// How a condition tests its argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondOp {
    /// `argN_in`: allowed only if the argument equals one of the values.
    In,
    /// `argN_not_in`: allowed unless the argument equals one of the values.
    NotIn,
    /// `argN_clear`: allowed only if none of the bits of the values is set in the argument.
    Clear,
}

/// One condition of a rule: `argN_in`, `argN_not_in` or `argN_clear`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The argument, 0 to 5.
    pub arg: u32,
    /// The test.
    pub op: CondOp,
    /// The values (for `Clear`, the bits to test; their union is what counts).
    pub values: Vec<u64>,
    /// How many low bits of the argument are compared (32 for arguments the kernel reads as
    /// `int`, else 64).
    pub bits: u32,
}

/// The argument conditions of one syscall: all must hold for the call to be allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The conditions (ANDed).
    pub conditions: Vec<Condition>,
    /// What happens when a condition fails; `None`: the whitelist's `default_action`.
    pub action: Option<Action>,
}

/// A parsed and validated whitelist.
#[derive(Debug, Clone)]
pub struct Whitelist {
    pub(crate) version: u32,
    pub(crate) description: String,
    pub(crate) arches: Vec<(String, ScmpArch)>,
    pub(crate) default_action: Action,
    pub(crate) syscalls: Vec<String>,
    pub(crate) rules: BTreeMap<String, Rule>,
    pub(crate) deny: BTreeMap<String, Action>,
    pub(crate) overridden: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhitelist {
    version: u64,
    #[serde(default)]
    description: String,
    arch: Vec<String>,
    default_action: String,
    syscalls: Vec<String>,
    #[serde(default)]
    rules: BTreeMap<String, BTreeMap<String, Value>>,
    #[serde(default)]
    deny: BTreeMap<String, String>,
}

const ARCHES: &[(&str, ScmpArch)] = &[
    ("x86_64", ScmpArch::X8664),
    ("x86", ScmpArch::X86),
    ("x32", ScmpArch::X32),
    ("aarch64", ScmpArch::Aarch64),
    ("arm", ScmpArch::Arm),
    ("riscv64", ScmpArch::Riscv64),
    ("ppc64le", ScmpArch::Ppc64Le),
    ("s390x", ScmpArch::S390X),
];

/// The whitelist name of the architecture this process runs on.
pub(crate) fn native_arch_name() -> String {
    let native = ScmpArch::native();
    ARCHES
        .iter()
        .find(|(_, a)| *a == native)
        .map(|(n, _)| n.to_string())
        .unwrap_or_else(|| format!("{native:?}"))
}

fn libseccomp_version() -> String {
    libseccomp::ScmpVersion::current()
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "(unknown version)".into())
}

fn check_syscall(name: &str, entry: &str) -> Result<(), Error> {
    match ScmpSyscall::from_name(name) {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::UnknownSyscall {
            entry: entry.to_string(),
            name: name.to_string(),
            libseccomp: libseccomp_version(),
        }),
    }
}

fn parse_value(v: &Value, entry: &str) -> Result<u64, Error> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| Error::entry(entry, format!("{n} is not a non-negative integer"))),
        Value::String(s) => {
            if let Some(c) = constants::constant(s) {
                return Ok(c);
            }
            let parsed = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                u64::from_str_radix(&hex.replace('_', ""), 16).ok()
            } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                s.parse::<u64>().ok()
            } else {
                None
            };
            parsed.ok_or_else(|| Error::UnknownConstant {
                entry: entry.to_string(),
                constant: s.clone(),
            })
        }
        other => Err(Error::entry(
            entry,
            format!("expected a constant name or a number, found {other}"),
        )),
    }
}

fn parse_rule(syscall: &str, raw: &BTreeMap<String, Value>) -> Result<Rule, Error> {
    let at = format!("rules.{syscall}");
    let mut rule = Rule {
        conditions: Vec::new(),
        action: None,
    };
    for (key, value) in raw {
        let here = format!("{at}.{key}");
        if key == "comment" {
            if !value.is_string() {
                return Err(Error::entry(here, "a comment must be a string"));
            }
            continue;
        }
        if key == "action" {
            let Some(text) = value.as_str() else {
                return Err(Error::entry(
                    here,
                    "an action must be a string such as \"errno:EPERM\" or \"kill\"",
                ));
            };
            rule.action = Some(Action::parse(text, &here)?);
            continue;
        }
        let parsed = key.strip_prefix("arg").and_then(|rest| {
            let (n, op) = rest.split_once('_')?;
            let arg: u32 = n.parse().ok().filter(|a| *a <= 5 && n.len() == 1)?;
            let op = match op {
                "in" => CondOp::In,
                "not_in" => CondOp::NotIn,
                "clear" => CondOp::Clear,
                _ => return None,
            };
            Some((arg, op))
        });
        let Some((arg, op)) = parsed else {
            return Err(Error::entry(
                here,
                "unknown key (expected argN_in, argN_not_in, argN_clear with N in 0..=5, action or comment)",
            ));
        };
        let Some(list) = value.as_array() else {
            return Err(Error::entry(here, "expected a list of constants"));
        };
        if list.is_empty() {
            return Err(Error::entry(here, "the list is empty"));
        }
        let int_arg = constants::known_int_arg(syscall, arg);
        // Unknown width: compare all 64 bits for `in` (a value with stray upper bits is refused)
        // and the low 32 for `not_in` (a value whose low half matches is refused): both fail
        // closed. `clear` tests bits, any width works.
        let bits = match op {
            _ if int_arg => 32,
            CondOp::NotIn => 32,
            _ => 64,
        };
        let mut values = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let e = format!("{here}[{i}]");
            let value = parse_value(v, &e)?;
            if bits == 32 && value > u64::from(u32::MAX) {
                return Err(Error::entry(
                    e,
                    format!("{value:#x} does not fit the 32-bit argument {arg} of {syscall}"),
                ));
            }
            if op == CondOp::Clear && value == 0 {
                return Err(Error::entry(e, "argN_clear needs non-zero bits"));
            }
            values.push(value);
        }
        values.sort_unstable();
        values.dedup();
        rule.conditions.push(Condition {
            arg,
            op,
            values,
            bits,
        });
    }
    if rule.conditions.is_empty() {
        return Err(Error::entry(
            at,
            "a rule needs at least one argN_in, argN_not_in or argN_clear condition",
        ));
    }
    Ok(rule)
}

impl Whitelist {
    /// Parses and validates a whitelist: JSON shape, version, architectures, actions, every syscall
    /// name (against the system libseccomp), every rule and constant. Errors name the bad entry.
    pub fn parse(text: &str) -> Result<Whitelist, Error> {
        let raw: RawWhitelist = serde_json::from_str(text)?;
        if raw.version != 1 {
            return Err(Error::Version { found: raw.version });
        }

        if raw.arch.is_empty() {
            return Err(Error::entry("arch", "the list is empty"));
        }
        let mut arches = Vec::new();
        for (i, name) in raw.arch.iter().enumerate() {
            let Some(&(_, arch)) = ARCHES.iter().find(|(n, _)| n == name) else {
                return Err(Error::UnknownArch {
                    entry: format!("arch[{i}]"),
                    name: name.clone(),
                    known: ARCHES
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            if !arches.iter().any(|(_, a)| *a == arch) {
                arches.push((name.clone(), arch));
            }
        }

        let default_action = Action::parse(&raw.default_action, "default_action")?;

        let mut overridden = Vec::new();
        let mut syscalls: Vec<String> = Vec::new();
        for (i, name) in raw.syscalls.iter().enumerate() {
            check_syscall(name, &format!("syscalls[{i}]"))?;
            if always_denied(name).is_some() {
                overridden.push(name.clone());
            } else if !syscalls.contains(name) {
                syscalls.push(name.clone());
            }
        }

        let mut rules = BTreeMap::new();
        for (name, raw_rule) in &raw.rules {
            let at = format!("rules.{name}");
            check_syscall(name, &at)?;
            let rule = parse_rule(name, raw_rule)?;
            if always_denied(name).is_some() {
                if !overridden.contains(name) {
                    overridden.push(name.clone());
                }
                continue;
            }
            if !raw.syscalls.contains(name) {
                return Err(Error::entry(
                    at,
                    format!("\"{name}\" has a rule but is not listed in \"syscalls\" (a rule narrows an allowed syscall)"),
                ));
            }
            rules.insert(name.clone(), rule);
        }

        let mut deny = BTreeMap::new();
        for (name, text) in &raw.deny {
            let at = format!("deny.{name}");
            check_syscall(name, &at)?;
            let action = Action::parse(text, &at)?;
            if !action.denies() {
                return Err(Error::BadAction {
                    entry: at,
                    action: text.clone(),
                    why: "\"deny\" entries refuse the call: use errno:NAME or kill".into(),
                });
            }
            if syscalls.contains(name) {
                return Err(Error::entry(
                    at,
                    format!("\"{name}\" is both allowed in \"syscalls\" and refused in \"deny\""),
                ));
            }
            deny.insert(name.clone(), action);
        }

        Ok(Whitelist {
            version: 1,
            description: raw.description,
            arches,
            default_action,
            syscalls,
            rules,
            deny,
            overridden,
        })
    }

    /// The format version (1).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The free-text description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The architectures the filter covers, as written (`x86_64`, ...).
    pub fn arches(&self) -> Vec<&str> {
        self.arches.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// What happens to syscalls not allowed.
    pub fn default_action(&self) -> Action {
        self.default_action
    }

    /// The allowed syscalls, without the always-denied ones.
    pub fn syscalls(&self) -> &[String] {
        &self.syscalls
    }

    /// The argument rules by syscall, as written (the crate adds the namespace flags to `clone`).
    pub fn rules(&self) -> &BTreeMap<String, Rule> {
        &self.rules
    }

    /// Explicitly refused syscalls and their actions.
    pub fn deny(&self) -> &BTreeMap<String, Action> {
        &self.deny
    }

    /// Syscalls the whitelist allows (or has rules for) that this crate denies anyway (see
    /// [`ALWAYS_DENIED`](crate::ALWAYS_DENIED)): worth a warning in the caller's log.
    pub fn overridden(&self) -> &[String] {
        &self.overridden
    }

    /// The action for a refused call when `default_action` itself would not refuse (`log`).
    pub(crate) fn deny_action(&self) -> Action {
        if self.default_action.denies() {
            self.default_action
        } else {
            Action::Errno(libc::EPERM)
        }
    }

    /// The clone flags the crate forces clear (as a condition on `clone`'s arg0).
    pub(crate) fn forced_clone_condition() -> Condition {
        Condition {
            arg: 0,
            op: CondOp::Clear,
            values: vec![NAMESPACE_CLONE_FLAGS],
            bits: 32,
        }
    }
}
