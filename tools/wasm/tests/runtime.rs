//! The runtime on real WebAssembly: tools written in WAT (`testdata/`), compiled here, run as
//! core modules (WASI preview 1) and, made into components with the preview 1 adapter, as
//! `wasi:cli/command` components (WASI preview 2).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use clawfs_wasm::{Access, Call, Limits, Outbound, Preopen, Runtime, WasmError};
use sha2::{Digest, Sha256};

const LIMITS: Limits = Limits {
    memory_mb: 16,
    timeout_seconds: 5,
    output_bytes: 1 << 20,
    cpu_percent: 100,
};

fn module(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(format!("{name}.wat"));
    wat::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `module` as a `wasi:cli/command` component.
fn component(name: &str) -> Vec<u8> {
    wit_component::ComponentEncoder::default()
        .module(&module(name))
        .expect("a core module")
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        )
        .expect("the command adapter")
        .validate(true)
        .encode()
        .expect("a component")
}

mod support;

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn call<'a>(wasm: &'a [u8], hash: &'a str, input: &'a [u8]) -> Call<'a> {
    Call {
        tool: "test-tool",
        wasm,
        sha256: hash,
        input,
        preopens: Vec::new(),
        outbound: Vec::new(),
        env: Vec::new(),
        limits: LIMITS,
    }
}

