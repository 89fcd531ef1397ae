//! A tool's stdout and stderr: kept in memory up to a limit. A write past the limit stops the
//! tool (a trap) and is remembered, so the call's error can name the limit rather than a trap.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// Bytes written, at most `cap`.
#[derive(Clone)]
pub(crate) struct Capped {
    buf: Arc<Mutex<Vec<u8>>>,
    cap: usize,
    overflowed: Arc<AtomicBool>,
}

impl Capped {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Arc::default(),
            cap,
            overflowed: Arc::default(),
        }
    }

    /// What was written.
    pub(crate) fn contents(&self) -> Vec<u8> {
        self.lock().clone()
    }

    /// Whether a write went past the limit.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `data`, or refuses all of it if it does not fit.
    fn append(&self, data: &[u8]) -> Result<(), ()> {
        let mut buf = self.lock();
        if data.len() > self.cap - buf.len() {
            self.overflowed.store(true, Ordering::Relaxed);
            return Err(());
        }
        buf.extend_from_slice(data);
        Ok(())
    }
}

impl IsTerminal for Capped {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capped {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

const LIMIT: &str = "the tool's output passed its limit";

#[wasmtime_wasi::async_trait]
impl OutputStream for Capped {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.append(&bytes)
            .map_err(|()| StreamError::Trap(wasmtime::format_err!("{LIMIT}")))
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Room for one byte more than the limit: the write that passes it is refused by
        // `write`, which remembers it; reporting "closed" here would let the tool stop quietly.
        Ok(self.cap.saturating_sub(self.lock().len()).max(1))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capped {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(match self.append(data) {
            Ok(()) => Ok(data.len()),
            Err(()) => Err(io::Error::other(LIMIT)),
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
