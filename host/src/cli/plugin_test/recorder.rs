//! The recording HTTP server of `tenure plugin test` (the script's `record_http`): what a
//! plugin's outbound requests look like from the service it protects.
//!
//! A fenced service refuses a request whose `tenure-token` is older than one it has seen
//! (docs/plugins.md, "Capabilities"). The script's `expect-requests` step checks what such a
//! service would need: every request carries a token, and none of an owner arrived after
//! a newer owner started (no stale owner acts). This server only records: it answers
//! every request `200 ok`, with hyper's HTTP/1.1 server on a thread of its own, so it
//! answers while the runner waits.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// When its head arrived (this machine's wall clock, as the nodes' event times).
    pub at: SystemTime,
    pub method: String,
    pub path: String,
    /// Its `tenure-token` header, if any and a number.
    pub token: Option<u64>,
}

/// The server; it stops when dropped (its thread's runtime with it).
pub struct Recorder {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Recorder {
    /// Listens on `addr` (the address the plugin's manifest grants).
    pub fn start(addr: SocketAddr) -> anyhow::Result<Recorder> {
        let listener = std::net::TcpListener::bind(addr).with_context(|| {
            format!("cannot listen on {addr} for the recording HTTP server (`record_http`)")
        })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the recording server's runtime")?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .context("cannot serve the recording HTTP server's socket")?
        };
        let kept = requests.clone();
        std::thread::Builder::new()
            .name("plugin-test-recorder".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        _ = accept(listener, kept) => {}
                        _ = stopped => {}
                    }
                });
            })
            .context("cannot start the recording server's thread")?;
        Ok(Recorder {
            addr,
            requests,
            _stop: stop,
        })
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn accept(listener: tokio::net::TcpListener, requests: Arc<Mutex<Vec<Recorded>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let requests = requests.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let header = |name: &str| {
                    let value = request.headers().get(name)?;
                    value.to_str().ok().map(str::to_owned)
                };
                let recorded = Recorded {
                    at: SystemTime::now(),
                    method: request.method().to_string(),
                    path: request.uri().path().to_owned(),
                    token: header("tenure-token").and_then(|t| t.parse().ok()),
                };
                requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(recorded);
                async { Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("ok\n")))) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
