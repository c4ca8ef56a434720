//! `tenure watch [RESOURCE] [--json]`: the current owners, then every ownership change,
//! until interrupted.
//!
//! The protocol and its guarantees are in `api/watch.rs`; this is the loop around it: ask
//! a node, print what [`Resume`] hands out, ask again. When the node stops answering (it
//! died, restarted, or the connection broke) the watch moves on to the next node it
//! knows: the `--addr`es given, then the members the answers named, round and round,
//! pausing a moment after each full round that failed. It says so on stderr, and again
//! when it is back, with the index it resumes after. A watch that never reached a node
//! (a wrong --addr, a cluster that is down) fails after one round instead, with the
//! reason, as `tenure status` does and as etcdctl does with a dead endpoint: going on
//! would print nothing but retries.
//!
//! Output ends quietly when stdout is closed (`tenure watch | head -1`): a failed write
//! ends the loop, and so does a closed pipe noticed between answers (a quiet cluster
//! writes nothing for a long time).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;

use super::admin::{Connection, Target};
use crate::api::{AdminClient, AdminError, AdminRequest, AdminResponse, HOLD, Resume, WatchEvent};
use crate::cluster::HISTORY_LEN;
use crate::terminal::escape;

/// The pause after a round in which no node answered.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long the watch's connection to a node may stay silent (keep-alives every quarter of
/// it) before the node is taken for dead and the watch asks another: the default lease
/// TTL, so a watch sees a dead node's slots move about when they do, as etcd's clients
/// notice a dead endpoint within seconds. (Below this, a node too busy to answer
/// keep-alives would be left for no reason.)
const LIVENESS: Duration = Duration::from_secs(2);

/// Runs `tenure watch` until stdout closes or a fatal error.
pub fn watch(resource: Option<String>, json: bool, conn: Connection) -> anyhow::Result<()> {
    if let Some(resource) = &resource {
        crate::catalog::manifest::check_resource_name(resource).map_err(anyhow::Error::msg)?;
    }
    let targets = conn.targets()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let first = resolve(&targets[0]).await?;
        // A node holds a request up to HOLD before it answers "nothing new"; keep-alives
        // notice a dead node within LIVENESS meanwhile.
        let client =
            AdminClient::with_idle(conn.files(), first, conn.timeout + HOLD, LIVENESS).await?;
        let outcome = follow(&client, targets, resource.as_deref(), json).await;
        client.close().await;
        outcome
    })
}

/// The watch loop.
async fn follow(
    client: &AdminClient,
    mut nodes: Vec<Target>,
    resource: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let mut resume = Resume::default();
    let mut at = 0;
    // Set while the watch is cut off: what went wrong, for the line saying it is back.
    let mut lost: Option<String> = None;
    let mut failed_in_a_row: usize = 0;
    // Whether any node has answered yet.
    let mut reached = false;
    loop {
        let target = nodes[at].clone();
        let request = resume.request(resource);
        match ask(client, &target, &request).await {
            Ok(answer) => {
                failed_in_a_row = 0;
                reached = true;
                if lost.take().is_some() {
                    eprintln!(
                        "watch: reconnected to {} at {}; resuming after index {}",
                        escape(&target.name),
                        escape(&target.addr),
                        resume.after().unwrap_or(0)
                    );
                }
                for (name, addr) in &answer.members {
                    if !nodes.iter().any(|n| n.name == *name) {
                        nodes.push(Target {
                            name: name.clone(),
                            addr: addr.clone(),
                        });
                    }
                }
                let first = resume.after().is_none();
                let taken = resume.take(answer);
                if first && taken.events.is_empty() {
                    let of = resource.map(|r| format!(" of {r}")).unwrap_or_default();
                    eprintln!("watch: no slots{of} yet; waiting for changes");
                }
                if taken.resync {
                    let note = format!(
                        "changes were missed (the cluster keeps the last {HISTORY_LEN}): a \
                         fresh listing follows"
                    );
                    eprintln!("watch: {note}");
                    if json {
                        let line = serde_json::json!({
                            "listing": false,
                            "event": "resync",
                            "index": resume.after(),
                            "reason": note,
                        });
                        if !print(&line.to_string()) {
                            return Ok(());
                        }
                    }
                }
                if !print_all(&taken.events, json)? || stdout_closed() {
                    return Ok(());
                }
            }
            Err(e) if !reached && failed_in_a_row + 1 >= nodes.len() => return Err(e.into()),
            Err(e) if retryable(&e) => {
                // A watch only reads: "it may or may not have taken effect" is for actions.
                let next = if nodes.len() > 1 {
                    "asking another node"
                } else {
                    "trying again"
                };
                eprintln!("watch: {}; {next}", lost_reason(&e));
                lost = Some(e.to_string());
                at = (at + 1) % nodes.len();
                failed_in_a_row += 1;
                if failed_in_a_row.is_multiple_of(nodes.len()) {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                if stdout_closed() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends one watch request to `target`.
async fn ask(
    client: &AdminClient,
    target: &Target,
    request: &AdminRequest,
) -> Result<crate::api::WatchAnswer, AdminError> {
    let addr = resolve(target).await.map_err(|e| AdminError::Unreachable {
        node: escape(&target.name).into_owned(),
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        reason: e.to_string(),
    })?;
    match client.request(&target.name, addr, request).await? {
        AdminResponse::Watch(answer) => Ok(answer),
        other => Err(AdminError::Protocol {
            node: escape(&target.name).into_owned(),
            reason: format!("a watch was answered with {other:?}"),
        }),
    }
}

/// What cut the watch off from a node, in words that fit a read.
fn lost_reason(e: &AdminError) -> String {
    match e {
        AdminError::Interrupted { node, addr, reason } => {
            format!("lost node {node} at {addr}: {reason}")
        }
        AdminError::Unreachable { node, addr, reason } => {
            format!("cannot reach node {node} at {addr}: {reason}")
        }
        other => other.to_string(),
    }
}

/// Whether a failure is the node's, so another node may do: it is unreachable or the
/// connection broke. A refusal, a certificate problem or an unreadable answer would be
/// the same everywhere.
fn retryable(e: &AdminError) -> bool {
    matches!(
        e,
        AdminError::Unreachable { .. } | AdminError::Interrupted { .. }
    )
}

/// The first socket address of a target.
async fn resolve(target: &Target) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(&target.addr)
        .await
        .with_context(|| format!("cannot resolve {}", escape(&target.addr)))?
        .next()
        .with_context(|| format!("{} resolves to no address", escape(&target.addr)))
}

/// Prints the events, one line each; `false` once stdout is closed.
fn print_all(events: &[WatchEvent], json: bool) -> anyhow::Result<bool> {
    for event in events {
        let line = if json {
            serde_json::to_string(event)?
        } else {
            event.render()
        };
        if !print(&line) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes one line to stdout and flushes it; `false` if stdout is closed (any write
/// error ends the watch: there is no one to tell).
fn print(line: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// Whether stdout is a pipe or socket whose reader has gone: poll reports an error
/// condition on it without writing anything.
fn stdout_closed() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
