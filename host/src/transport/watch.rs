//! Rotation without restart: watching the certificate, key and CA bundle files.
//!
//! Every `reload_interval` the watcher looks at the three files' size, modification time
//! and inode; when any changed (or the last attempt failed) it hashes their contents, and
//! when the contents differ from what is loaded it reloads:
//! - **certificate and key** together, with [`pki::load_identity`] and rustls's own
//!   key/certificate match check; the result replaces our certificate in the shared
//!   resolver, so every later handshake presents it; then every live connection is retired
//!   (requests in flight finish, later ones move to new connections), so that signed
//!   traffic moves to the new key (the peer verifies envelopes with the certificate of
//!   the connection they arrive on);
//!   a certificate naming a different node or operator than the one bound is refused;
//! - **CA bundle**, with [`pki::load_ca_bundle`]; new verifiers are installed for new
//!   handshakes (`tls.rs`), then every live connection's peer chain is verified again and
//!   the ones that fail are retired (`registry.rs`).
//!
//! A reload that fails keeps what is loaded and is tried again on the next poll. It is
//! logged once per file version: `pki::rotate` renames the key before the certificate, so
//! a poll between the two renames sees a mismatched pair ([`pki::PkiError::is_transient`]),
//! which is logged quietly and resolves itself a poll later; anything else is a warning.
//! The node's own certificate is also checked against [`pki::expiry_warning`] on every
//! poll, with one `tls.expiring` line per certificate.
//!
//! File reading and parsing run on the blocking pool; applying the result is quick. What
//! this does not do: use inotify (polling three small files is cheap and works on every
//! file system and with every way of replacing a file), or reload anything else.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::registry::Direction;
use super::resolver::Own;
use super::stats::Counters;
use super::trust::Trust;
use super::{Shared, TlsFiles, TransportError};
use crate::events::{SECURITY_REJECTED, TLS_EXPIRING, TLS_RELOAD_FAILED, TLS_RELOADED};
use crate::pki::{self, ExpiryWarning, Identity};

/// What the watcher knows about the files.
pub(crate) struct Watch {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    identity: Identity,
    pair: Tracker,
    bundle: Tracker,
}

/// How many polls a "transient" failure may last before it is reported as a warning: a
/// rotation resolves within a poll or two, a deleted key file never does.
const STUCK_AFTER_POLLS: u32 = 10;

/// The state of one watched set of files (the pair, or the bundle).
#[derive(Default)]
struct Tracker {
    stuck_after: Duration,
    stamps: Vec<Option<Stamp>>,
    loaded: Option<[u8; 32]>,
    failed: Option<Failed>,
}

/// The version of the files whose loading failed, and how that was reported.
#[derive(Clone, Copy)]
struct Failed {
    hash: [u8; 32],
    transient: bool,
    since: Instant,
    escalated: bool,
}

/// What a change detector looks at before reading a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// A result of one poll.
pub(crate) enum Found {
    /// A new certificate and key.
    Identity(Own),
    /// A new CA bundle.
    Bundle(Trust),
    /// A changed file that could not be loaded.
    Failed {
        what: &'static str,
        error: String,
        transient: bool,
    },
}

impl Watch {
    /// Loads the files for `bind`, where a failure is fatal, and remembers their versions.
    pub(crate) fn start(
        files: TlsFiles,
        provider: Arc<CryptoProvider>,
        reload_interval: Duration,
    ) -> Result<(Watch, Own, Trust), TransportError> {
        let stuck_after = reload_interval * STUCK_AFTER_POLLS;
        let pair_paths = [files.cert.as_path(), files.key.as_path()];
        // Versions are taken before loading, so a change in between is seen at the next poll.
        let pair = Tracker {
            stuck_after,
            stamps: stamps(&pair_paths),
            loaded: Some(hash(&pair_paths)),
            failed: None,
        };
        let bundle = Tracker {
            stuck_after,
            stamps: stamps(&[files.ca.as_path()]),
            loaded: Some(hash(&[files.ca.as_path()])),
            failed: None,
        };
        let own = Own::new(pki::load_identity(&files.cert, &files.key)?, &provider)
            .map_err(|e| TransportError::Tls(format!("rustls refuses the key: {e}")))?;
        let trust = Trust::from_bundle(&pki::load_ca_bundle(&files.ca)?, &provider)
            .map_err(TransportError::Tls)?;
        let watch = Watch {
            identity: own.identity.clone(),
            files,
            provider,
            pair,
            bundle,
        };
        Ok((watch, own, trust))
    }

    /// Checks the files once; blocking. `own` and `cas` describe what is loaded now.
    pub(crate) fn poll(&mut self, own: &str, cas: &[String]) -> Vec<Found> {
        let mut found = Vec::new();
        found.extend(self.poll_pair(own));
        found.extend(self.poll_bundle(cas));
        found
    }

