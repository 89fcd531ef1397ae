//! A sandboxed agent tries to open TCP connections its policy's `[agents.NAME.sandbox] network`
//! does not allow, and a policy requires a sandbox layer this host does not have.

use std::net::TcpListener;
use std::process::Output;

use crate::common::Mounted;
use crate::support::{
    agent_policy, audit_until, denials, edit_policy, run_agent_with, text, PROBE,
};

/// Connects to 127.0.0.1 on each port and prints `PORT ok` or `PORT ERRNAME` (after
/// [`PROBE`]).
const CONNECT: &str = r#"
import socket, sys
def connect(port):
    s = socket.socket()
    s.settimeout(5)
    s.connect(("127.0.0.1", int(port)))
    s.close()
for port in sys.argv[1:]:
    probe(port, lambda: connect(port))
"#;

fn run(m: &Mounted, sandbox: bool, ports: [u16; 2]) -> Output {
    let (p1, p2) = (ports[0].to_string(), ports[1].to_string());
    let options: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
    run_agent_with(
        m,
        "fs-engine",
        options,
        &[
            "/usr/bin/python3",
            "-c",
            &format!("{PROBE}{CONNECT}"),
            &p1,
            &p2,
        ],
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
    let m = Mounted::with_args(&["--trace-syscalls"]);
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
    let monitor = clawfs_ebpf::availability().monitor;
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
    // No socket at all: the network filter refuses it before any connect.
    expect(&run(&m, true, ports), ports, ["EPERM", "EPERM"]);
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
    let avail = clawfs_ebpf::availability();
    if !avail.egress_filter.is_available() {
        crate::common::skip(
            "udp_and_other_addresses_are_held_to_the_allow_list",
            &format!("eBPF egress filter {}", avail.egress_filter),
        );
        return;
    }
    let m = Mounted::with_args(&["--trace-syscalls"]);
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
        r#"{PROBE}
import socket
probe("tcp-127.0.0.1", lambda: socket.create_connection(("127.0.0.1", {p}), 5).close())
probe("tcp-127.0.0.2", lambda: socket.create_connection(("127.0.0.2", {p}), 5).close())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe("udp-sendto", lambda: u.sendto(b"leak", ("127.0.0.1", {pu})))
u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
probe("udp6-mapped", lambda: u6.sendto(b"leak", ("::ffff:127.0.0.1", {pu})))
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

/// Tries, as the agent in the default sandbox, to make an IPv4 socket, to bind and listen on a
/// port it names, and to listen on one the kernel picks (no bind): prints one line each (after
/// [`PROBE`]).
const LISTEN: &str = r#"
import socket
probe("socket", lambda: socket.socket().close())
def bound():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
def unbound():
    s = socket.socket(); s.listen()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0))
probe("bind", bound)
probe("listen", unbound)
probe("udp", udp)
"#;

/// `network = "none"` means no network in either direction: no socket to listen with, so
/// nothing an outside process could read from; an allow list lets the agent connect out but
/// never listen or receive on a port. Each refusal is on record as the agent's denial.
#[test]
fn an_agent_without_network_cannot_listen_either() {
    let m = Mounted::with_args(&["--trace-syscalls"]);
    agent_policy(&m, "fs-engine", "sandbox = { network = \"none\" }");
    let out = run_agent_with(
        &m,
        "fs-engine",
        &[],
        &["/usr/bin/python3", "-c", &format!("{PROBE}{LISTEN}")],
    );
    let shown = text(&out);
    for what in ["socket", "bind", "listen", "udp"] {
        assert!(
            shown.lines().any(|l| l == format!("{what} EPERM")),
            "{what}: {shown}"
        );
    }
    let all = audit_until(&m, |all| {
        all.iter()
            .any(|r| r["agent"] == "fs-engine" && r["operation"] == "socket")
    });
    let rec = all
        .iter()
        .find(|r| r["agent"] == "fs-engine" && r["operation"] == "socket")
        .unwrap();
    assert_eq!(rec["result"], "denied", "{rec}");
    assert!(
        rec["reason"].as_str().unwrap().contains("\"none\""),
        "{rec}"
    );

    // An allow list: connecting out works (to what it names), listening does not.
    let (_a, _b, ports) = listeners();
    edit_policy(&m, |p| {
        p.replace(
            "sandbox = { network = \"none\" }",
            &format!("sandbox = {{ network = [\"127.0.0.1:{}\"] }}", ports[0]),
        )
    });
    let out = run_agent_with(
        &m,
        "fs-engine",
        &[],
        &["/usr/bin/python3", "-c", &format!("{PROBE}{LISTEN}")],
    );
    let shown = text(&out);
    assert!(shown.contains("socket ok"), "{shown}");
    for what in ["bind", "udp"] {
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with(what) && !l.ends_with(" ok")),
            "{what}: {shown}"
        );
    }
    // listen() without a bind takes a port no bind hook sees: nobody outside gets a
    // connection to it, so nothing is read from it.
    const EXFIL: &str = r#"
