//! Compiling in a short-lived child process, so that a compile's memory leaves with it.
//!
//! Cranelift's working memory for a large component (an 18 MB Python component peaks
//! near 400 MiB) is freed to the allocator when the compile ends, but not given back to
//! the system: a node that compiled one Python plugin in process stayed at ~370 MiB
//! resident for good. So a node compiles in a child: the same binary, run as
//! `tenure __compile OUT`. The child reads the node's cache key (32 bytes) and then the
//! wasm from its stdin (never its arguments, which other users can read in /proc),
//! compiles with the node's engine settings, writes the authenticated cache entry at
//! `OUT` atomically, and exits. The node then loads the entry like any cache hit
//! (deserialize, which maps the code), so what stays in the node is the code alone.
//!
//! The child is bounded: its address space (`RLIMIT_AS`, [`COMPILE_MEMORY`]) and CPU
//! time (`RLIMIT_CPU`) are limited by the child itself before it reads a byte, and the
//! node kills it after [`COMPILE_TIMEOUT`]. Compiles run side by side up to the number of
//! cores (each child is itself multi-threaded; more would only share the same cores),
//! in two lanes: wasm up to [`SMALL_WASM`] bytes (a Rust plugin, about 50 KB, compiles
//! in half a second) and larger wasm (a Python or JavaScript component carries its
//! interpreter, 12–18 MB, and compiles for half a minute) take slots of separate pools,
//! so a small plugin never waits for a slot behind large ones. The two lanes together
//! may run twice as many children as cores for the second or so a small compile takes.
//! Dropping a compile (a shutdown, or a newer version of the file) kills the child
//! (`kill_on_drop`) and removes its temporary file, so no entry is ever half-written.
//!
//! A node that is killed outright (SIGKILL, the OOM killer) runs no drop: its child
//! would compile on alone, for minutes of CPU and up to 4 GiB, for nobody. So the child
//! asks the kernel first thing to SIGKILL it when its parent dies (Linux
//! `PR_SET_PDEATHSIG`), then checks that its parent is still the node whose pid it was
//! handed ([`PARENT_ENV`]): a node that died between the spawn and that request has
//! already left the child to init, and the signal would never come. The kernel sends the
//! signal when the *thread* that spawned the child ends, not the process: compiles are
//! spawned from async tasks, on the worker threads of the node's plugin runtime
//! (`node::PluginThreads`), which live as long as the node (never spawn one from a
//! blocking-pool thread, which ends when idle). The child inherits those threads' lower
//! priority (`crate::priority`): a compile yields the cores to the node's control plane.
//!
//! With an incremental cache (`--incremental DIR --incremental-cap BYTES`, from the
//! node's `[compile] incremental_cache_mib`), the child reads the cache's packs into its
//! memory (inside its limits) and compiles only the functions not found there
//! (`incremental.rs`); it writes its new pack and evicts beyond the cap after the entry,
//! then prints `incremental HITS MISSES BYTES REPEATS` on its stdout. Children side by side each
//! write a pack of their own under a fresh name (a temporary file renamed), so they never
//! write the same file. Trouble with the incremental cache never fails a compile: the
//! child compiles without the unusable part and says so on stderr, which the node logs.
//!
//! Exit codes: 0, the entry is written; [`INVALID`], the wasm is not a valid component
//! (stderr says why); anything else, or a signal, is a failed compile, reported with the
//! child's stderr.
//!
//! The child's engine is `engine_config(false)`: the same compiler settings as the
//! node's, without the pooling allocator's address-space reservation (which the child's
//! memory limit would refuse, and which compiled code does not depend on; a test checks
//! that an entry compiled so loads into a pooling engine).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use wasmtime::Engine;

use super::incremental::IncrementalCache;
use super::{LoadError, cache, compile, engine_config};

