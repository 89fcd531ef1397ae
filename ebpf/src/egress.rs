//! [`EgressFilter`]: `cgroup/connect4`, `connect6`, `sendmsg4` and `sendmsg6` on an agent's
//! cgroup, refusing connections and UDP datagrams to destinations not allowed ([`Allow`]).

use std::fmt;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, MapData};
use aya::programs::{CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, CgroupSock, CgroupSockAddr};
use aya::Ebpf;

use crate::{load_object, program, take_map, Error, EGRESS_OBJ};

/// What an agent may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Every destination but the cloud metadata addresses; binding is allowed.
    All,
    /// Only these destinations, TCP or UDP, IPv4 or IPv6 (connects and UDP datagrams); no
    /// binding: nothing listens or receives on a port it chose.
    To(Vec<Endpoint>),
    /// Nothing: no IPv4 or IPv6 socket can be made at all, so nothing is sent or received
    /// (Unix sockets are not affected).
    None,
}

/// The cloud metadata addresses, refused unless an allow list names them.
pub const METADATA: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// One allowed destination: a port on any host, on one address, or on a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// The address (of the network, when `prefix` is shorter than the address); `None` for any
    /// host.
    pub addr: Option<IpAddr>,
    /// How many leading bits of `addr` must match: 32 (IPv4) or 128 (IPv6) for one address.
    pub prefix: u8,
    /// The port.
    pub port: u16,
}

impl Endpoint {
    /// `port` on any host.
    pub fn any_host(port: u16) -> Endpoint {
        Endpoint {
            addr: None,
            prefix: 0,
            port,
        }
    }

    /// `port` on the one address `addr`.
    pub fn host(addr: IpAddr, port: u16) -> Endpoint {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Endpoint {
            addr: Some(addr),
            prefix,
            port,
        }
    }

    /// Whether this is exactly the one address `addr` (any port).
    fn names(&self, addr: IpAddr) -> bool {
        self.addr == Some(addr) && self.prefix == if addr.is_ipv4() { 32 } else { 128 }
    }

    fn key(&self) -> Key<[u8; 20]> {
        let mut data = [0u8; 20];
        data[..2].copy_from_slice(&self.port.to_be_bytes());
        let (addr, bits) = match self.addr {
            None => ([0; 16], 0),
            Some(IpAddr::V4(a)) => (
                a.to_ipv6_mapped().octets(),
                96 + u32::from(self.prefix.min(32)),
            ),
            Some(IpAddr::V6(a)) => (a.octets(), u32::from(self.prefix.min(128))),
        };
        data[2..18].copy_from_slice(&addr);
        Key::new(16 + bits, data)
    }
}

/// Flags of the MODE map (mirror of `MODE_*` in `egress.bpf.c`).
const MODE_ALLOW_ALL: u32 = 1;
const MODE_NO_BIND: u32 = 2;
const MODE_NO_SOCKET: u32 = 4;
const MODE_METADATA_V4: u32 = 8;
const MODE_METADATA_V6: u32 = 16;

/// The programs of [`EgressFilter`] that judge an address, in `egress.bpf.o`.
pub(crate) const EGRESS_PROGRAMS: [&str; 6] = [
    "clawfs_connect4",
    "clawfs_connect6",
    "clawfs_sendmsg4",
    "clawfs_sendmsg6",
    "clawfs_bind4",
    "clawfs_bind6",
];

/// connect4/connect6, sendmsg4/sendmsg6, bind4/bind6, sock_create and an ingress program (which
/// drops connections opened to the agent unless it may bind) attached to one cgroup v2 directory with BPF links (which always coexist with other programs: filters of
/// ancestor cgroups also apply, and all must allow). Detached when dropped.
pub struct EgressFilter {
    _bpf: Ebpf,
    mode: Array<MapData, u32>,
    allowed: LpmTrie<MapData, [u8; 20], u8>,
    allow: Allow,
    cgroup_dir: PathBuf,
}

