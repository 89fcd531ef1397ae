//! `GET /metrics` over HTTP, on its own thread.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::Metrics;

/// The metrics endpoint, running until dropped.
pub struct Server {
    http: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.http.server_addr().to_ip()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `metrics` at `http://ADDR/metrics`; `refresh` is called before each scrape to set
/// what is sampled rather than counted (quotas, state).
pub fn serve(
    addr: SocketAddr,
    metrics: &'static Metrics,
    refresh: impl Fn(&Metrics) + Send + 'static,
) -> std::io::Result<Server> {
    let http = Arc::new(tiny_http::Server::http(addr).map_err(std::io::Error::other)?);
    let listening = Arc::clone(&http);
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for request in listening.incoming_requests() {
                let response = match (request.method(), request.url()) {
                    (tiny_http::Method::Get, "/metrics") => {
                        refresh(metrics);
                        tiny_http::Response::from_string(metrics.encode()).with_header(
                            tiny_http::Header::from_bytes(
                                &b"Content-Type"[..],
                                &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                            )
                            .expect("a valid header"),
                        )
                    }
                    _ => tiny_http::Response::from_string("ClawFS serves /metrics only\n")
                        .with_status_code(404),
                };
                if let Err(e) = request.respond(response) {
                    tracing::debug!(error = %e, "answering a metrics scrape");
                }
            }
        })?;
    Ok(Server {
        http,
        thread: Some(thread),
    })
}
