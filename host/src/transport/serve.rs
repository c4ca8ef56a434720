//! The serving side: accepting connections and answering their streams.
//!
//! Every bound is here, because this is where a hostile or broken peer can push:
//! - addresses: an Initial from an address that has not proved it receives our packets
//!   is answered with a stateless QUIC Retry and forgotten, so spoofed or fire-and-forget
//!   Initials (a flood from fresh source ports) cost one packet each and hold nothing;
//!   only an Initial that carries a valid Retry token starts a handshake. Every new
//!   connection pays one round trip for this (see the transport essay for the figure);
//! - handshakes: at most `max_handshakes` at once, a budget of their own (`budget.rs`):
//!   when it is full the oldest handshake in progress gives way to the newcomer, so
//!   handshakes that stall on purpose cannot keep out one that completes; each lasts at
//!   most `dial_timeout`; certificate and identity refusals are logged (rate-limited) and
//!   counted;
//! - established connections: at most `max_connections`, and at most
//!   `max_connections_per_peer` per identity, checked once the handshake says who the
//!   peer is; a connection over either is closed with `CLOSE_BUSY`;
//! - streams per connection: QUIC stream credit (`max_streams_per_connection`), so excess
//!   requests wait at the peer instead of piling up here; and at most
//!   `max_requests_per_peer` requests of one identity read or handled at once, across its
//!   connections: its further streams are not read until one ends;
//! - bytes: QUIC receive windows of one frame per stream and two per connection
//!   (`tls.rs`), so what a peer has sent and we have not read is bounded; a frame's
//!   buffer grows with the bytes that arrived, never with the length announced;
//! - each stream: `stream_read_timeout` to deliver exactly one frame of at most `max_frame`
//!   bytes (checked before allocating) and finish; a stream that fails this is stopped and
//!   reset with a code saying why, counted, logged, and nothing else is affected;
//! - the handler: its own task (a panic costs one error response), `request_timeout`.
//!
//! After answering, a stream waits until the dialer has acknowledged the response before
//! it counts as finished: a connection being retired closes only when every response it
//! owes has arrived, so a clean close (`CLOSE_RETIRED`) really means nothing was lost.
//!
//! What it deliberately does not do: authorize. Any node or operator whose certificate
//! verified is served; the handler sees who it is ([`super::PeerInfo`]) and decides.

use std::sync::Arc;

use quinn::{Incoming, RecvStream, SendStream, VarInt};
use tokio::sync::OwnedSemaphorePermit;

use super::budget::{HandshakeSlot, PeerShare};
use super::error::{HandshakeFailure, explain_tls, handshake_failure};
use super::frame::{self, FrameError};
use super::registry::{Direction, InFlight, Live, Refused};
use super::stats::Counters;
use super::{Shared, peer, wire};
use crate::events::{SECURITY_REJECTED, TRANSPORT_REJECTED};

/// Accepts connections until the endpoint closes.
pub(crate) async fn accept_loop(shared: Arc<Shared>) {
    while let Some(incoming) = shared.endpoint.accept().await {
        if !incoming.remote_address_validated() {
            // Stateless: quinn keeps nothing of this Initial; the client comes back with
            // the token, from an address it has shown it can receive at.
            Counters::bump(&shared.counters.retries);
            if let Err(e) = incoming.retry() {
                // Only an Initial that already answered a Retry cannot get another, and
                // such an Initial is validated; kept for safety.
                e.into_incoming().ignore();
            }
            continue;
        }
        let (slot, evicted) = shared.handshakes.enter();
        if evicted {
            Counters::bump(&shared.counters.handshakes_evicted);
        }
        tokio::spawn(accept_one(shared.clone(), incoming, slot));
    }
}

