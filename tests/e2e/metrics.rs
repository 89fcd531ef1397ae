//! `clawfs mount --metrics ADDR`: Prometheus metrics of a real mount while an agent works,
//! scraped over HTTP and by a real Prometheus (Debian's package) running every query of the
//! Grafana dashboard in docs/grafana.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{tool_call, Mounted};

/// A port free now on the loopback address.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on the loopback `port`: the status line and the body.
fn get(port: u16, path: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    ))
}

/// The value of the sample `series` (name and labels, exactly as encoded) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// An agent's day in small: files made, read and removed, a tool call, and one refusal (the
/// workspace's own metadata.json, which only the daemon writes).
fn agent_work(m: &Mounted) {
    m.open_workspace_to_all();
    let ws = m.ws();
    let out = m.run_agent(
        "fs-engine",
        &format!(
            "cd {ws} && for i in 1 2 3 4 5; do echo data-$i > f$i.txt; cat f$i.txt >/dev/null; done; rm f1.txt; echo '{{}}' > metadata.json 2>/dev/null; true",
            ws = ws.display(),
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = tool_call(
        m,
        "write_file",
        &serde_json::json!({"path": "by-tool.md", "content": "hello\n"}),
    );
    assert_eq!(r["ok"], true, "{r}");
}

#[test]
fn a_mount_serves_its_metrics_while_an_agent_works() {
    let port = free_port();
    let m = Mounted::with_args(&["--metrics", &port.to_string()]);
    agent_work(&m);
    let (status, text) = get(port, "/metrics").unwrap();
    assert!(status.contains("200"), "{status}");
    for series in [
        "clawfs_fuse_requests_total{op=\"create\"}",
        "clawfs_fuse_requests_total{op=\"lookup\"}",
        "clawfs_fuse_request_seconds_count{op=\"create\"}",
        "clawfs_daemon_bytes_total{direction=\"read\"}",
        "clawfs_audit_records_total",
        "clawfs_quota_used_bytes{agent=\"fs-engine\"}",
        "clawfs_quota_used_files{agent=\"fs-engine\"}",
    ] {
        let v = sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        assert!(v > 0.0, "{series} = {v}");
    }
    // The refusal, by agent and rule; a limit from the policy; state.
    assert!(
        text.lines()
            .any(|l| l.starts_with("clawfs_refusals_total{agent=\"fs-engine\"")),
        "{text}"
    );
    assert_eq!(
        sample(&text, "clawfs_quota_limit_bytes{agent=\"fs-engine\"}"),
        Some(1_073_741_824.0)
    );
    assert_eq!(sample(&text, "clawfs_estop"), Some(0.0));
    assert!(sample(&text, "clawfs_open_handles").is_some());
    // No path is a label: labels are operations, errnos, directions, agents and rules.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(labels) = line.split_once('{').map(|(_, l)| l) {
            assert!(!labels.contains('/'), "a path in a label: {line}");
        }
    }
    // Only /metrics, and only on the loopback address a bare port names.
    let (status, _) = get(port, "/").unwrap();
    assert!(status.contains("404"), "{status}");
}

#[test]
fn a_mount_without_metrics_serves_none() {
    let port = free_port();
    let m = Mounted::new();
    agent_work(&m);
    assert!(get(port, "/metrics").is_err(), "nothing listens on {port}");
    let out = m.try_mount(&["--metrics", "not-an-address"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("neither a port"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Prometheus server, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scraping `target` (host:port) every second.
    fn start(target: &str) -> Prometheus {
        let bin = Path::new("/usr/bin/prometheus");
        assert!(
            bin.exists(),
            "{} is missing: scripts/test.sh installs Debian's prometheus package",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: clawfs\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Prometheus {
            child,
            port,
            _dir: dir,
        }
    }

    /// The result vector of the instant query `expr`.
    fn query(&self, expr: &str) -> Vec<Value> {
        let out = Command::new("curl")
            .args(["-sG", "--max-time", "10", "--data-urlencode"])
            .arg(format!("query={expr}"))
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if answer["status"] != "success" {
            return Vec::new();
        }
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits (at most a minute) until `expr` answers something.
    fn until_answered(&self, expr: &str) -> Vec<Value> {
        for _ in 0..120 {
            let r = self.query(expr);
            if !r.is_empty() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Vec::new()
    }
}

#[test]
fn prometheus_scrapes_a_mount_and_every_dashboard_query_answers() {
    let port = free_port();
    let m = Mounted::with_args(&["--metrics", &port.to_string()]);
    let prometheus = Prometheus::start(&format!("127.0.0.1:{port}"));
    let up = prometheus.until_answered("up{job=\"clawfs\"} == 1");
    assert_eq!(up.len(), 1, "Prometheus never scraped the mount");
    agent_work(&m);
    // Work again a few scrapes later: rates need two samples that differ.
    std::thread::sleep(Duration::from_secs(3));
    agent_work(&m);
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana/clawfs-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 10);
    let unanswered: Vec<&String> = exprs
        .iter()
        .filter(|e| prometheus.until_answered(e).is_empty())
        .collect();
    assert!(unanswered.is_empty(), "no data for {unanswered:?}");
    let estop = prometheus.query("max(clawfs_estop)");
    assert_eq!(estop[0]["value"][1], "0");
}
