//! A real local HTTP server speaking the OpenAI embeddings API (`POST /v1/embeddings`), for the
//! endpoint client's tests. Its "model" hashes each word to one of [`DIM`] components, so texts
//! sharing words have close vectors. Replies can be scripted (an HTTP status, a delay, a body
//! that is not JSON) to test errors, retries and timeouts. Stopped on drop.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Components of the server's vectors.
pub const DIM: usize = 64;

/// What the server does with the next request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answers with this HTTP status and an error body.
    Status(u16),
    /// Waits this long, then answers normally.
    Delay(Duration),
    /// Answers 200 with a body that is not an embeddings list.
    Garbage,
    /// Answers this status with a body that repeats the request's Authorization header (as
    /// some proxies do).
    Echo(u16),
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The Authorization header.
    pub auth: Option<String>,
    /// The model asked for.
    pub model: String,
    /// The texts.
    pub inputs: Vec<String>,
}

/// The server.
pub struct EmbedServer {
    /// Its base URL, `http://127.0.0.1:PORT/v1`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EmbedServer {
    /// Starts a server on a free port of the loopback.
    pub fn start() -> EmbedServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let thread = {
            let (server, seen, script) = (server.clone(), seen.clone(), script.clone());
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let (seen, script) = (seen.clone(), script.clone());
                    // One thread per request: a delayed reply must not hold the others up.
                    std::thread::spawn(move || serve(req, &seen, &script));
                }
            })
        };
        EmbedServer {
            url: format!("http://127.0.0.1:{port}/v1"),
            seen,
            script,
            server,
            thread: Some(thread),
        }
    }

    /// Queues replies for the next requests (after them, requests are answered normally).
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for EmbedServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The server's model: word counts hashed to [`DIM`] components.
pub fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIM];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = w
            .to_lowercase()
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
        v[(h % DIM as u64) as usize] += 1.0;
    }
    v
}

fn serve(mut req: tiny_http::Request, seen: &Mutex<Vec<Seen>>, script: &Mutex<VecDeque<Reply>>) {
    let mut body = String::new();
    let _ = req.as_reader().read_to_string(&mut body);
    let auth = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.to_string());
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let inputs: Vec<String> = parsed["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        auth,
        model: parsed["model"].as_str().unwrap_or("").to_string(),
        inputs: inputs.clone(),
    });
    let reply = script.lock().unwrap().pop_front();
    let known = req.url() == "/v1/embeddings" && !inputs.is_empty();
    let respond = |status: u16, body: String| {
        let _ = req.respond(
            tiny_http::Response::from_string(body)
                .with_status_code(status)
                .with_header(
                    "Content-Type: application/json"
                        .parse::<tiny_http::Header>()
                        .unwrap(),
                ),
        );
    };
    match reply {
        Some(Reply::Status(code)) => {
            respond(
                code,
                format!(r#"{{"error":{{"message":"scripted {code}"}}}}"#),
            );
        }
        Some(Reply::Garbage) => respond(200, "<html>not an API</html>".into()),
        Some(Reply::Echo(code)) => {
            let auth = seen.lock().unwrap().last().and_then(|s| s.auth.clone());
            respond(
                code,
                format!(r#"{{"error":"you sent {}"}}"#, auth.unwrap_or_default()),
            );
        }
        Some(Reply::Delay(d)) => {
            std::thread::sleep(d);
            respond(200, answer(&inputs));
        }
        None if !known => {
            respond(404, r#"{"error":"not found"}"#.into());
        }
        None => respond(200, answer(&inputs)),
    }
}

fn answer(inputs: &[String]) -> String {
    let data: Vec<serde_json::Value> = inputs
        .iter()
        .enumerate()
        .map(
            |(i, t)| serde_json::json!({"object": "embedding", "index": i, "embedding": vector(t)}),
        )
        .collect();
    serde_json::json!({"object": "list", "data": data, "model": "test"}).to_string()
}
