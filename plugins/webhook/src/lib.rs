//! `webhook`: an owned task that acts on the world, fenced end to end.
//!
//! Every `INTERVAL_MS` (default 1000) it POSTs the lease it holds as JSON,
//! `{"resource", "slot", "node", "token", "seq"}`, to `TARGET_URL` through `wasi:http`.
//! Both come from its environment, which the host builds from the manifest's
//! `[capabilities]` (`env` and `secrets`); the target's host must be listed in
//! `allowed_outbound_hosts`, or the host refuses the request.
//!
//! The host adds `tenure-token`, `tenure-resource`, `tenure-slot` and `tenure-node`
//! headers to every request, so the service behind `TARGET_URL` can keep the highest token
//! it has seen for the resource and refuse lower ones: a stale owner is then refused even
//! if its request was already on the wire when it lost the lease. The body carries the
//! token too, for services that log it.
//!
//! If `API_TOKEN` is set (typically from a manifest `secrets` entry, so the token lives in a
//! file beside the plugin and never in the manifest), it is sent as
//! `authorization: Bearer <API_TOKEN>`.
//!
//! A failed post (refused by the host, connection refused, a timeout) is logged and the
//! loop carries on; the plugin stops cooperatively when `sleep` says so.
//!
//! ```toml
//! # plugins/webhook.toml
//! [capabilities]
//! allowed_outbound_hosts = ["http://127.0.0.1:8080"]
//! env = { TARGET_URL = "http://127.0.0.1:8080/hook", INTERVAL_MS = "1000" }
//! secrets = { API_TOKEN = "secrets/webhook-token" }   # optional
//! ```

wit_bindgen::generate!({
    world: "owned-task",
    path: "../../wit",
    // The world imports WASI interfaces too (0.2.0): bindings for them are generated
    // here; only what the plugin calls ends up imported.
    generate_all,
});

use tenure::plugin::host::{self, Level, Wake};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

/// The interval when `INTERVAL_MS` is not set.
const DEFAULT_INTERVAL_MS: u64 = 1000;

struct Webhook;

impl Guest for Webhook {
    fn start(lease: Lease) -> Result<(), String> {
        let target = std::env::var("TARGET_URL")
            .map_err(|_| "TARGET_URL is not set (grant it in [capabilities] env)".to_string())?;
        let target = Target::parse(&target)?;
        let interval = match std::env::var("INTERVAL_MS") {
            Ok(text) => text
                .parse()
                .map_err(|_| format!("INTERVAL_MS={text:?} is not a number of milliseconds"))?,
            Err(_) => DEFAULT_INTERVAL_MS,
        };
        let api_token = std::env::var("API_TOKEN").ok();
        let mut seq: u64 = 0;
        loop {
            seq += 1;
            let body = format!(
                r#"{{"resource":{},"slot":{},"node":{},"token":{},"seq":{seq}}}"#,
                json_string(&lease.resource),
                lease.slot,
                json_string(&lease.node),
                lease.token,
            );
            match post(&target, api_token.as_deref(), body.as_bytes()) {
                Ok(status) => host::log(Level::Info, &format!("posted seq={seq} status={status}")),
                Err(error) => host::log(Level::Warn, &format!("post seq={seq} failed: {error}")),
            }
            if host::sleep(interval) == Wake::StopRequested {
                return Ok(());
            }
        }
    }

    fn cleanup(reason: CleanupReason) {
        host::log(Level::Info, &format!("cleanup reason={reason:?}"));
    }
}

export!(Webhook);

/// `TARGET_URL` split into what `wasi:http` asks for.
struct Target {
    scheme: Scheme,
    authority: String,
    path_with_query: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("TARGET_URL {url:?} has no scheme"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => return Err(format!("TARGET_URL scheme {other:?} is not http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("TARGET_URL {url:?} has no host"));
        }
        Ok(Self {
            scheme,
            authority: authority.to_string(),
            path_with_query: path.to_string(),
        })
    }
}

/// POSTs `body` as JSON to `target`; the response status, or why there is none.
fn post(target: &Target, api_token: Option<&str>, body: &[u8]) -> Result<u16, String> {
    let mut fields = vec![
        ("content-type".to_string(), b"application/json".to_vec()),
        (
            "content-length".to_string(),
            body.len().to_string().into_bytes(),
        ),
    ];
    if let Some(token) = api_token {
        fields.push((
            "authorization".to_string(),
            format!("Bearer {token}").into_bytes(),
        ));
    }
    // The error names a header, never its value: the token must not reach a log line.
    let headers = Fields::from_list(&fields).map_err(|e| format!("headers: {e:?}"))?;
    let request = OutgoingRequest::new(headers);
    let refused = |what: &str| format!("the request's {what} was refused");
    request
        .set_method(&Method::Post)
        .map_err(|()| refused("method"))?;
    request
        .set_scheme(Some(&target.scheme))
        .map_err(|()| refused("scheme"))?;
    request
        .set_authority(Some(&target.authority))
        .map_err(|()| refused("authority"))?;
    request
        .set_path_with_query(Some(&target.path_with_query))
        .map_err(|()| refused("path"))?;
    let outgoing = request.body().map_err(|()| refused("body"))?;
    let response = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    // A request the host refuses fails on the response, and its body stream is closed at
    // once: report the response's error, which says why, before a write error.
    let written = write_body(outgoing, body);
    response.subscribe().block();
    let response = response
        .get()
        .ok_or("no response after waiting for it")?
        .map_err(|()| "the response was already taken")?
        .map_err(|e| format!("{e:?}"))?;
    written?;
    Ok(response.status())
}

/// Writes the whole body and finishes it.
fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let stream = outgoing
            .write()
            .map_err(|()| "the body stream was refused".to_string())?;
        // One write: the body is far below the 4096 bytes a blocking write may carry.
        stream
            .blocking_write_and_flush(body)
            .map_err(|e| format!("writing the body: {e:?}"))?;
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("finishing the body: {e:?}"))
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
