//! A sandboxed agent tries to open TCP connections its policy's `[agents.NAME.sandbox] network`
//! does not allow, and a policy requires a sandbox layer this host does not have.

use std::net::TcpListener;
use std::process::Output;

use crate::common::Mounted;
use crate::support::{agent_policy, audit_until, denials, run_agent_with, text};

/// Connects to 127.0.0.1 on each port and prints `PORT ok` or `PORT ERRNAME`.
const PROBE: &str = r#"
import errno, socket, sys
for port in sys.argv[1:]:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", int(port)))
        print(port, "ok")
    except OSError as e:
        print(port, errno.errorcode.get(e.errno, e.errno))
    finally:
        s.close()
"#;

fn run(m: &Mounted, sandbox: bool, ports: [u16; 2]) -> Output {
    let (p1, p2) = (ports[0].to_string(), ports[1].to_string());
    let options: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
    run_agent_with(
        m,
        "fs-engine",
        options,
        &["/usr/bin/python3", "-c", PROBE, &p1, &p2],
    )
}

/// Two listeners on 127.0.0.1 that accept connections (the kernel completes the handshake while
/// they are alive, so nothing needs to call `accept`).
fn listeners() -> (TcpListener, TcpListener, [u16; 2]) {
    let a = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = TcpListener::bind("127.0.0.1:0").unwrap();
    let ports = [
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    ];
    (a, b, ports)
}

#[track_caller]
fn expect(out: &Output, ports: [u16; 2], results: [&str; 2]) {
    let shown = text(out);
    assert!(out.status.success(), "{shown}");
    for (port, result) in ports.iter().zip(results) {
        assert!(
            shown.lines().any(|l| l == format!("{port} {result}")),
            "port {port} should be {result}: {shown}"
        );
    }
}

#[test]
fn a_sandboxed_agent_connects_only_to_the_ports_its_policy_allows() {
    let m = Mounted::new();
    let (_a, _b, ports) = listeners();
    // Without a network entry (the default, "all") and without the sandbox, both connect.
    expect(&run(&m, true, ports), ports, ["ok", "ok"]);
    agent_policy(
        &m,
        "fs-engine",
        &format!("sandbox = {{ network = [\"127.0.0.1:{}\"] }}", ports[0]),
    );
    expect(&run(&m, true, ports), ports, ["ok", "EACCES"]);
    expect(&run(&m, false, ports), ports, ["ok", "ok"]);

    // The refused connect is explained: a NETWORK denial naming the destination.
    let monitor = clawfs_fuse::agent_events::clawfs_ebpf::availability().monitor;
    if !monitor.is_available() {
        println!("denials of refused connects not checked: eBPF monitor {monitor}");
        return;
    }
    let refused = format!("tcp://127.0.0.1:{}", ports[1]);
    let allowed = format!("tcp://127.0.0.1:{}", ports[0]);
    let all = audit_until(&m, |all| {
        all.iter()
            .any(|r| r["rule"] == "NETWORK" && r["path"] == refused.as_str())
    });
    let net: Vec<_> = all.iter().filter(|r| r["rule"] == "NETWORK").collect();
    assert!(
        net.iter().any(|r| r["path"] == refused.as_str()
            && r["agent"] == "fs-engine"
            && r["result"] == "denied"),
        "no NETWORK denial of {refused}: {net:#?}"
    );
    assert!(
        net.iter().all(|r| r["path"] != allowed.as_str()),
        "an allowed connect recorded as refused: {net:#?}"
    );
    assert!(
        denials(&m, "fs-engine")
            .iter()
            .any(|d| d["rule"] == "NETWORK" && d["path"] == refused.as_str()),
        "no NETWORK line in the denials file"
    );
}

#[test]
fn network_none_refuses_every_connection_in_the_sandbox_only() {
    let m = Mounted::new();
    let (_a, _b, ports) = listeners();
    agent_policy(&m, "fs-engine", "sandbox = { network = \"none\" }");
    expect(&run(&m, true, ports), ports, ["EACCES", "EACCES"]);
    expect(&run(&m, false, ports), ports, ["ok", "ok"]);
}