/// The hidden subcommand that runs a compile: `tenure __compile OUT`.
pub const CHILD_SUBCOMMAND: &str = "__compile";
/// The environment variable that hands the child its node's pid.
const PARENT_ENV: &str = "TENURE_COMPILE_PARENT";
/// The child's address-space limit. A Python component's compile peaks near 400 MiB
/// resident; the rest is room for thread stacks and allocator arenas.
pub const COMPILE_MEMORY: u64 = 4 << 30;
/// How long the node lets one compile run before killing it (a cold Python compile takes
/// about 4 s alone on this project's two-core machine, much more beside other compiles).
pub const COMPILE_TIMEOUT: Duration = Duration::from_secs(300);
/// The child's own CPU-time limit: the backstop if the node dies without killing it.
const COMPILE_CPU_SECONDS: u64 = 600;
/// The child's exit code for a file that is not a valid component.
const INVALID: i32 = 2;
/// How much of the child's stderr a load error quotes.
const STDERR_KEPT: usize = 4096;

/// Runs compiles in child processes of `exe`, at most one per core at a time.
pub(super) struct Compiler {
    exe: PathBuf,
    /// The incremental cache the children use, if any.
    incremental: Option<Incremental>,
    /// Compile slots for wasm up to [`SMALL_WASM`] bytes.
    small: Semaphore,
    /// Compile slots for larger wasm.
    large: Semaphore,
}

/// The largest wasm that compiles in the small lane (see the module doc).
pub const SMALL_WASM: usize = 1 << 20;

/// Where the compiler processes keep the incremental cache (`incremental.rs`), and its cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incremental {
    pub dir: PathBuf,
    /// All packs together, in bytes.
    pub cap: u64,
}

/// What a compile's incremental cache reported (all zero without one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Functions taken from the cache (compiled by earlier compiles).
    pub hits: u64,
    /// Functions identical to one compiled earlier in the same compile, taken from it.
    pub repeats: u64,
    /// Functions compiled.
    pub misses: u64,
    /// Bytes the cache takes after the compile.
    pub bytes: u64,
}

/// The line the child writes on its stdout after a compile with the incremental cache.
const REUSE_LINE: &str = "incremental";

impl Compiler {
    pub(super) fn new(exe: PathBuf, incremental: Option<Incremental>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            exe,
            incremental,
            small: Semaphore::new(cores),
            large: Semaphore::new(cores),
        }
    }

    /// Compiles `wasm` in a child process, which writes the cache entry at `out`
    /// authenticated with `key`. Waits for a free slot of its lane first. Cancel-safe: dropped, it
    /// kills the child and removes its temporary file. Returns what the incremental cache
    /// gave, and what the child reported on stderr though it succeeded (packs of the
    /// incremental cache it found unusable and deleted).
    pub(super) async fn compile(
        &self,
        key: &[u8; 32],
        wasm: &[u8],
        out: &Path,
    ) -> Result<(Reuse, String), LoadError> {
        let lane = if wasm.len() <= SMALL_WASM {
            &self.small
        } else {
            &self.large
        };
        let _slot = lane.acquire().await.expect("the semaphore is never closed");
        // Declared before the child, so dropped after it: the child is killed first.
        let mut sweep = TempSweep {
            out: out.to_path_buf(),
            pid: None,
        };
        let mut command = tokio::process::Command::new(&self.exe);
        command.arg(CHILD_SUBCOMMAND).arg(out);
        if let Some(incremental) = &self.incremental {
            command
                .arg("--incremental")
                .arg(&incremental.dir)
                .arg("--incremental-cap")
                .arg(incremental.cap.to_string());
        }
        let mut child = command
            .env_clear()
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| LoadError::Compiler(spawn_failure(&self.exe, &e)))?;
        sweep.pid = child.id();
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let feed = async move {
            // A child that exits early closes the pipe; its status says why.
            let _ = stdin.write_all(key).await;
            let _ = stdin.write_all(wasm).await;
        };
        let said = async {
            let mut kept = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            String::from_utf8_lossy(&kept).trim().to_string()
        };
        let told = async {
            let mut kept = Vec::new();
            let _ = (&mut stdout)
                .take(STDERR_KEPT as u64)
                .read_to_end(&mut kept)
                .await;
            parse_reuse(&String::from_utf8_lossy(&kept))
        };
        let run = async {
            let ((), said, reuse, status) = tokio::join!(feed, said, told, child.wait());
            (said, reuse, status)
        };
        let (said, reuse, status) =
            tokio::time::timeout(COMPILE_TIMEOUT, run)
                .await
                .map_err(|_| {
                    LoadError::Compiler(format!(
                        "the compile took longer than {}; killed",
                        humantime::format_duration(COMPILE_TIMEOUT)
                    ))
                })?;
        let status = status
            .map_err(|e| LoadError::Compiler(format!("cannot wait for the compiler: {e}")))?;
        if status.success() {
            return Ok((reuse, said));
        }
        if status.code() == Some(INVALID) {
            return Err(LoadError::Invalid(said));
        }
        let hint = if said.contains("memory allocation") {
            format!(" (a compile may use at most {} GiB)", COMPILE_MEMORY >> 30)
        } else {
            String::new()
        };
        Err(LoadError::Compiler(format!(
            "the compiler process failed ({status}){hint}: {}",
            if said.is_empty() { "no output" } else { &said }
        )))
    }
}