    fn poll_pair(&mut self, own: &str) -> Option<Found> {
        let paths = [self.files.cert.as_path(), self.files.key.as_path()];
        let hash = self.pair.changed(&paths)?;
        let result = pki::load_identity(&self.files.cert, &self.files.key)
            .map_err(|e| (e.to_string(), e.is_transient()))
            .and_then(|id| {
                if id.identity == self.identity {
                    Ok(id)
                } else {
                    Err((
                        format!(
                            "the new certificate is that of {}, but this transport is {}; \
                             refusing to change identity without a restart",
                            id.identity, self.identity
                        ),
                        false,
                    ))
                }
            })
            .and_then(|id| {
                Own::new(id, &self.provider)
                    .map_err(|e| (format!("rustls refuses the key: {e}"), false))
            });
        match result {
            Ok(new) => {
                self.pair.succeeded(hash);
                (new.fingerprint != own).then_some(Found::Identity(new))
            }
            Err((error, transient)) => {
                self.pair
                    .failed(hash, "certificate and key", error, transient)
            }
        }
    }

    fn poll_bundle(&mut self, cas: &[String]) -> Option<Found> {
        let paths = [self.files.ca.as_path()];
        let hash = self.bundle.changed(&paths)?;
        let result = pki::load_ca_bundle(&self.files.ca)
            .map_err(|e| (e.to_string(), e.is_transient()))
            .and_then(|bundle| Trust::from_bundle(&bundle, &self.provider).map_err(|e| (e, false)));
        match result {
            Ok(trust) => {
                self.bundle.succeeded(hash);
                (trust.ca_fingerprints != cas).then_some(Found::Bundle(trust))
            }
            Err((error, transient)) => self.bundle.failed(hash, "CA bundle", error, transient),
        }
    }
}

impl Tracker {
    /// The contents' hash if they may need loading: the stamps changed, or the last
    /// attempt failed transiently, and the contents differ from what is loaded.
    fn changed(&mut self, paths: &[&Path]) -> Option<[u8; 32]> {
        let now = stamps(paths);
        let retry = self.failed.is_some_and(|f| f.transient);
        if now == self.stamps && !retry {
            return None;
        }
        self.stamps = now;
        let hash = hash(paths);
        if Some(hash) == self.loaded {
            self.failed = None;
            return None;
        }
        if self.failed.is_some_and(|f| f.hash == hash && !f.transient) {
            return None;
        }
        Some(hash)
    }

    fn succeeded(&mut self, hash: [u8; 32]) {
        self.loaded = Some(hash);
        self.failed = None;
    }

    /// Records a failure; reports it the first time for this version of the files, and
    /// once more, as a warning, if a transient failure is still there after
    /// [`STUCK_AFTER_POLLS`] polls.
    fn failed(
        &mut self,
        hash: [u8; 32],
        what: &'static str,
        error: String,
        transient: bool,
    ) -> Option<Found> {
        match &mut self.failed {
            Some(f) if f.hash == hash => {
                if !f.transient || f.escalated || f.since.elapsed() < self.stuck_after {
                    return None;
                }
                f.escalated = true;
                Some(Found::Failed {
                    what,
                    error: format!("{error} (still failing after {:?})", self.stuck_after),
                    transient: false,
                })
            }
            _ => {
                self.failed = Some(Failed {
                    hash,
                    transient,
                    since: Instant::now(),
                    escalated: false,
                });
                Some(Found::Failed {
                    what,
                    error,
                    transient,
                })
            }
        }
    }
}

fn stamps(paths: &[&Path]) -> Vec<Option<Stamp>> {
    paths
        .iter()
        .map(|path| {
            fs::metadata(path).ok().map(|m| Stamp {
                len: m.len(),
                modified: m.modified().ok(),
                inode: m.ino(),
            })
        })
        .collect()
}

/// A hash of the files' contents (a missing or unreadable file hashes as its error kind).
fn hash(paths: &[&Path]) -> [u8; 32] {
    let mut h = Sha256::new();
    for path in paths {
        match fs::read(path) {
            Ok(bytes) => {
                h.update(b"file");
                h.update((bytes.len() as u64).to_be_bytes());
                h.update(&bytes);
            }
            Err(e) => {
                h.update(b"error");
                h.update(e.kind().to_string().as_bytes());
            }
        }
    }
    h.finalize().into()
}