import socket
s = socket.socket(); s.listen(); print(s.getsockname()[1], flush=True)
s.settimeout(4)
try:
    c, _ = s.accept(); c.sendall(b"EXFIL-FROM-ALLOW-LIST-AGENT"); print("accepted")
except OSError:
    print("no connection")
"#;
    let mut child = m
        .run_command("fs-engine")
        .args(["--", "/usr/bin/python3", "-c", EXFIL])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let outside = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        std::time::Duration::from_millis(1500),
    );
    let mut read = String::new();
    if let Ok(mut conn) = outside {
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        let _ = std::io::Read::read_to_string(&mut conn, &mut read);
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    child.wait().unwrap();
    assert!(!read.contains("EXFIL"), "read from the agent: {read}");
    assert_eq!(rest, ["no connection"], "the agent accepted a connection");
}

/// The cloud metadata endpoints are refused whatever `network` says, unless an allow list
/// names them; allow lists take networks (`10.0.0.0/8:5432`).
#[test]
fn metadata_endpoints_need_naming_and_networks_are_allowed_whole() {
    const CONNECT: &str = r#"
import errno, socket, sys
for dest in sys.argv[1:]:
    host, port = dest.rsplit(":", 1)
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(1)
    try:
        s.connect((host.strip("[]"), int(port)))
        print(dest, "ok")
    except OSError as e:
        print(dest, errno.errorcode.get(e.errno, e.errno) if e.errno else "timeout")
"#;
    let m = Mounted::with_args(&["--trace-syscalls"]);
    let (_a, _b, ports) = listeners();
    let meta = ["169.254.169.254:80", "[fd00:ec2::254]:80"];
    let connect = |extra: &[String]| {
        let mut args = vec!["/usr/bin/python3", "-c", CONNECT, meta[0], meta[1]];
        args.extend(extra.iter().map(String::as_str));
        text(&run_agent_with(&m, "fs-engine", &[], &args))
    };
    // network = "all" (the default): everything but the metadata addresses.
    let local = format!("127.0.0.1:{}", ports[0]);
    let shown = connect(std::slice::from_ref(&local));
    assert!(shown.contains(&format!("{local} ok")), "{shown}");
    for dest in meta {
        assert!(shown.contains(&format!("{dest} EPERM")), "{dest}: {shown}");
    }
    let all = audit_until(&m, |all| {
        all.iter()
            .any(|r| r["operation"] == "connect" && r["path"] == "tcp://169.254.169.254:80")
    });
    assert!(all
        .iter()
        .any(|r| r["path"] == "tcp://169.254.169.254:80" && r["result"] == "denied"));

    // A network entry allows every address in it on its port, and nothing else; the metadata
    // address named exactly is let through to the network (which has no route to it here).
    agent_policy(
        &m,
        "fs-engine",
        &format!(
            "sandbox = {{ network = [\"127.0.0.0/8:{}\", \"169.254.169.254:80\"] }}",
            ports[0]
        ),
    );
    let inside = format!("127.0.0.2:{}", ports[0]);
    let other_port = format!("127.0.0.1:{}", ports[1]);
    let shown = connect(&[inside.clone(), other_port.clone()]);
    assert!(!shown.contains(&format!("{} EPERM", meta[0])), "{shown}");
    assert!(shown.contains(&format!("{} EPERM", meta[1])), "{shown}");
    assert!(!shown.contains(&format!("{inside} EPERM")), "{shown}");
    assert!(!shown.contains(&format!("{inside} EACCES")), "{shown}");
    assert!(
        shown.contains(&format!("{other_port} EACCES"))
            || shown.contains(&format!("{other_port} EPERM")),
        "{shown}"
    );
}