#[test]
fn a_module_and_a_component_answer_their_request() {
    let rt = Runtime::new().unwrap();
    for wasm in [module("echo"), component("echo")] {
        let hash = sha(&wasm);
        let done = rt.run(call(&wasm, &hash, br#"{"q":1}"#)).unwrap();
        assert_eq!(done.exit_code, 0);
        assert_eq!(done.output, br#"{"q":1}"#);
        assert!(rt.is_compiled(&hash), "kept for the next call");
        let again = rt.run(call(&wasm, &hash, b"second")).unwrap();
        assert_eq!(again.output, b"second");
    }
}

#[test]
fn a_tool_reads_and_writes_only_the_folders_it_is_given() {
    let rt = Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let given = dir.path().join("given");
    std::fs::create_dir(&given).unwrap();
    std::fs::write(given.join("notes.txt"), "inside").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    let preopen = |access| {
        Preopen::beneath(
            dir.path(),
            Path::new("given"),
            "/workspaces/w".into(),
            access,
        )
        .unwrap()
    };
    for wasm in [module("read_file"), component("read_file")] {
        let hash = sha(&wasm);
        let mut c = call(&wasm, &hash, b"notes.txt");
        c.preopens.push(preopen(Access::Read));
        let done = rt.run(c).unwrap();
        assert_eq!(
            (done.exit_code, done.output.as_slice()),
            (0, &b"inside"[..])
        );
        for escape in [
            &b"../secret.txt"[..],
            b"/etc/passwd",
            b"../given/../secret.txt",
        ] {
            let mut c = call(&wasm, &hash, escape);
            c.preopens.push(preopen(Access::Read));
            let done = rt.run(c).unwrap();
            assert_ne!(done.exit_code, 0, "{}", String::from_utf8_lossy(escape));
            assert!(done.output.is_empty());
        }
        // No folder at all: nothing to open.
        let done = rt.run(call(&wasm, &hash, b"notes.txt")).unwrap();
        assert_ne!(done.exit_code, 0);
    }
    let wasm = module("write_file");
    let hash = sha(&wasm);
    let mut c = call(&wasm, &hash, b"made.txt");
    c.preopens.push(preopen(Access::Read));
    assert_ne!(rt.run(c).unwrap().exit_code, 0, "read-only means read-only");
    assert!(!given.join("made.txt").exists());
    let mut c = call(&wasm, &hash, b"made.txt");
    c.preopens.push(preopen(Access::ReadWrite));
    assert_eq!(rt.run(c).unwrap().exit_code, 0);
    assert_eq!(std::fs::read(given.join("made.txt")).unwrap(), b"written");
}

#[test]
fn limits_stop_a_tool_and_say_which() {
    let rt = Runtime::new().unwrap();
    let spin = module("spin");
    let mut c = call(&spin, "", b"");
    let hash = sha(&spin);
    c.sha256 = &hash;
    c.limits.timeout_seconds = 1;
    let started = std::time::Instant::now();
    match rt.run(c) {
        Err(WasmError::Timeout { seconds: 1 }) => {}
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(30));

    let grow = module("grow");
    let hash = sha(&grow);
    match rt.run(call(&grow, &hash, b"")) {
        Err(WasmError::Memory { limit_mb: 16 }) => {}
        other => panic!("{other:?}"),
    }

    for flood in [module("flood"), component("flood")] {
        let hash = sha(&flood);
        match rt.run(call(&flood, &hash, b"")) {
            Err(WasmError::Output { limit }) if limit == 1 << 20 => {}
            other => panic!("{other:?}"),
        }
    }
    // The runtime is unharmed.
    let echo = module("echo");
    let hash = sha(&echo);
    assert_eq!(rt.run(call(&echo, &hash, b"ok")).unwrap().output, b"ok");
}

#[test]
fn only_the_signed_bytes_are_compiled_and_garbage_is_refused() {
    let rt = Runtime::new().unwrap();
    let echo = module("echo");
    let signed = sha(&echo);
    let swapped = module("spin");
    match rt.run(call(&swapped, &signed, b"")) {
        Err(WasmError::Tampered { expected, found }) => {
            assert_eq!(expected, signed);
            assert_eq!(found, sha(&swapped));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !rt.is_compiled(&signed),
        "a swapped binary is never compiled"
    );
    for garbage in [
        &b"not wasm at all"[..],
        b"(module)",
        b"\0asm\x01\0\0\0\xff\xff",
        b"\0asm",
        b"",
    ] {
        let hash = sha(garbage);
        match rt.run(call(garbage, &hash, b"")) {
            Err(WasmError::Malformed(_)) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(garbage)),
        }
    }
}

#[test]
fn a_folder_is_reached_through_real_folders_only() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(dir.path().join("outside.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    std::os::unix::fs::symlink("/proc/self/cwd", dir.path().join("magic")).unwrap();
    for bad in ["link", "magic", "../x", "real/../../x", "/etc"] {
        let got = Preopen::beneath(dir.path(), Path::new(bad), "/w".into(), Access::Read);
        assert!(got.is_err(), "{bad} was opened");
    }
    // Inside a folder, a link out of it leads nowhere for the tool.
    std::os::unix::fs::symlink("/proc/self/cwd", real.join("magic")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), real.join("abs")).unwrap();
    std::os::unix::fs::symlink("../outside.txt", real.join("rel")).unwrap();
    let rt = Runtime::new().unwrap();
    let wasm = module("read_file");
    let hash = sha(&wasm);
    for name in [&b"abs"[..], b"rel", b"magic/Cargo.toml"] {
        let mut c = call(&wasm, &hash, name);
        c.preopens.push(
            Preopen::beneath(dir.path(), Path::new("real"), "/w".into(), Access::Read).unwrap(),
        );
        let done = rt.run(c).unwrap();
        assert_ne!(done.exit_code, 0, "{}", String::from_utf8_lossy(name));
        assert!(done.output.is_empty());
    }
}

#[test]
fn a_tool_blocked_in_the_host_is_stopped_at_its_time() {
    let rt = Runtime::new().unwrap();
    // A module reads on the call's own thread; a component reads files through streams, on
    // its executor's helper threads.
    for (shape, wasm) in [
        ("module", module("read_file")),
        ("component", component("read_file")),
    ] {
        // Nobody ever opens the FIFO's other end (the open blocks), or somebody holds it open
        // and never writes (the read blocks).
        for writer in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let fifo = dir.path().join("fifo");
            assert!(std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success());
            let held = writer.then(|| {
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    let f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                    std::thread::sleep(std::time::Duration::from_secs(4));
                    drop(f);
                })
            });
            let hash = sha(&wasm);
            let mut c = call(&wasm, &hash, b"fifo");
            c.limits.timeout_seconds = 1;
            c.preopens.push(
                Preopen::beneath(dir.path(), Path::new("."), "/w".into(), Access::Read).unwrap(),
            );
            let started = std::time::Instant::now();
            match rt.run(c) {
                Err(WasmError::Timeout { seconds: 1 }) => {}
                Ok(done) => assert_ne!(
                    (done.exit_code, done.output.is_empty()),
                    (0, true),
                    "{shape}, writer {writer}: nothing was ever written"
                ),
                Err(other) => panic!("{shape}, writer {writer}: {other:?}"),
            }
            // Stopped at its limit, long before the writer lets go.
            let took = started.elapsed();
            assert!(
                took < std::time::Duration::from_secs(4),
                "{shape}, writer {writer}: {took:?}"
            );
            if let Some(h) = held {
                h.join().unwrap();
            }
        }
    }
}