/// Removes the temporary file a killed child leaves beside `out`.
struct TempSweep {
    out: PathBuf,
    pid: Option<u32>,
}

impl Drop for TempSweep {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            crate::private_files::remove_temps_of(&self.out, pid);
        }
    }
}

/// The child's side, `tenure __compile OUT [--incremental DIR --incremental-cap BYTES]`:
/// reads the key and the wasm from stdin, compiles (with the incremental cache in DIR, if
/// given), writes the entry. Returns the process's exit code.
pub fn child_main(out: &Path, incremental: Option<Incremental>) -> i32 {
    if let Err(why) = die_with_parent() {
        eprintln!("{why}");
        return 1;
    }
    if let Err(why) = limit(libc::RLIMIT_AS, COMPILE_MEMORY)
        .and_then(|()| limit(libc::RLIMIT_CPU, COMPILE_CPU_SECONDS))
    {
        eprintln!("cannot limit the compiler process: {why}");
        return 1;
    }
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("cannot read the key and wasm from stdin: {e}");
        return 1;
    }
    let Some((key, wasm)) = input.split_first_chunk::<32>() else {
        eprintln!("stdin holds no cache key: this subcommand is run by the node only");
        return 1;
    };
    let mut config = engine_config(false);
    // Any failure of the incremental cache leaves the compile to compile everything.
    let store = incremental.and_then(|incremental| {
        match IncrementalCache::open(&incremental.dir, key, incremental.cap) {
            Ok(store) => Some(Arc::new(store)),
            Err(e) => {
                eprintln!(
                    "cannot read the incremental cache {}: {e}; compiling without it",
                    incremental.dir.display()
                );
                None
            }
        }
    });
    if let Some(store) = &store
        && let Err(e) = config.enable_incremental_compilation(store.clone())
    {
        eprintln!("cannot enable the incremental cache: {e:#}");
        return 1;
    }
    let engine = match Engine::new(&config) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("cannot create the wasm engine: {e:#}");
            return 1;
        }
    };
    let component = match compile(&engine, wasm) {
        Ok(component) => component,
        Err(LoadError::Invalid(why)) => {
            eprintln!("{why}");
            return INVALID;
        }
        Err(other) => {
            eprintln!("{other}");
            return 1;
        }
    };
    if let Err(e) = cache::store(key, out, &component) {
        eprintln!("cannot write the cache entry {}: {e:#}", out.display());
        return 1;
    }
    if let Some(store) = store {
        drop(engine);
        match store.finish() {
            Ok(outcome) => {
                for (path, why) in &outcome.discarded {
                    eprintln!(
                        "discarded an unusable incremental cache pack {}: {why}",
                        path.display()
                    );
                }
                println!(
                    "{REUSE_LINE} {} {} {} {}",
                    outcome.hits, outcome.misses, outcome.bytes, outcome.repeats
                );
            }
            // The entry is written: the plugin runs; only later compiles miss this one's
            // functions.
            Err(e) => eprintln!("cannot write the incremental cache: {e}"),
        }
    }
    0
}

/// The child's [`REUSE_LINE`], if it wrote one.
fn parse_reuse(stdout: &str) -> Reuse {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(REUSE_LINE))
        .unwrap_or_default();
    let mut numbers = line.split_whitespace().map(|n| n.parse().unwrap_or(0));
    let mut next = || numbers.next().unwrap_or(0);
    Reuse {
        hits: next(),
        misses: next(),
        bytes: next(),
        repeats: next(),
    }
}

