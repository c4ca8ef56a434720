//! `misbehave`: a test fixture that breaks the plugin contract on purpose.
//!
//! The host's integration tests install this one component under several names and pick
//! the behaviour with the manifest's `resource` key (the lease's resource name):
//!
//! | resource       | `start`                                              | `cleanup`          |
//! |----------------|------------------------------------------------------|--------------------|
//! | `cooperative`  | ticks every 100 ms, returns on stop                  | logs               |
//! | `busy`         | spins without host calls, ignores stop               | logs               |
//! | `oom`          | allocates 1 MiB chunks until memory runs out         | logs               |
//! | `trap`         | panics (a trap)                                      | logs               |
//! | `error`        | returns `Err("deliberate error")`                    | logs               |
//! | `returns`      | returns `Ok` at once                                 | logs               |
//! | `cleanup-trap` | like `cooperative`                                   | panics             |
//! | `cleanup-hang` | like `cooperative`                                   | spins forever      |
//! | `noisy`        | writes to stdout and stderr, escapes included, then like `cooperative` | logs |
//! | `read-back…`   | saves a count, loads it back at once, every 20 ms; logs `stale read …` if the load returns anything else | logs |
//! | `tcp-hold…`    | connects to `TCP_TARGET` (`host:port`) and writes `token=T seq=N` lines on that one connection every 20 ms; logs `tcp connected to …`, `tcp connect failed: …` (then returns the error) or `tcp write failed: …` (then waits for the stop) | logs |
//! | `wait-stop`    | blocks in `wasi:io/poll` on `host.subscribe-stop` alone (no timer), then logs `stop pollable ready` and returns | logs |
//! | `save-huge`    | every 50 ms, calls `state.save` and `log` with 48 MiB; logs `save-huge refused: …` after each save | logs |
//! | anything else  | returns an error naming the behaviour                | logs               |
//!
//! Every `start` first logs `start behaviour={resource} token={token}`. Every `cleanup`
//! that returns logs exactly `cleanup reason={reason} fresh_instance={bool}`, the reason
//! spelled as in the WIT, and `fresh_instance` true when `start` never ran on this
//! instance: the tests read it to check on which instance the host ran `cleanup`.

wit_bindgen::generate!({
    world: "owned-task",
    path: "../../wit",
    // The world imports WASI interfaces too (0.2.0): bindings for them are generated
    // here; only what the plugin calls ends up imported.
    generate_all,
});

use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use tenure::plugin::host::{self, Level, Wake};

/// Set at the top of `start`: false in `cleanup` means it runs on a fresh instance.
static STARTED: AtomicBool = AtomicBool::new(false);

struct Misbehave;

impl Guest for Misbehave {
    fn start(lease: Lease) -> Result<(), String> {
        STARTED.store(true, Ordering::SeqCst);
        let resource = lease.resource.as_str();
        let token = lease.token;
        info(&format!("start behaviour={resource} token={token}"));
        match resource {
            "cooperative" | "cleanup-trap" | "cleanup-hang" => cooperative(token),
            "busy" => {
                info("spinning");
                spin()
            }
            "oom" => exhaust_memory(),
            "trap" => {
                info("about to trap");
                panic!("deliberate trap");
            }
            "error" => Err("deliberate error".into()),
            "returns" => {
                info("done");
                Ok(())
            }
            "noisy" => {
                write_noise();
                cooperative(token)
            }
            r if r.starts_with("read-back") => read_back(),
            r if r.starts_with("tcp-hold") => tcp_hold(token),
            "wait-stop" => {
                // No timer, no sleep: only the stop pollable can end this wait.
                host::subscribe_stop().block();
                info("stop pollable ready");
                Ok(())
            }
            "save-huge" => save_huge(),
            "save-big" => save_big(),
            other => Err(format!("misbehave: unknown behaviour {other}")),
        }
    }

    fn cleanup(reason: CleanupReason) {
        // On a fresh instance `start` never ran, so ask the host which resource this is.
        match host::lease().resource.as_str() {
            "cleanup-trap" => panic!("deliberate cleanup trap"),
            "cleanup-hang" => {
                spin();
            }
            _ => {
                let fresh = !STARTED.load(Ordering::SeqCst);
                info(&format!(
                    "cleanup reason={} fresh_instance={fresh}",
                    kebab(reason)
                ));
            }
        }
    }
}

/// The well-behaved loop: tick every 100 ms, return as soon as the host asks.
fn cooperative(token: u64) -> Result<(), String> {
    loop {
        info(&format!("tick token={token}"));
        if host::sleep(100) == Wake::StopRequested {
            return Ok(());
        }
    }
}