/// Completes one handshake, checks the peer, and serves the connection until it closes.
async fn accept_one(shared: Arc<Shared>, incoming: Incoming, mut slot: HandshakeSlot) {
    let remote = incoming.remote_address();
    // Noted before the handshake picks its server configuration and asks the resolver for
    // our certificate (see `Registry::admit`).
    let own = shared.tls.own.current();
    let generation = shared.tls.current().generation;
    let handshake = async {
        match incoming.accept() {
            Ok(connecting) => connecting.await,
            Err(e) => Err(e),
        }
    };
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(shared.config.dial_timeout, handshake) => outcome,
        () = slot.evicted() => {
            // Dropping the handshake closes it.
            let reason = format!(
                "handshake abandoned for a newer one: {} handshakes in progress",
                shared.config.max_handshakes
            );
            shared.log_rejection(TRANSPORT_REJECTED, "unknown", remote, &reason);
            return;
        }
    };
    drop(slot);
    let conn = match outcome {
        Err(_) => {
            Counters::bump(&shared.counters.handshakes_failed);
            let reason = format!(
                "handshake not completed within {:?}",
                shared.config.dial_timeout
            );
            shared.log_rejection(TRANSPORT_REJECTED, "unknown", remote, &reason);
            return;
        }
        Ok(Err(e)) => {
            match handshake_failure(&e) {
                HandshakeFailure::WeRefused(reason) => {
                    Counters::bump(&shared.counters.handshakes_rejected);
                    shared.log_rejection(SECURITY_REJECTED, "unknown", remote, &reason);
                }
                HandshakeFailure::TheyRefused(reason) => {
                    Counters::bump(&shared.counters.handshakes_failed);
                    let reason = format!("the peer aborted the handshake: {reason}");
                    shared.log_rejection(TRANSPORT_REJECTED, "unknown", remote, &reason);
                }
                HandshakeFailure::Other(reason) => {
                    Counters::bump(&shared.counters.handshakes_failed);
                    shared.log_rejection(TRANSPORT_REJECTED, "unknown", remote, &reason);
                }
                HandshakeFailure::Closing => {}
            }
            return;
        }
        Ok(Ok(conn)) => conn,
    };
    let refuse = |who: &str, reason: String| {
        Counters::bump(&shared.counters.handshakes_rejected);
        conn.close(wire::CLOSE_IDENTITY, reason.as_bytes());
        shared.log_rejection(SECURITY_REJECTED, who, remote, &reason);
    };
    let (chain, info) = match peer::authenticate(&conn) {
        Ok(found) => found,
        Err(reason) => return refuse("unknown", reason),
    };
    let who = info.identity.to_string();
    let Some((_permit, share)) = admit_budget(&shared, &conn, &info.identity, &who, remote) else {
        return;
    };
    let live = Arc::new(Live::new(
        conn.clone(),
        info,
        chain,
        Direction::Accepted,
        own.local.clone(),
        own.generation,
    ));
    match shared.registry.admit(&live, generation, &shared.tls) {
        Ok(()) => {}
        Err(Refused::OwnChanged) => {
            // Which certificate the peer saw is unknown, so nothing may be answered on
            // this connection. Closed as retired with nothing processed: the dialer retries
            // on a new connection, which presents the new certificate.
            tracing::debug!(peer = %who, %remote, "our certificate changed during the handshake; connection retired unused");
            conn.close(wire::CLOSE_RETIRED, b"retired");
            return;
        }
        Err(Refused::Untrusted(e)) => {
            let reason = format!(
                "certificate no longer trusted (CA bundle changed during the handshake): {}",
                explain_tls(&e.to_string())
            );
            return refuse(&who, reason);
        }
        Err(Refused::Revoked) => {
            Counters::bump(&shared.counters.handshakes_rejected);
            Counters::bump(&shared.counters.revoked);
            let fingerprint = &live.peer.key;
            let reason = format!("key {fingerprint} is revoked");
            conn.close(wire::CLOSE_IDENTITY, reason.as_bytes());
            shared.log_revoked(&who, remote, fingerprint, "handshake refused");
            return;
        }
    }
    tracing::debug!(peer = %who, %remote, "connection accepted");
    serve_connection(&shared, &live, &share).await;
    shared.registry.remove(&live);
}

/// A place for an authenticated connection in the node's budget of established
/// connections and in its identity's share, or `None` after closing it with `CLOSE_BUSY`
/// (counted and logged).
fn admit_budget(
    shared: &Shared,
    conn: &quinn::Connection,
    identity: &crate::pki::Identity,
    who: &str,
    remote: std::net::SocketAddr,
) -> Option<(OwnedSemaphorePermit, PeerShare)> {
    let refused = match shared.permits.clone().try_acquire_owned() {
        Err(_) => Err(format!(
            "connection limit of {} reached",
            shared.config.max_connections
        )),
        Ok(permit) => match shared.shares.admit(identity) {
            Ok(share) => Ok((permit, share)),
            Err(held) => Err(format!("{who} already holds {held} connections, its limit")),
        },
    };
    match refused {
        Ok(admitted) => Some(admitted),
        Err(reason) => {
            Counters::bump(&shared.counters.connections_refused);
            conn.close(wire::CLOSE_BUSY, reason.as_bytes());
            let reason = format!("{reason}; connection refused");
            shared.log_rejection(TRANSPORT_REJECTED, who, remote, &reason);
            None
        }
    }
}