#[test]
fn a_tool_gets_its_share_of_a_cpu_and_no_more() {
    let rt = Runtime::new().unwrap();
    let spin = module("spin");
    let hash = sha(&spin);
    let mut c = call(&spin, &hash, b"");
    c.limits.timeout_seconds = 2;
    c.limits.cpu_percent = 20;
    let cpu = |_: ()| {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let before = cpu(());
    let started = std::time::Instant::now();
    assert!(matches!(rt.run(c), Err(WasmError::Timeout { .. })));
    let (used, wall) = (cpu(()) - before, started.elapsed());
    // At most its 20% of the time it ran, with room for the compile and the clock's steps.
    assert!(used < wall / 2, "used {used:?} of {wall:?}");
}

#[test]
fn a_sleep_is_bounded_by_the_time_limit_and_a_short_one_answers() {
    let rt = Runtime::new().unwrap();
    let nap = module("nap");
    let hash = sha(&nap);
    let done = rt.run(call(&nap, &hash, b"")).unwrap();
    assert_eq!(
        (done.exit_code, done.output.as_slice()),
        (0, &br#"{"u":7,"n":1}"#[..])
    );
    for sleep in [module("sleep"), component("sleep")] {
        let hash = sha(&sleep);
        let mut c = call(&sleep, &hash, b"");
        c.limits.timeout_seconds = 1;
        let started = std::time::Instant::now();
        match rt.run(c) {
            Err(WasmError::Timeout { seconds: 1 }) => {}
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }
}

/// A local HTTP server: the request line of each request it was sent, as it answers them.
fn http_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request);
            log.lock()
                .unwrap()
                .push(text.lines().next().unwrap_or("").to_string());
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    (port, seen)
}

/// What `seen` holds once it holds `n` requests, or after 10 s.
fn requests(seen: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
    for _ in 0..1000 {
        if seen.lock().unwrap().len() >= n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    seen.lock().unwrap().clone()
}

#[test]
fn a_tool_connects_only_where_it_may() {
    let rt = Runtime::new().unwrap();
    let (declared, declared_seen) = http_server();
    let (undeclared, undeclared_seen) = http_server();
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let tool = |port: u16| {
        support::component_of_world(&testdata, "connect", &[("PORT", port.to_string())])
    };
    let localhost = |port| Outbound {
        ip: "127.0.0.1".parse().unwrap(),
        port: Some(port),
    };

    // Where it may: the server has its request.
    let wasm = tool(declared);
    let hash = sha(&wasm);
    let mut c = call(&wasm, &hash, b"");
    c.outbound.push(localhost(declared));
    let done = rt.run(c).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&done.output),
        r#"{"connected":true}"#
    );
    assert_eq!(done.contacted, vec![([127, 0, 0, 1], declared).into()]);
    assert_eq!(
        requests(&declared_seen, 1),
        vec!["GET /from-tool HTTP/1.0".to_string()]
    );

    // Another port of the same host, and no network at all: refused (access-denied, 1), and
    // that server never hears of it.
    let wasm = tool(undeclared);
    let hash = sha(&wasm);
    for given in [vec![localhost(declared)], Vec::new()] {
        let mut c = call(&wasm, &hash, b"");
        let refused = if given.is_empty() {
            Vec::new()
        } else {
            vec![([127, 0, 0, 1], undeclared).into()]
        };
        c.outbound = given;
        let done = rt.run(c).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&done.output),
            r#"{"connected":false,"code":"01"}"#
        );
        assert!(done.contacted.is_empty());
        assert_eq!(done.refused, refused);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(undeclared_seen.lock().unwrap().is_empty());
}

#[test]
fn memories_and_tables_count_together_against_the_limit() {
    let rt = Runtime::new().unwrap();
    for name in ["memories", "tables"] {
        let wasm = module(name);
        let hash = sha(&wasm);
        let mut c = call(&wasm, &hash, b"");
        c.limits.memory_mb = 1;
        match rt.run(c) {
            Err(WasmError::Memory { limit_mb: 1 }) => {}
            other => panic!("{name}: {other:?}"),
        }
        // Within a limit that holds them all, they run.
        let mut c = call(&wasm, &hash, b"");
        c.limits.memory_mb = 4;
        assert_eq!(rt.run(c).unwrap().exit_code, 0, "{name}");
    }
}

#[test]
fn a_tool_cannot_hoard_the_daemons_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a").unwrap();
    let open_now = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = open_now();
    let rt = Runtime::new().unwrap();
    for wasm in [module("hoard"), component("hoard")] {
        let hash = sha(&wasm);
        let mut c = call(&wasm, &hash, b"a.txt");
        c.preopens
            .push(Preopen::beneath(dir.path(), Path::new("."), "/w".into(), Access::Read).unwrap());
        // Refused (an errno) or stopped before its 5,000th open, and every descriptor given
        // back at its end.
        match rt.run(c) {
            Ok(done) => assert_ne!(done.exit_code, 0),
            Err(WasmError::Handles { limit: 1000 }) => {}
            Err(other) => panic!("{other:?}"),
        }
        assert!(
            open_now() < before + 200,
            "{} open after the call",
            open_now()
        );
    }
}
