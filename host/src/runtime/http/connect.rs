//! Sends one admitted request: TCP, TLS for `https`, HTTP/1.1, over a [`Socket`] that
//! resets the connection when the request is abandoned.
//!
//! wasmtime-wasi-http's `default_send_request` owns its socket and closes it normally
//! when the request is dropped, so a request the fence aborted at D kept its queued bytes
//! in the kernel, which delivered them after D (see `socket.rs` for the story). This
//! sender is ours only so that the socket is: it does what the default sender does, with
//! the same timeouts and the same errors for the plugin:
//! - connect to `host:port` (80 or 443 by default) within the connect timeout, else
//!   `connection-timeout`; a failed connect is a connection error;
//! - for `https`, rustls with the webpki roots and the ring provider, the server name
//!   being the URI's host (an IP literal is checked as an address); a failed handshake is
//!   a TLS error;
//! - the HTTP/1.1 handshake within the connect timeout, the request sent in origin form
//!   (the path and query, `/` if none);
//! - the response head within the first-byte timeout, else `connection-read-timeout`,
//!   and each body frame within the between-bytes timeout of the previous one, else
//!   `connection-read-timeout`. A timeout not given is 600 s, as there.

use std::future::poll_fn;
use std::net::IpAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, timeout};
use tokio_rustls::TlsConnector;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::socket::{MayNoLongerAct, Socket};

/// A timeout the request does not set.
const UNSET: Duration = Duration::from_secs(600);

/// A socket, or TLS over one.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Sends `request` and waits for the response head; the response, and the future that
/// carries the rest of the connection (the response body's bytes) until it ends.
pub(super) async fn send_request(
    mut request: http::Request<WasiBody>,
    options: RequestOptions,
    may_no_longer_act: MayNoLongerAct,
) -> Result<
    (
        http::Response<WasiBody>,
        impl Future<Output = Result<(), Error>> + Send,
    ),
    Error,
> {
    let uri = request.uri();
    let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
    let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let host = authority.host().to_string();
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let connect_timeout = options.connect_timeout.unwrap_or(UNSET);
    let first_byte_timeout = options.first_byte_timeout.unwrap_or(UNSET);
    let between_bytes_timeout = options.between_bytes_timeout.unwrap_or(UNSET);

    // `host` keeps an IPv6 literal's brackets, which is how the lookup wants it too.
    let stream = match timeout(
        connect_timeout,
        TcpStream::connect(format!("{host}:{port}")),
    )
    .await
    {
        Ok(connected) => connected.map_err(Error::Connect)?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    let socket = Socket::new(stream, may_no_longer_act);
    let io: Box<dyn Io> = if tls {
        let name = server_name(&host)?;
        Box::new(
            tls_connector()
                .connect(name, socket)
                .await
                .map_err(Error::Tls)?,
        )
    } else {
        Box::new(socket)
    };
    let handshake = hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(io));
    let (mut sender, connection) = timeout(connect_timeout, handshake)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;

    // The scheme and authority went into the connection; the request line wants the
    // origin form (hyper would send the absolute form, which is for proxies).
    let origin = request.uri().path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(origin)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;

    let exchange = async move {
        let response = timeout(first_byte_timeout, sender.send_request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)??;
        Ok::<_, Error>(response.map(|incoming| Paced::new(incoming, between_bytes_timeout)))
    };
    // The connection must be polled for the request to go out and the head to come in.
    let mut exchange = pin!(exchange);
    let mut connection = Some(connection);
    let response = poll_fn(|cx| {
        if let Poll::Ready(response) = exchange.as_mut().poll(cx) {
            return Poll::Ready(response);
        }
        let Some(running) = connection.as_mut() else {
            return Poll::Pending;
        };
        let ended = ready!(Pin::new(running).poll(cx));
        connection = None;
        match ended {
            // Ended without a response head: the exchange has its error, or the head.
            Ok(()) => exchange.as_mut().poll(cx),
            Err(error) => Poll::Ready(Err(Error::from(error))),
        }
    })
    .await?;

    let rest = async move {
        let Some(connection) = connection else {
            return Ok(());
        };
        connection.await.map_err(|error| {
            if error.is_timeout() {
                Error::HttpResponseTimeout
            } else {
                Error::from(error)
            }
        })
    };
    Ok((response.map(BodyExt::boxed_unsync), rest))
}

/// The name rustls checks the server's certificate against: the host, or its address.
fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(ServerName::from(ip));
    }
    Ok(ServerName::try_from(host.to_string())?)
}

/// The one TLS client configuration: the webpki roots, no client certificate.
fn tls_connector() -> &'static TlsConnector {
    static CONNECTOR: OnceLock<TlsConnector> = OnceLock::new();
    CONNECTOR.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            // ring implements every default protocol version: this cannot fail.
            .expect("the ring provider supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    })
}

/// A response body that fails when the next frame takes longer than the between-bytes
/// timeout.
struct Paced {
    incoming: Incoming,
    gap: Duration,
    next_by: Pin<Box<Sleep>>,
}

impl Paced {
    fn new(incoming: Incoming, gap: Duration) -> Self {
        Self {
            incoming,
            gap,
            next_by: Box::pin(tokio::time::sleep(gap)),
        }
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next_by = Instant::now() + this.gap;
                this.next_by.as_mut().reset(next_by);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) if error.is_timeout() => {
                Poll::Ready(Some(Err(Error::HttpResponseTimeout)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(Error::from(error)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.next_by.as_mut().poll(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