#[test]
fn a_required_layer_the_host_lacks_stops_the_sandboxed_run() {
    let m = Mounted::new();
    agent_policy(
        &m,
        "fs-engine",
        "sandbox = { require = [\"landlock\", \"seccomp\", \"apparmor\"] }",
    );
    let marker = m.dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = run_agent_with(&m, "fs-engine", &[], &["sh", "-c", &script]);
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(!marker.exists(), "the command ran: {shown}");
    assert!(shown.contains("requires the apparmor layer"), "{shown}");
    assert!(shown.contains("refusing to start"), "{shown}");
}

#[test]
fn required_layers_this_host_has_let_the_run_start() {
    let m = Mounted::new();
    agent_policy(
        &m,
        "fs-engine",
        "sandbox = { require = [\"landlock\", \"seccomp\", \"cgroup\"] }",
    );
    let out = run_agent_with(&m, "fs-engine", &[], &["sh", "-c", "echo started"]);
    let shown = text(&out);
    assert!(out.status.success() && shown.contains("started"), "{shown}");
}

/// The allow list holds for UDP too (datagrams need no connect), and an entry with an address
/// allows that address only, not every host on its port.
#[test]
fn udp_and_other_addresses_are_held_to_the_allow_list() {
    let avail = clawfs_fuse::agent_events::clawfs_ebpf::availability();
    if !avail.egress_filter.is_available() {
        println!("skipped: eBPF egress filter {}", avail.egress_filter);
        return;
    }
    let m = Mounted::new();
    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let p = any.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let pu = udp.local_addr().unwrap().port();
    agent_policy(
        &m,
        "fs-engine",
        &format!("sandbox = {{ network = [\"127.0.0.1:{p}\"] }}"),
    );
    let probe = format!(
        r#"
import errno, socket
def show(what, f):
    try:
        f()
        print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno))
show("tcp-127.0.0.1", lambda: socket.create_connection(("127.0.0.1", {p}), 5).close())
show("tcp-127.0.0.2", lambda: socket.create_connection(("127.0.0.2", {p}), 5).close())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
show("udp-sendto", lambda: u.sendto(b"leak", ("127.0.0.1", {pu})))
u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
show("udp6-mapped", lambda: u6.sendto(b"leak", ("::ffff:127.0.0.1", {pu})))
"#
    );
    let out = run_agent_with(&m, "fs-engine", &[], &["/usr/bin/python3", "-c", &probe]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for line in [
        "tcp-127.0.0.1 ok",
        "tcp-127.0.0.2 EPERM",
        "udp-sendto EPERM",
        "udp6-mapped EPERM",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line}: {shown}");
    }
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "a datagram got through");

    if avail.monitor.is_available() {
        let dest = format!("udp://127.0.0.1:{pu}");
        let all = audit_until(&m, |all| {
            all.iter()
                .any(|r| r["rule"] == "NETWORK" && r["path"] == dest.as_str())
        });
        assert!(
            all.iter().any(|r| r["rule"] == "NETWORK"
                && r["path"] == dest.as_str()
                && r["operation"] == "sendto"),
            "no NETWORK denial of the datagram"
        );
    }
}

/// An admin may run an agent outside the sandbox, but not one whose policy requires sandbox
/// layers: `--no-sandbox` is refused before anything runs.
#[test]
fn no_sandbox_is_refused_when_the_policy_requires_a_layer() {
    let m = Mounted::new();
    let marker = m.backing("agents/fs-engine/ran");
    let script = format!("touch {}", m.path("agents/fs-engine/ran").display());
    // Without a requirement, --no-sandbox runs.
    let out = run_agent_with(&m, "fs-engine", &["--no-sandbox"], &["sh", "-c", &script]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();
    agent_policy(&m, "fs-engine", "sandbox = { require = [\"seccomp\"] }");
    let out = run_agent_with(&m, "fs-engine", &["--no-sandbox"], &["sh", "-c", &script]);
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("--no-sandbox refused") && shown.contains("require"),
        "{shown}"
    );
    assert!(!marker.exists(), "the command ran");
}