/// Saves a growing count and reads it straight back, to check that a node reads its own
/// writes: logs `read back n=N` every 25 counts, `stale read: saved N, loaded …` on a
/// mismatch. Returns when asked to stop, or with the save's error.
fn read_back() -> Result<(), String> {
    let mut n: u64 = 0;
    loop {
        n += 1;
        tenure::plugin::state::save(&n.to_le_bytes()).map_err(|e| format!("save: {e:?}"))?;
        let loaded = tenure::plugin::state::load().map_err(|e| format!("load: {e:?}"))?;
        if loaded.as_deref() != Some(&n.to_le_bytes()[..]) {
            host::log(
                Level::Warn,
                &format!("stale read: saved {n}, loaded {loaded:?}"),
            );
        } else if n.is_multiple_of(25) {
            info(&format!("read back n={n}"));
        }
        if host::sleep(20) == Wake::StopRequested {
            return Ok(());
        }
    }
}

/// Saves a 60 KiB blob (just under the 64 KiB limit) as often as the host lets it, so that
/// every node's Raft store grows by about a megabyte a second: a store on a small file
/// system fills up (`tests/store_failure.rs`). Returns when asked to stop, or with the
/// save's error.
fn save_big() -> Result<(), String> {
    let mut blob = vec![0u8; 60 << 10];
    let mut n: u64 = 0;
    loop {
        n += 1;
        blob[..8].copy_from_slice(&n.to_le_bytes());
        tenure::plugin::state::save(&blob).map_err(|e| format!("save: {e:?}"))?;
        if host::sleep(10) == Wake::StopRequested {
            return Ok(());
        }
    }
}

/// Hands the host 48 MiB as a state blob and as a log line, every 50 ms: a host that
/// copies before it checks the size (a blob's limit is 64 KiB; a log line is cut at
/// 4 KiB) takes 48 MiB of its own memory for each call.
fn save_huge() -> Result<(), String> {
    const HUGE: usize = 48 << 20;
    let blob = vec![0u8; HUGE];
    let line = std::str::from_utf8(&blob).map_err(|e| e.to_string())?;
    loop {
        let answer = tenure::plugin::state::save(black_box(&blob));
        host::log(Level::Debug, black_box(line));
        info(&format!("save-huge refused: {answer:?}"));
        if host::sleep(50) == Wake::StopRequested {
            return Ok(());
        }
    }
}

/// Holds one TCP connection to `TCP_TARGET` and writes a line on it every 20 ms, like a
/// singleton that keeps a database connection open.
fn tcp_hold(token: u64) -> Result<(), String> {
    let target = std::env::var("TCP_TARGET").map_err(|_| "TCP_TARGET is not set".to_string())?;
    let mut stream = match std::net::TcpStream::connect(target.as_str()) {
        Ok(stream) => stream,
        Err(e) => {
            host::log(Level::Warn, &format!("tcp connect failed: {e}"));
            return Err(format!("connecting to {target}: {e}"));
        }
    };
    info(&format!("tcp connected to {target}"));
    let mut seq: u64 = 0;
    loop {
        seq += 1;
        if let Err(e) = stream.write_all(format!("token={token} seq={seq}\n").as_bytes()) {
            host::log(Level::Warn, &format!("tcp write failed: {e}"));
            while host::sleep(100) != Wake::StopRequested {}
            return Ok(());
        }
        if host::sleep(20) == Wake::StopRequested {
            return Ok(());
        }
    }
}

/// Writes to stdout and stderr the way careless code does: a raw `print!`, an
/// `eprintln!`, and a line full of terminal escapes (a colour and a window title).
#[expect(
    clippy::print_with_newline,
    reason = "a raw write with its own newline is what the fixture exercises"
)]
fn write_noise() {
    print!("plain stdout line\n");
    eprintln!("stderr line");
    println!("\x1b[31mred\x1b[0m text\x1b]0;title\x07 end");
}

/// Burns CPU forever without calling the host, so only an interrupt can stop it.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates and fills 1 MiB chunks, keeping them all, until the allocator gives up.
fn exhaust_memory() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        chunks.push(black_box(vec![1u8; 1 << 20]));
        black_box(&chunks);
    }
}

/// The reason as the WIT spells it.
fn kebab(reason: CleanupReason) -> &'static str {
    match reason {
        CleanupReason::Moved => "moved",
        CleanupReason::LeaseLost => "lease-lost",
        CleanupReason::Shutdown => "shutdown",
        CleanupReason::PluginUpdated => "plugin-updated",
        CleanupReason::PluginRemoved => "plugin-removed",
        CleanupReason::Released => "released",
        CleanupReason::Failed => "failed",
    }
}

fn info(message: &str) {
    host::log(Level::Info, message);
}

export!(Misbehave);
