//! The runtime on real WebAssembly: tools written in WAT (`testdata/`), compiled here, run as
//! core modules (WASI preview 1) and, made into components with the preview 1 adapter, as
//! `wasi:cli/command` components (WASI preview 2).

use std::path::Path;

use clawfs_wasm::{Access, Call, Limits, Preopen, Runtime, WasmError};
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
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let rt = Runtime::new().unwrap();
    let wasm = module("read_file");
    let hash = sha(&wasm);
    let mut c = call(&wasm, &hash, b"fifo");
    c.limits.timeout_seconds = 1;
    c.preopens
        .push(Preopen::beneath(dir.path(), Path::new("."), "/w".into(), Access::Read).unwrap());
    // Nobody ever writes to the FIFO: only the watchdog ends the open.
    let started = std::time::Instant::now();
    match rt.run(c) {
        Err(WasmError::Timeout { seconds: 1 }) => {}
        Ok(done) => assert_ne!(done.exit_code, 0, "the open cannot have succeeded"),
        Err(other) => panic!("{other:?}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
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
    let sleep = module("sleep");
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