/// Asks the kernel to SIGKILL this process when the node that started it dies, and
/// checks that it has not died already.
fn die_with_parent() -> Result<(), String> {
    let node: libc::pid_t = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| {
            format!("{PARENT_ENV} holds no pid: this subcommand is run by the node only")
        })?;
    // SAFETY: PR_SET_PDEATHSIG reads one unsigned long, the signal, and changes only
    // this process's death signal. (Passed as a c_ulong: the kernel reads a whole
    // register, and an int's upper half is unspecified in a variadic call.)
    let signal = libc::SIGKILL as libc::c_ulong;
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal) } != 0 {
        return Err(format!(
            "cannot ask to die with the node: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    if parent != node {
        return Err(format!(
            "the node (pid {node}) that started this compile is gone (parent now {parent})"
        ));
    }
    Ok(())
}

/// Sets both the soft and hard limit of `resource` to `value`.
fn limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: setrlimit reads the struct we pass and changes only this process's limits.
    if unsafe { libc::setrlimit(resource, &limit) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Why the compiler process `exe` could not be started, naming what is missing. The
/// kernel answers ENOENT alike for a missing program, a missing ELF interpreter of a
/// program that is there, and `/proc/self/exe` (how the node names its own binary) when
/// no /proc is mounted, as in a bare chroot: the path alone would blame the wrong file.
fn spawn_failure(exe: &Path, error: &std::io::Error) -> String {
    let exe_s = exe.display();
    if error.kind() != std::io::ErrorKind::NotFound {
        return format!("cannot start the compiler process {exe_s}: {error}");
    }
    if exe.starts_with("/proc") && !Path::new("/proc/self").exists() {
        return format!(
            "cannot start the compiler process: /proc is not mounted (the node runs its \
             compiler as {exe_s}, its own binary); mount /proc where the node runs, as \
             container runtimes do"
        );
    }
    if std::fs::symlink_metadata(exe).is_err() {
        return format!("cannot start the compiler process: {exe_s} does not exist");
    }
    format!(
        "cannot start the compiler process {exe_s}: {error}; the file is there, so what \
         it needs to start is missing (its ELF interpreter or a script's interpreter)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each ENOENT names what is missing: the program, or what the program needs.
    #[tokio::test]
    async fn a_compiler_that_cannot_start_is_told_apart_by_what_is_missing() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("entry");
        let missing = dir.path().join("no-such-tenure");
        let script = dir.path().join("tenure-script");
        std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (exe, says) in [
            (
                missing.clone(),
                format!(
                    "cannot start the compiler process: {} does not exist",
                    missing.display()
                ),
            ),
            (
                script.clone(),
                format!(
                    "cannot start the compiler process {}: No such file or directory (os \
                     error 2); the file is there, so what it needs to start is missing (its \
                     ELF interpreter or a script's interpreter)",
                    script.display()
                ),
            ),
        ] {
            let compiler = Compiler::new(exe, None);
            match compiler.compile(&[0; 32], b"\0asm", &out).await {
                Err(LoadError::Compiler(message)) => assert_eq!(message, says),
                other => panic!("{other:?}"),
            }
        }
    }

    /// The child compiles with `engine_config(false)`; the node deserializes with the
    /// pooling engine. The entry must load there, or every cache miss would fail.
    #[test]
    fn an_entry_compiled_without_pooling_loads_into_the_pooling_engine() {
        let mut with_module = wasm_encoder::Component::new();
        with_module.section(&wasm_encoder::ModuleSection(&wasm_encoder::Module::new()));
        let wasm = with_module.finish();
        let child = Engine::new(&engine_config(false)).unwrap();
        let node = Engine::new(&engine_config(true)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = cache::CompileCache::open(&dir.path().join("cache"), &node).unwrap();
        let digest = cache::digest(&wasm);
        let out = cache.path_of(&digest);
        let component = compile(&child, &wasm).unwrap();
        cache::store(cache.raw_key(), &out, &component).unwrap();
        assert!(
            cache.get(&node, &digest).is_some(),
            "the pooling engine refused the child's entry"
        );
    }
}
