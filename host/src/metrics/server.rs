//! The listener: hyper's HTTP/1.1 server over tokio, with the bounds a plain-HTTP port
//! open to a network needs.
//!
//! hyper parses the requests, keeps connections alive, answers `431` to a head longer
//! than its buffer and closes a connection whose head does not arrive within its header
//! timeout. Around it this module adds what hyper leaves to the caller: at most
//! [`Limits::connections`] connections at once (more are closed at once, unanswered), and
//! per-connection read and write timeouts on the socket ([`tokio_io_timeout`]), so that
//! an idle kept-alive connection, or a client that stops reading its answer, frees its
//! place. Each connection is one task; a failing connection ends only that task.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_io_timeout::TimeoutStream;

use super::{Probe, exposition, page};
use crate::ratelimit::RateLimiter;

/// The longest request head read (request line and headers); longer ones get `431`.
/// hyper's smallest read buffer is 8 KiB.
pub const MAX_REQUEST: usize = 8 << 10;

/// The bounds of the listener; [`Limits::default`] is what a node uses.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; more are closed without an answer.
    pub connections: usize,
    /// How long a client may take to send a whole request head.
    pub head_timeout: Duration,
    /// How long a read may wait: an idle kept-alive connection is closed after it.
    pub idle_timeout: Duration,
    /// How long a write may wait on a client that does not read.
    pub write_timeout: Duration,
    /// `/status` is built at most once per this interval; scrapes in between get the
    /// last answer (a cluster's status costs far more than a metrics sample).
    pub status_every: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 32,
            head_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(15),
            write_timeout: Duration::from_secs(5),
            status_every: Duration::from_millis(500),
        }
    }
}

/// The running endpoint. Dropping it stops accepting; connections already accepted
/// end within their timeouts.
pub struct MetricsServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (port 0: any free port) and serves `probe` until dropped.
    pub async fn bind(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<Self> {
        Self::bind_with(addr, probe, Limits::default()).await
    }

    /// [`MetricsServer::bind`] with other bounds (tests shrink them).
    pub async fn bind_with(
        addr: SocketAddr,
        probe: Arc<dyn Probe>,
        limits: Limits,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let routes = Arc::new(Routes {
            probe,
            status: tokio::sync::Mutex::new(None),
            status_every: limits.status_every,
        });
        let accept = tokio::spawn(accept_loop(listener, routes, limits));
        Ok(Self { addr, accept })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, routes: Arc<Routes>, limits: Limits) {
    let places = Arc::new(Semaphore::new(limits.connections));
    let mut warnings = RateLimiter::new(3, Duration::from_secs(60));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                if let Some(held) = warnings.admit(Instant::now()) {
                    tracing::warn!(event = crate::events::METRICS_ERROR, %error, suppressed = held, "metrics: cannot accept a connection");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            continue; // Too many at once: dropping the stream closes it.
        };
        let routes = routes.clone();
        tokio::spawn(async move {
            serve_connection(stream, routes, limits).await;
            drop(place);
        });
    }
}

/// Serves requests on one connection until the client closes it, a timeout fires or
/// a request is malformed (hyper answers it when it can, then closes).
async fn serve_connection(stream: TcpStream, routes: Arc<Routes>, limits: Limits) {
    let mut stream = TimeoutStream::new(stream);
    stream.set_read_timeout(Some(limits.idle_timeout));
    stream.set_write_timeout(Some(limits.write_timeout));
    let io = TokioIo::new(Box::pin(stream));
    let service = service_fn(move |request| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(routes.answer(request).await) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(MAX_REQUEST)
        .serve_connection(io, service)
        .await;
}

/// What the paths answer.
struct Routes {
    probe: Arc<dyn Probe>,
    /// The last `/status` answer and when it was built.
    status: tokio::sync::Mutex<Option<(Instant, Bytes)>>,
    status_every: Duration,
}

impl Routes {
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        // hyper drops the body of an answer to HEAD and keeps its Content-Length.
        if request.method() != Method::GET && request.method() != Method::HEAD {
            let mut answer = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            answer
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return answer;
        }
        match request.uri().path() {
            "/metrics" => {
                let body = exposition::render(&self.probe.sample());
                with_type(
                    Response::new(Full::new(body.into())),
                    exposition::CONTENT_TYPE,
                )
            }
            // Liveness: the process answers. `/healthz` is its older name.
            "/livez" | "/healthz" => plain(StatusCode::OK, "ok\n"),
            "/readyz" => match self.probe.sample().readiness() {
                Ok(()) => plain(StatusCode::OK, "ready\n"),
                Err(reason) => plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {reason}\n"),
                ),
            },
            "/status" => match self.status().await {
                Ok(body) => {
                    let answer = with_type(Response::new(Full::new(body)), "application/json");
                    not_cached(answer)
                }
                Err(error) => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot build the status: {error}\n"),
                ),
            },
            "/" => {
                let mut answer = with_type(
                    Response::new(Full::new(Bytes::from_static(page::HTML.as_bytes()))),
                    "text/html; charset=utf-8",
                );
                let policy = header::HeaderValue::from_str(&page::CONTENT_SECURITY_POLICY)
                    .expect("the policy is ASCII");
                answer
                    .headers_mut()
                    .insert(header::CONTENT_SECURITY_POLICY, policy);
                not_cached(answer)
            }
            _ => plain(
                StatusCode::NOT_FOUND,
                "not found: try /, /status, /metrics, /livez or /readyz\n",
            ),
        }
    }

    /// The JSON of the cluster's status, built at most once per `status_every` (and
    /// off the async workers: at scale it is the one costly answer here).
    async fn status(&self) -> Result<Bytes, String> {
        let mut last = self.status.lock().await;
        if let Some((at, body)) = &*last
            && at.elapsed() < self.status_every
        {
            return Ok(body.clone());
        }
        let probe = self.probe.clone();
        let body = tokio::task::spawn_blocking(move || serde_json::to_vec(&probe.status()))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let body = Bytes::from(body);
        *last = Some((Instant::now(), body.clone()));
        Ok(body)
    }
}

fn plain(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from(body.into())));
    *answer.status_mut() = status;
    with_type(answer, "text/plain; charset=utf-8")
}

fn with_type(
    mut answer: Response<Full<Bytes>>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let headers = answer.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    // Browsers take the declared type as is (no sniffing a status as a script).
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    answer
}

fn not_cached(mut answer: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    answer.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    answer
}