/// Polls until the transport closes.
pub(crate) async fn run(shared: Arc<Shared>, mut watch: Watch, mut closing: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(shared.config.reload_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut warned: Option<String> = None;
    loop {
        tokio::select! {
            _ = closing.wait_for(|closed| *closed) => return,
            _ = ticker.tick() => {}
        }
        let own = shared.tls.own.current().fingerprint.clone();
        let cas = shared.tls.current().trust.ca_fingerprints.clone();
        let polled = tokio::task::spawn_blocking(move || {
            let found = watch.poll(&own, &cas);
            (watch, found)
        })
        .await;
        let Ok((returned, found)) = polled else {
            return;
        };
        watch = returned;
        for change in found {
            apply(&shared, change);
        }
        warn_expiry(&shared, &mut warned);
    }
}

fn apply(shared: &Shared, change: Found) {
    match change {
        Found::Identity(own) => {
            let previous = shared.tls.own.current().fingerprint.clone();
            let certificate = own.fingerprint.clone();
            let key = own
                .key
                .cert
                .first()
                .and_then(|leaf| crate::pki::key_fingerprint(leaf).ok())
                .unwrap_or_default();
            // First the resolver, so that the connections replacing the retired ones
            // present the new certificate.
            shared.tls.own.replace(own);
            Counters::bump(&shared.counters.reloads);
            let mut retired = 0;
            for live in shared.registry.retire_all() {
                if live.retire(shared.config.request_timeout) {
                    Counters::bump(&shared.counters.connections_retired);
                    retired += 1;
                }
            }
            tracing::info!(
                event = TLS_RELOADED,
                what = "certificate",
                %certificate,
                %key,
                previous_certificate = %previous,
                retired,
                "certificate reloaded; new handshakes present it, existing connections retired"
            );
        }
        Found::Bundle(trust) => install_bundle(shared, trust),
        Found::Failed {
            what,
            error,
            transient,
        } => {
            Counters::bump(&shared.counters.reload_failures);
            if transient {
                tracing::info!(
                    event = TLS_RELOAD_FAILED,
                    what,
                    %error,
                    transient,
                    "cannot reload yet (a rotation may be in progress); keeping the previous one and retrying"
                );
            } else {
                tracing::warn!(
                    event = TLS_RELOAD_FAILED,
                    what,
                    %error,
                    transient,
                    "cannot reload; keeping the previous one until the files change"
                );
            }
        }
    }
}

/// Installs new verifiers, then retires the connections whose peers they no longer trust.
fn install_bundle(shared: &Shared, trust: Trust) {
    let cas = trust.ca_fingerprints.clone();
    let current = match shared.tls.install(&shared.endpoint, trust) {
        Ok(current) => current,
        Err(e) => {
            Counters::bump(&shared.counters.reload_failures);
            tracing::warn!(event = TLS_RELOAD_FAILED, what = "CA bundle", error = %e, "cannot install the new CA bundle; keeping the previous one");
            return;
        }
    };
    Counters::bump(&shared.counters.reloads);
    tracing::info!(event = TLS_RELOADED, what = "CA bundle", cas = %cas.join(", "), generation = current.generation, "CA bundle reloaded");

    let own = shared.tls.own.current();
    if let Err(e) = current
        .trust
        .check(Direction::Accepted, &own.identity.name, &own.key.cert)
    {
        tracing::warn!(
            event = TLS_RELOADED,
            what = "CA bundle",
            own_cert_trusted = false,
            error = %e,
            "our own certificate does not verify against the new CA bundle: peers using it will refuse us"
        );
    }

    for (live, error) in shared.registry.reverify(&current) {
        if live.retire(shared.config.request_timeout) {
            Counters::bump(&shared.counters.connections_retired);
            shared.log_rejection(
                SECURITY_REJECTED,
                &live.peer.identity.to_string(),
                live.peer.remote,
                &format!(
                    "certificate {} no longer verifies against the CA bundle ({error}); \
                     connection retired",
                    live.peer.fingerprint
                ),
            );
        }
    }
}

/// One `tls.expiring` line per certificate that needs attention.
fn warn_expiry(shared: &Shared, warned: &mut Option<String>) {
    let own = shared.tls.own.current();
    if warned.as_deref() == Some(own.fingerprint.as_str()) {
        return;
    }
    let Some(warning) = pki::expiry_warning(own.not_before, own.not_after, SystemTime::now())
    else {
        return;
    };
    let state = match warning {
        ExpiryWarning::NotYetValid { starts_in } => {
            format!(
                "is not valid yet (valid in {})",
                humantime::format_duration(Duration::from_secs(starts_in.as_secs()))
            )
        }
        ExpiryWarning::ExpiresSoon { remaining } => format!(
            "expires in {}",
            humantime::format_duration(Duration::from_secs(remaining.as_secs()))
        ),
        ExpiryWarning::Expired { since } => format!(
            "expired {} ago",
            humantime::format_duration(Duration::from_secs(since.as_secs()))
        ),
    };
    tracing::warn!(
        event = TLS_EXPIRING,
        identity = %own.identity,
        certificate = %own.fingerprint,
        "our certificate {state}: peers refuse it outside its validity; rotate it (`tenure certs rotate`)"
    );
    *warned = Some(own.fingerprint.clone());
}