/// Takes streams from one connection until it closes. A stream is read only once its
/// identity has a request to spare (`max_requests_per_peer`, shared by all of that
/// identity's connections); until then it, and the streams after it, wait unread.
async fn serve_connection(shared: &Arc<Shared>, live: &Arc<Live>, share: &PeerShare) {
    while let Ok((mut send, mut recv)) = live.conn.accept_bi().await {
        let permit = tokio::select! {
            permit = share.requests.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = live.conn.closed() => return,
        };
        match live.begin() {
            Some(flight) => {
                tokio::spawn(serve_stream(shared.clone(), flight, permit, send, recv));
            }
            None => {
                // Retiring: refuse unprocessed, so the dialer retries on a new connection.
                close_stream(&mut send, &mut recv, wire::STREAM_REFUSED);
            }
        }
    }
}

/// Reads one request, runs the handler, writes the response, and waits for its delivery.
/// `_request` is the identity's request permit, held until the stream is done.
async fn serve_stream(
    shared: Arc<Shared>,
    flight: InFlight,
    _request: OwnedSemaphorePermit,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let live = flight.live().clone();
    let max = shared.config.max_frame;
    let read = async {
        let body = frame::read_frame(&mut recv, max).await?;
        frame::read_end(&mut recv).await?;
        Ok::<_, FrameError>(body)
    };
    let outcome = tokio::time::timeout(shared.config.stream_read_timeout, read).await;
    let body = match outcome {
        Ok(Ok(body)) => body,
        Ok(Err(FrameError::Read(e))) => {
            // The dialer gave up (reset) or the connection is gone: nothing to refuse.
            tracing::debug!(peer = %live.peer.identity, error = %e, "request stream abandoned");
            return;
        }
        Ok(Err(e)) => {
            let code = match e {
                FrameError::TooLarge { .. } => wire::STREAM_TOO_LARGE,
                _ => wire::STREAM_MALFORMED,
            };
            return reject_stream(&shared, &live, &mut send, &mut recv, code, e.to_string());
        }
        Err(_) => {
            let reason = format!(
                "request not delivered within {:?}",
                shared.config.stream_read_timeout
            );
            return reject_stream(
                &shared,
                &live,
                &mut send,
                &mut recv,
                wire::STREAM_TOO_SLOW,
                reason,
            );
        }
    };

    let (status, payload) = run_handler(&shared, &live, body).await;
    if let Err(e) = frame::write_frame(&mut send, &[status], &payload).await {
        tracing::debug!(peer = %live.peer.identity, error = %e, "response not delivered");
        return;
    }
    let _ = send.finish();
    // Hold the request open until the dialer has acknowledged the whole response.
    let _ = tokio::time::timeout(shared.config.request_timeout, send.stopped()).await;
    drop(flight);
}

/// The handler's answer as a status and a payload of at most `max_frame` bytes.
async fn run_handler(shared: &Arc<Shared>, live: &Arc<Live>, body: Vec<u8>) -> (u8, Vec<u8>) {
    let max = shared.config.max_frame;
    let handler = shared.handler.clone();
    let peer = live.peer.clone();
    let local = live.local.clone();
    let task = tokio::spawn(async move { handler.handle(peer, local, body).await });
    let abort = task.abort_handle();
    let error = |message: String| {
        let mut bytes = message.into_bytes();
        bytes.truncate(max);
        (wire::STATUS_ERROR, bytes)
    };
    match tokio::time::timeout(shared.config.request_timeout, task).await {
        Ok(Ok(Ok(response))) if response.len() <= max => (wire::STATUS_OK, response),
        Ok(Ok(Ok(response))) => error(format!(
            "the response of {} bytes exceeds the frame limit of {max} bytes",
            response.len()
        )),
        Ok(Ok(Err(message))) => error(message),
        Ok(Err(join)) if join.is_cancelled() => {
            // The endpoint is shutting down and aborted the handler: not a fault.
            tracing::debug!(peer = %live.peer.identity, "request handler cancelled at shutdown");
            error("the node is shutting down".into())
        }
        Ok(Err(join)) => {
            tracing::error!(peer = %live.peer.identity, error = %join, "request handler panicked");
            error("the request handler failed".into())
        }
        Err(_) => {
            abort.abort();
            error(format!(
                "the request handler did not answer within {:?}",
                shared.config.request_timeout
            ))
        }
    }
}

/// Refuses a stream for a protocol violation: closes both directions with `code`, counts
/// and logs it. The connection and its other streams carry on.
fn reject_stream(
    shared: &Shared,
    live: &Live,
    send: &mut SendStream,
    recv: &mut RecvStream,
    code: VarInt,
    reason: String,
) {
    close_stream(send, recv, code);
    Counters::bump(&shared.counters.streams_rejected);
    shared.log_rejection(
        TRANSPORT_REJECTED,
        &live.peer.identity.to_string(),
        live.peer.remote,
        &format!("stream refused: {reason}"),
    );
}

fn close_stream(send: &mut SendStream, recv: &mut RecvStream, code: VarInt) {
    let _ = recv.stop(code);
    let _ = send.reset(code);
}
