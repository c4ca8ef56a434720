//! The outbound HTTP capability: `wasi:http/outgoing-handler`, fenced by the lease.
//!
//! wasi:http is linked for every plugin, so a component that imports it loads whether or
//! not its manifest grants anything; a request it makes without a grant is refused, not
//! the component. wasmtime-wasi-http builds the request from the guest's resources and
//! hands it to [`Hooks::send_request`] before anything reaches the network. There, for
//! every request:
//!
//! 1. Its scheme, host and port must match an `allowed_outbound_hosts` entry, or it is
//!    refused (`not-allowed`).
//! 2. The instance must be allowed to act ([`InstanceContext::may_act`], the one lease
//!    check), and a first-byte timeout the plugin asked for must end before the node's
//!    lease deadline D, or it is refused (`lease-expired`, or `stopping` once the
//!    instance's own interrupt time has come).
//! 3. `tenure-token`, `tenure-resource`, `tenure-slot` and `tenure-node` are set from the
//!    instance's grant, replacing any the plugin set, so a downstream service can keep the
//!    highest token it has seen for a resource and refuse lower ones.
//! 4. The connect, first-byte and between-bytes timeouts are at most the time left
//!    until D, and the request (and the connection carrying its response body) is dropped
//!    when the instance may no longer act: at D, or at its interrupt time. A renewal
//!    that moves D later keeps the request alive. The dropped request's connection is
//!    reset, not closed, so the bytes the kernel still queued for it are discarded
//!    rather than delivered after D (`http/socket.rs` says why and when).
//!
//! A refused or aborted request fails in the plugin with `HTTP-request-denied`, and the
//! host writes a `plugin.effect_refused` event (`effect = http`, `host`, `reason`). Those
//! events count against the instance's log budget, so a plugin retrying in a tight loop
//! cannot flood the node's log (the suppressed count is reported like plugin lines).
//!
//! The request itself goes out through our own sender (`http/connect.rs`), which does
//! what the crate's `default_send_request` does (HTTP/1.1 over tokio, HTTPS through
//! rustls with the webpki roots, the same timeouts and errors) over a socket we own, so
//! that an abandoned request can be reset. Nothing here is plugin-supplied TLS.
//!
//! What this does not do: it does not resolve names itself (a name is matched as
//! written, as Spin does, so `localhost` is not `127.0.0.1`), and a request that reached
//! the server before D may still be processed there after D: that is what the token
//! header is for.

use std::sync::Arc;
use std::time::Instant;

use http::HeaderValue;
use http_body_util::BodyExt;
use wasmtime_wasi_http::p2::bindings::http::types::{DnsErrorPayload, ErrorCode};
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

mod connect;
mod socket;

use self::socket::MayNoLongerAct;
use super::InstanceContext;
use super::refused::{Why, may_no_longer_act, refused};
use super::store::HostState;
use crate::catalog::capabilities::Scheme;

/// The headers the host sets on every outbound request.
pub const TOKEN_HEADER: &str = "tenure-token";
pub const RESOURCE_HEADER: &str = "tenure-resource";
pub const SLOT_HEADER: &str = "tenure-slot";
pub const NODE_HEADER: &str = "tenure-node";

/// A response future as wasmtime-wasi-http wants it back from `send_request`.
pub type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

/// The per-instance hook wasmtime-wasi-http calls for every outgoing request.
pub(super) struct Hooks {
    ctx: Arc<InstanceContext>,
}

impl Hooks {
    pub(super) fn new(ctx: Arc<InstanceContext>) -> Self {
        Self { ctx }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// The error codes the plugin sees are wasmtime-wasi-http's defaults; only the log line
/// differs. Its default hooks log these four failures at WARN with no plugin named and
/// the error in Rust's Debug form (`connect error: Os { code: 111, kind:
/// ConnectionRefused, .. }`); [`send`] logs them instead, with the plugin's grant and the
/// host, in words (`plugin.effect_failed`).
impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        outgoing(self.ctx.clone(), request, options)
    }

