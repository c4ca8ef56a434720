//! A real HTTP/1.1 server for the effects tests: it records every request (method, path,
//! headers, body, arrival time) and answers `200 OK`.
//!
//! Deliberately small: one thread accepts, one thread per connection, keep-alive honoured,
//! bodies read by `content-length` or chunked encoding. It is what a plugin's downstream
//! looks like from the outside, with nothing borrowed from the host's HTTP stack.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names in lower case; a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// When the whole request had arrived.
    pub at: SystemTime,
    /// When its connection was accepted: a request whose connection was open before its
    /// node was cut off was on the wire then (see `checker::downstream`).
    pub connected: SystemTime,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    changed: Condvar,
}

/// A recording server (on 127.0.0.1 unless given a listener), on a port of its own; it
/// runs until the test ends.
pub struct Recorder {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Recorder {
    pub fn start() -> Recorder {
        Recorder::on(TcpListener::bind("127.0.0.1:0").expect("binding the recorder"))
    }

    /// A recording server on a listener of the caller's (another address, another
    /// network namespace).
    pub fn on(listener: TcpListener) -> Recorder {
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accept = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let connected = SystemTime::now();
                let shared = accept.clone();
                thread::spawn(move || serve(stream, connected, &shared));
            }
        });
        Recorder { addr, shared }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://ADDRESS:PORT`
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived; panics after `timeout`.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut requests = self.shared.requests.lock().unwrap();
        while requests.len() < n {
            let now = Instant::now();
            assert!(
                now < deadline,
                "the recorder got {} requests, not {n}, within {timeout:?}",
                requests.len()
            );
            requests = self
                .shared
                .changed
                .wait_timeout(requests, deadline - now)
                .unwrap()
                .0;
        }
        requests.clone()
    }
}

fn serve(stream: TcpStream, connected: SystemTime, shared: &Shared) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader, connected) {
        let close = request
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        shared.requests.lock().unwrap().push(request);
        shared.changed.notify_all();
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok";
        if writer.write_all(reply.as_bytes()).is_err() || close {
            return;
        }
    }
}

fn read_request(reader: &mut impl BufRead, connected: SystemTime) -> Option<Recorded> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let mut body = Vec::new();
    if let Some(length) = headers.get("content-length") {
        body.resize(length.parse().ok()?, 0);
        reader.read_exact(&mut body).ok()?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    Some(Recorded {
        method,
        path,
        headers,
        body,
        at: SystemTime::now(),
        connected,
    })
}

/// A real TCP server for the effects tests: it records every line each connection sends
/// (with its arrival time) and when each connection reached EOF.
pub struct LineServer {
    addr: SocketAddr,
    shared: Arc<LineShared>,
}

/// One connection as the line server saw it.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub lines: Vec<(Instant, String)>,
    /// When the peer shut its side (a read returned 0) or the connection failed.
    pub ended: Option<Instant>,
}

#[derive(Default)]
struct LineShared {
    connections: Mutex<Vec<Connection>>,
    changed: Condvar,
}

impl LineServer {
    pub fn start() -> LineServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the line server");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(LineShared::default());
        let accept = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = accept.clone();
                let index = {
                    let mut connections = shared.connections.lock().unwrap();
                    connections.push(Connection::default());
                    connections.len() - 1
                };
                shared.changed.notify_all();
                thread::spawn(move || read_lines(stream, index, &shared));
            }
        });
        LineServer { addr, shared }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn connections(&self) -> Vec<Connection> {
        self.shared.connections.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the connections; panics after `timeout`.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Connection]) -> bool,
    ) -> Vec<Connection> {
        let deadline = Instant::now() + timeout;
        let mut connections = self.shared.connections.lock().unwrap();
        while !done(&connections) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}: {connections:?}"
            );
            connections = self
                .shared
                .changed
                .wait_timeout(connections, left)
                .unwrap()
                .0;
        }
        connections.clone()
    }
}

fn read_lines(stream: TcpStream, index: usize, shared: &LineShared) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        let now = Instant::now();
        let mut connections = shared.connections.lock().unwrap();
        let connection = &mut connections[index];
        match read {
            Ok(0) | Err(_) => {
                connection.ended = Some(now);
                drop(connections);
                shared.changed.notify_all();
                return;
            }
            Ok(_) => connection.lines.push((now, line.trim_end().to_string())),
        }
        drop(connections);
        shared.changed.notify_all();
    }
}