impl fmt::Debug for EgressFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressFilter")
            .field("cgroup_dir", &self.cgroup_dir)
            .field("allow", &self.allow)
            .finish()
    }
}

impl EgressFilter {
    /// Loads the programs, fills its allow list and attaches them to `cgroup_dir` (a cgroup v2 dir).
    pub fn attach(cgroup_dir: &Path, allow: Allow) -> Result<EgressFilter, Error> {
        let cgroup = File::open(cgroup_dir)
            .map_err(|e| Error::io(format!("opening cgroup {}", cgroup_dir.display()), e))?;
        let mut bpf = load_object("egress", EGRESS_OBJ)?;
        let mode = take_map(&mut bpf, "MODE")?;
        let allowed = take_map(&mut bpf, "ALLOWED")?;
        let mut filter = EgressFilter {
            _bpf: bpf,
            mode,
            allowed,
            allow: Allow::None,
            cgroup_dir: cgroup_dir.to_path_buf(),
        };
        // The allow list is in place before the programs see any connect.
        filter.set_allow(allow)?;
        let attach_failed = |prog: &str, e: &dyn std::error::Error| {
            Error::bpf(format!("attaching {prog} to {}", cgroup_dir.display()), e)
        };
        // With bpf_link (kernel >= 5.7) the attach flags must be 0 (`Single`); links are
        // multi-attach by nature. Older kernels fall back to a single exclusive attachment.
        for prog in EGRESS_PROGRAMS {
            let p: &mut CgroupSockAddr = program(&mut filter._bpf, prog)?;
            p.load()
                .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
            p.attach(cgroup.as_fd(), CgroupAttachMode::Single)
                .map_err(|e| attach_failed(prog, &e))?;
        }
        let prog = "clawfs_sock_create";
        let p: &mut CgroupSock = program(&mut filter._bpf, prog)?;
        p.load()
            .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        p.attach(cgroup.as_fd(), CgroupAttachMode::Single)
            .map_err(|e| attach_failed(prog, &e))?;
        let prog = "clawfs_ingress";
        let p: &mut CgroupSkb = program(&mut filter._bpf, prog)?;
        p.load()
            .map_err(|e| Error::bpf(format!("loading {prog}"), &e))?;
        p.attach(
            cgroup.as_fd(),
            CgroupSkbAttachType::Ingress,
            CgroupAttachMode::Single,
        )
        .map_err(|e| attach_failed(prog, &e))?;
        Ok(filter)
    }

    /// Replaces the allow list, live.
    pub fn set_allow(&mut self, allow: Allow) -> Result<(), Error> {
        let map_err = |e: aya::maps::MapError| Error::bpf("updating the egress filter", &e);
        let list = |a: &Allow| -> Vec<Endpoint> {
            match a {
                Allow::To(list) => list.clone(),
                _ => Vec::new(),
            }
        };
        let (old, new) = (list(&self.allow), list(&allow));
        for e in &new {
            self.allowed.insert(&e.key(), 1u8, 0).map_err(map_err)?;
        }
        let mut flags = match allow {
            Allow::All => MODE_ALLOW_ALL,
            Allow::To(_) => MODE_NO_BIND,
            Allow::None => MODE_NO_SOCKET | MODE_NO_BIND,
        };
        for (addr, flag) in METADATA
            .into_iter()
            .zip([MODE_METADATA_V4, MODE_METADATA_V6])
        {
            if new.iter().any(|e| e.names(addr)) {
                flags |= flag;
            }
        }
        self.mode.set(0, flags, 0).map_err(map_err)?;
        for e in old.iter().filter(|e| !new.contains(e)) {
            match self.allowed.remove(&e.key()) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        self.allow = allow;
        Ok(())
    }

    /// The allow list in force.
    pub fn allow(&self) -> &Allow {
        &self.allow
    }
}