    fn p2_error_from_hyper(&mut self, _: &hyper::Error) -> ErrorCode {
        ErrorCode::HttpProtocolError
    }

    fn p2_error_from_connect(&mut self, _: &std::io::Error) -> ErrorCode {
        ErrorCode::ConnectionRefused
    }

    fn p2_error_from_tls(&mut self, _: &std::io::Error) -> ErrorCode {
        ErrorCode::TlsProtocolError
    }

    fn p2_error_from_dns(&mut self, _: &rustls_pki_types::InvalidDnsNameError) -> ErrorCode {
        ErrorCode::DnsError(DnsErrorPayload {
            rcode: Some("invalid dns name".to_string()),
            info_code: None,
        })
    }
}

/// Every outbound request of an instance goes through here: admitted (or refused) at
/// once, then sent and watched until the instance may no longer act. Public so that the
/// runtime benchmark can measure exactly this path against a direct send.
pub fn outgoing(
    ctx: Arc<InstanceContext>,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Sent {
    match admit(&ctx, request, options.unwrap_or_default(), Instant::now()) {
        Ok((request, options, target)) => Box::new(send(ctx, request, options, target)),
        Err(error) => Box::new(async move { Err(error) }),
    }
}

/// Checks one request against the grant and the lease and stamps it; the request to
/// send with its bounded options and its authority (for events), or the error for the
/// plugin.
fn admit(
    ctx: &InstanceContext,
    mut request: http::Request<WasiBody>,
    mut options: RequestOptions,
    now: Instant,
) -> Result<(http::Request<WasiBody>, RequestOptions, String), Error> {
    let uri = request.uri();
    let host = uri.host().unwrap_or_default().to_string();
    // What events name: the authority as the plugin wrote it (host and any port).
    let target = uri.authority().map_or(String::new(), |a| a.to_string());
    let scheme = match uri.scheme_str() {
        Some("http") => Some((Scheme::Http, 80)),
        Some("https") => Some((Scheme::Https, 443)),
        _ => None,
    };
    let allowed = scheme.is_some_and(|(scheme, default_port)| {
        let port = uri.port_u16().unwrap_or(default_port);
        ctx.granted.allows(scheme, &host, port)
    });
    if !allowed {
        refused(ctx, "http", &target, Why::NotAllowed, false);
        return Err(Error::HttpRequestDenied);
    }
    if let Err(refusal) = ctx.may_act() {
        refused(ctx, "http", &target, refusal.into(), false);
        return Err(Error::HttpRequestDenied);
    }
    // `None`: the lease is not enforced (the fault checker's broken build only).
    if let Some(left) = ctx.lease.time_left(now) {
        if options
            .first_byte_timeout
            .is_some_and(|asked| asked >= left)
        {
            let why = Why::Lease(super::Refusal::LeaseExpired);
            refused(ctx, "http", &target, why, false);
            return Err(Error::HttpRequestDenied);
        }
        for timeout in [
            &mut options.connect_timeout,
            &mut options.first_byte_timeout,
            &mut options.between_bytes_timeout,
        ] {
            *timeout = Some(timeout.map_or(left, |asked| asked.min(left)));
        }
    }
    let grant = &ctx.grant;
    let headers = request.headers_mut();
    for (name, value) in [
        (TOKEN_HEADER, grant.token.to_string()),
        (RESOURCE_HEADER, grant.resource.clone()),
        (SLOT_HEADER, grant.slot.to_string()),
        (NODE_HEADER, grant.node.clone()),
    ] {
        // Resource and node names are plain ASCII (catalog, pki), so this cannot fail;
        // if it did, the request must not go out without its fencing headers.
        let value = HeaderValue::from_str(&value)
            .map_err(|_| Error::InternalError(Some(format!("bad {name} header value"))))?;
        headers.insert(name, value);
    }
    Ok((request, options, target))
}

/// Sends an admitted request, dropping it (and later its response body's connection) as
/// soon as the instance may no longer act.
async fn send(
    ctx: Arc<InstanceContext>,
    request: http::Request<WasiBody>,
    options: RequestOptions,
    target: String,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
> {
    let abandoned: MayNoLongerAct = {
        let ctx = ctx.clone();
        Arc::new(move || ctx.may_act().is_err())
    };
    let sending = connect::send_request(request, options, abandoned);
    let (response, connection) = tokio::select! {
        result = sending => fenced(&ctx, &target, result)?,
        refusal = may_no_longer_act(&ctx) => {
            refused(&ctx, "http", &target, refusal.into(), true);
            return Err(Error::HttpRequestDenied);
        }
    };
    let connection = async move {
        tokio::select! {
            result = connection => fenced(&ctx, &target, result),
            refusal = may_no_longer_act(&ctx) => {
                refused(&ctx, "http", &target, refusal.into(), true);
                Err(Error::HttpRequestDenied)
            }
        }
    };
    Ok((
        response.map(BodyExt::boxed_unsync),
        Box::new(connection) as Box<dyn Future<Output = _> + Send>,
    ))
}

/// The outcome of a request's exchange, with an error that came because the instance may
/// no longer act said as the fence's refusal: the socket refuses writes from then on
/// (`http/socket.rs`), and that write error can come before the fence's own wake-up.
fn fenced<T>(ctx: &InstanceContext, target: &str, result: Result<T, Error>) -> Result<T, Error> {
    result.map_err(|error| match ctx.may_act() {
        Err(refusal) => {
            refused(ctx, "http", target, refusal.into(), true);
            Error::HttpRequestDenied
        }
        Ok(()) => {
            failed(ctx, target, &error);
            error
        }
    })
}

/// Writes `plugin.effect_failed` for a request towards `target` that the network or the
/// server failed (a refused or reset connection, a failed TLS handshake, a broken HTTP
/// exchange, a host that is no DNS name). Timeouts and the other errors the plugin sees
/// were never logged and are not.
fn failed(ctx: &InstanceContext, target: &str, error: &Error) {
    let why = match error {
        Error::Connect(e) => format!("cannot connect: {e}"),
        Error::Tls(e) => format!("the TLS handshake failed: {e}"),
        Error::Hyper(e) => format!("the HTTP exchange failed: {e}"),
        Error::InvalidDnsNameError(_) => "the host is not a valid DNS name".to_string(),
        _ => return,
    };
    super::refused::failed(ctx, "http", target, &why);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty, Full};
    use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

    use super::{admit, send};
    use crate::catalog::Secrets;
    use crate::catalog::capabilities::Capabilities;
    use crate::runtime::stalled::{StalledServer, assert_cut_off};
    use crate::runtime::tests::context;
    use crate::runtime::{Granted, InstanceContext, NodeLease};

    /// A context for session 7 (see `runtime::tests::context`) allowed to reach `hosts`,
    /// with D `left` from now.
    fn ctx(hosts: &[&str], left: Duration) -> Arc<InstanceContext> {
        let lease = Arc::new(NodeLease::new(true));
        lease.publish(Some(7), Some(Instant::now() + left));
        let capabilities = Capabilities {
            allowed_outbound_hosts: hosts
                .iter()
                .map(|h| crate::catalog::capabilities::AllowedHost::parse(h).unwrap())
                .collect(),
            ..Capabilities::default()
        };
        let ctx = Arc::into_inner(context(lease)).unwrap();
        Arc::new(ctx.with_granted(Arc::new(Granted::new(&capabilities, &Secrets::default()))))
    }

    fn request(uri: &str) -> http::Request<WasiBody> {
        http::Request::builder()
            .method("POST")
            .uri(uri)
            .header("tenure-token", "999")
            .body(
                Empty::new()
                    .map_err(|_: std::convert::Infallible| unreachable!())
                    .boxed_unsync(),
            )
            .unwrap()
    }

    /// `request(uri)` admitted now with the default options.
    fn admitted(
        ctx: &InstanceContext,
        uri: &str,
    ) -> (http::Request<WasiBody>, RequestOptions, String) {
        admit(ctx, request(uri), RequestOptions::default(), Instant::now()).unwrap()
    }

    fn denied<T>(result: Result<T, Error>) -> bool {
        matches!(result, Err(Error::HttpRequestDenied))
    }

    #[test]
    fn only_allowed_hosts_pass_and_they_carry_the_grant() {
        let ctx = ctx(
            &["http://127.0.0.1:8080", "https://*.example.com"],
            Duration::from_secs(2),
        );
        let now = Instant::now();
        for uri in [
            "http://127.0.0.1:8081/x",
            "https://127.0.0.1:8080/x",
            "http://localhost:8080/x",
            "https://example.com/",
            "http://api.example.com/",
        ] {
            assert!(
                denied(admit(&ctx, request(uri), RequestOptions::default(), now)),
                "{uri}"
            );
        }
        let (admitted, options, host) = admit(
            &ctx,
            request("http://127.0.0.1:8080/x"),
            RequestOptions::default(),
            now,
        )
        .unwrap();
        assert_eq!(host, "127.0.0.1:8080");
        let headers = admitted.headers();
        // The plugin's own tenure-token is replaced, not added to.
        assert_eq!(headers.get_all("tenure-token").iter().count(), 1);
        assert_eq!(headers["tenure-token"], "1");
        assert_eq!(headers["tenure-resource"], "r");
        assert_eq!(headers["tenure-slot"], "0");
        assert_eq!(headers["tenure-node"], "n");
        // Every timeout is bounded by the time left until D.
        for timeout in [
            options.connect_timeout,
            options.first_byte_timeout,
            options.between_bytes_timeout,
        ] {
            assert!(timeout.unwrap() <= Duration::from_secs(2), "{options:?}");
        }
        assert!(
            admit(
                &ctx,
                request("https://api.example.com/v1"),
                RequestOptions::default(),
                now
            )
            .is_ok()
        );
    }

    #[test]
    fn nothing_goes_out_after_d_or_when_d_comes_before_the_first_byte() {
        let ctx = ctx(&["http://127.0.0.1:8080"], Duration::from_millis(500));
        let now = Instant::now();
        let short = RequestOptions {
            first_byte_timeout: Some(Duration::from_millis(100)),
            connect_timeout: Some(Duration::from_secs(60)),
            ..RequestOptions::default()
        };
        let (_, options, _) = admit(&ctx, request("http://127.0.0.1:8080/"), short, now).unwrap();
        assert_eq!(options.first_byte_timeout, Some(Duration::from_millis(100)));
        assert!(options.connect_timeout.unwrap() <= Duration::from_millis(500));
        let long = RequestOptions {
            first_byte_timeout: Some(Duration::from_secs(1)),
            ..RequestOptions::default()
        };
        assert!(denied(admit(
            &ctx,
            request("http://127.0.0.1:8080/"),
            long,
            now
        )));
        ctx.lease.publish(Some(7), Some(now));
        let options = RequestOptions::default();
        assert!(denied(admit(
            &ctx,
            request("http://127.0.0.1:8080/"),
            options,
            now
        )));
    }

    /// A server that accepts connections and never answers; its address.
    async fn silent_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        addr
    }

    /// Admits and sends a request to `addr` under `ctx`, D being `d` from now once it is
    /// admitted (and `renewed` later, to `d2` from then, if given); how long it took.
    async fn in_flight(
        addr: std::net::SocketAddr,
        d: Duration,
        renew: Option<(Duration, Duration)>,
    ) -> (Result<(), Error>, Duration) {
        let entry = format!("http://{addr}");
        // D is far at admission, so no timeout is shorter than the abort.
        let ctx = ctx(&[entry.as_str()], Duration::from_secs(60));
        let started = Instant::now();
        let uri = format!("http://{addr}/");
        let (req, options, host) =
            admit(&ctx, request(&uri), RequestOptions::default(), started).unwrap();
        ctx.lease.publish(Some(7), Some(started + d));
        if let Some((at, d2)) = renew {
            let lease = ctx.lease.clone();
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                lease.publish(Some(7), Some(Instant::now() + d2));
            });
        }
        let result = send(ctx.clone(), req, options, host).await.map(|_| ());
        (result, started.elapsed())
    }

    #[tokio::test]
    async fn a_request_in_flight_is_aborted_at_d_and_a_renewal_moves_d() {
        let addr = silent_server().await;
        let (result, took) = in_flight(addr, Duration::from_millis(200), None).await;
        assert!(denied(result), "aborted at D");
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_millis(400),
            "{took:?}"
        );
        let renewal = Some((Duration::from_millis(100), Duration::from_millis(400)));
        let (result, took) = in_flight(addr, Duration::from_millis(200), renewal).await;
        assert!(denied(result), "aborted at the renewed D");
        assert!(
            took >= Duration::from_millis(490) && took < Duration::from_millis(700),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn https_goes_through_rustls() {
        // A server that closes every connection at once: the TLS handshake fails, and the
        // request fails with a TLS or connection error (the rustls client was built).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        let entry = format!("https://{addr}");
        let ctx = ctx(&[entry.as_str()], Duration::from_secs(5));
        let uri = format!("https://{addr}/");
        let (req, options, host) = admitted(&ctx, &uri);
        let result = send(ctx, req, options, host).await.map(|_| ());
        assert!(
            matches!(result, Err(Error::Tls(_) | Error::Connect(_))),
            "{result:?}"
        );
    }

    /// The body of the requests that must not reach the server after D: far more than a
    /// loopback send queue holds, so some of it is always queued when D comes.
    const BODY: usize = 8 << 20;

    #[tokio::test]
    async fn a_request_aborted_at_d_is_reset_and_its_queued_bytes_never_arrive() {
        let server = StalledServer::start();
        let addr = server.addr;
        let entry = format!("http://{addr}");
        let ctx = ctx(&[entry.as_str()], Duration::from_secs(60));
        let started = Instant::now();
        let body = Full::new(Bytes::from(vec![b'x'; BODY]))
            .map_err(|e: std::convert::Infallible| match e {})
            .boxed_unsync();
        let request = request(&format!("http://{addr}/")).map(|_| body);
        let (req, options, host) =
            admit(&ctx, request, RequestOptions::default(), started).unwrap();
        ctx.lease
            .publish(Some(7), Some(started + Duration::from_millis(300)));
        let result = send(ctx, req, options, host).await.map(|_| ());
        assert!(denied(result), "aborted at D");
        let (received, end) = tokio::task::spawn_blocking(move || server.drain())
            .await
            .unwrap();
        assert_cut_off(received, &end, BODY);
    }

    #[tokio::test]
    async fn a_completed_request_closes_its_connection_with_a_fin() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut head = Vec::new();
            let mut byte = [0; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).map(|_| rest)
        });
        let entry = format!("http://{addr}");
        let ctx = ctx(&[entry.as_str()], Duration::from_secs(60));
        let uri = format!("http://{addr}/");
        let (req, options, host) = admitted(&ctx, &uri);
        let (response, connection) = send(ctx, req, options, host).await.unwrap();
        // As wasmtime-wasi-http does: the connection runs in a task of its own, which is
        // aborted when the plugin drops the response body.
        let connection = tokio::spawn(Box::into_pin(connection));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        connection.abort();
        let end = tokio::task::spawn_blocking(move || server.join().unwrap())
            .await
            .unwrap();
        assert!(end.as_ref().is_ok_and(|rest| rest.is_empty()), "{end:?}");
    }

    #[tokio::test]
    async fn timeouts_end_a_request_by_d() {
        let addr = silent_server().await;
        let entry = format!("http://{addr}");
        let ctx = ctx(&[entry.as_str()], Duration::from_millis(300));
        let started = Instant::now();
        let uri = format!("http://{addr}/");
        let (req, options, host) =
            admit(&ctx, request(&uri), RequestOptions::default(), started).unwrap();
        let result = send(ctx, req, options, host).await;
        assert!(result.is_err());
        assert!(
            started.elapsed() < Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
    }
}
