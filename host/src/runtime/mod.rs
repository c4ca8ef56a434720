//! The plugin runtime: the only module that touches wasmtime.
//!
//! One [`Runtime`] per node owns the wasmtime `Engine`, the `Linker` with Tenure's imports
//! and WASI, the on-disk compile cache, and a ticker thread that advances the engine's
//! epoch every [`EPOCH_TICK`]. A [`Plugin`] is one compiled version of a component with its
//! `InstancePre` (imports resolved and export types checked once). An [`Instance`] is one
//! store plus one instantiation of that plugin, built for one grant.
//!
//! Isolation, in the order a misbehaving plugin meets it:
//! - **Capabilities.** WASI 0.2 and wasi:http are linked (ordinary Rust builds import
//!   WASI; JavaScript builds import wasi:http) but grant nothing unless the manifest's
//!   `[capabilities]` says so ([`Granted`]): no preopened directories, no arguments, no
//!   UDP, no listening ever; environment variables from `env` and `secrets` (`env.rs`);
//!   outbound HTTP to the allowed hosts only (`http.rs`) and outbound TCP to the allowed
//!   endpoints only (`tcp.rs`), both fenced by the lease. Every effect asks
//!   [`InstanceContext::may_act`] first (`refused.rs` reports a refusal). stdout and stderr become host
//!   log lines.
//! - **Memory.** A per-instance cap over all linear memories. A refused growth is recorded,
//!   so an instance that then traps reports [`Failure::OutOfMemory`] with its peak.
//! - **Time.** Every store has an epoch deadline of one tick. At each tick a running plugin
//!   yields to the executor (so a busy loop cannot starve other plugins) and, once its
//!   [`Signals`] say interrupt, traps. Host calls are async and never block past a stop
//!   request: the host's `sleep` and every monotonic-clock timer (what async guests wait
//!   on in `wasi:io/poll`) end at a stop request and at the trap time (`clocks.rs`), so
//!   a guest waiting on timers returns or is interrupted within about one tick. A guest
//!   blocked on something else (a socket read in poll) is cut off by the supervisor's
//!   backstop, which drops the call.
//! - **Instances.** The pooling allocator pre-reserves slots for instances, memories and
//!   stacks, which makes instantiation cheap; if the machine refuses the reservation the
//!   runtime falls back to on-demand allocation and says so.
//!
//! What this module does not decide: when to start, stop, restart or clean up. That is
//! the supervisor's job; the runtime only reports how each call ended.

mod bindings;
mod cache;
mod clocks;
mod compiler;
mod core_instances;
mod env;
mod footprint;
mod guest_data;
pub mod http;
mod imports;
mod incremental;
mod instance;
mod lease;
pub mod output;
mod refused;
mod store;
mod tcp;
mod versions;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, EngineWeak};

pub use bindings::Version;
pub use bindings::v0_2::tenure::plugin::ownership::CleanupReason;
pub use cache::CacheUse;
pub use compiler::{
    CHILD_SUBCOMMAND, COMPILE_MEMORY, COMPILE_TIMEOUT, Incremental, Reuse,
    child_main as compile_child,
};
pub use footprint::{Footprint, mib};
pub use instance::{Failure, Instance};
pub use lease::{NodeLease, Refusal, Signals, nanos};
use store::HostState;

use crate::catalog::Secrets;
use crate::catalog::capabilities::{AllowedHost, Capabilities, Scheme};
use crate::cluster::Pool;
use crate::future::BoxFuture;
use crate::ownership::Grant;

/// How often the epoch advances: the granularity of yields and interrupts.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Errors building the runtime itself.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// wasmtime refused the engine configuration.
    #[error("cannot create the wasm engine: {0}")]
    Engine(String),
    /// Tenure's imports could not be linked (a bug in the host).
    #[error("cannot link the host imports: {0}")]
    Link(String),
    /// The compile cache directory could not be created.
    #[error("cannot create the compile cache at {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a wasm file cannot be used as a plugin. Every variant is the file's fault, not the
/// host's: the file is reported and skipped.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    /// A core module rather than a component.
    #[error(
        "a core wasm module, not a component: build it for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// The component did not validate or compile.
    #[error("invalid component: {0}")]
    Invalid(String),
    /// The compiler process failed: killed (out of memory, the time bound, a signal) or
    /// crashed. Usually the file's size or shape; the message quotes the process.
    #[error("cannot compile: {0}")]
    Compiler(String),
    /// The component imports something Tenure does not provide, or lacks the world's
    /// exports.
    #[error("does not fit the tenure:plugin/owned-task world (0.2.0, or 0.1.0): {0}")]
    WorldMismatch(String),
}

/// The backend behind the `state` import: durable, fenced by the grant's token.
pub trait StateBackend: Send + Sync + 'static {
    /// The resource's last saved blob.
    fn load(&self, grant: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>>;
    /// Replaces the resource's blob if `grant` is still the slot's current grant.
    fn save(&self, grant: &Grant, data: Vec<u8>) -> BoxFuture<Result<(), StateError>>;
}

/// Why a state call failed; mirrors the WIT `state.error`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The caller's token is no longer the slot's current grant.
    #[error("stale token: the slot was granted again")]
    StaleToken,
    /// The node's lease deadline has passed.
    #[error("the node's lease expired")]
    LeaseExpired,
    /// The blob exceeds [`MAX_STATE_BYTES`](crate::cluster::MAX_STATE_BYTES).
    #[error("state blob too large (limit {0} bytes)")]
    TooLarge(u32),
    /// The store failed; retrying may succeed.
    #[error("state store unavailable: {0}")]
    Unavailable(String),
}

/// Log lines (log calls plus stdout and stderr lines) one instance may write per second;
/// the rest are counted and reported, so a plugin logging in a loop cannot flood the
/// node's log or disk.
pub const PLUGIN_LOG_LINES_PER_SECOND: u32 = 200;

/// What a plugin's manifest grants its instances beyond the lease, state and log
/// (docs/design.md §3, "Plugins folder"). It holds secret values, so it has no `Debug`.
#[derive(Default)]
pub struct Granted {
    /// Where outbound requests may go; empty: nowhere.
    outbound: Vec<AllowedHost>,
    /// The instance's environment: the manifest's `env`, then its secrets.
    env: Vec<(String, String)>,
}

impl Granted {
    pub fn new(capabilities: &Capabilities, secrets: &Secrets) -> Self {
        let env = capabilities
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        Self {
            outbound: capabilities.allowed_outbound_hosts.clone(),
            env,
        }
    }

    /// Whether a connection to `scheme://host:port` is granted.
    pub fn allows(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        self.outbound
            .iter()
            .any(|entry| entry.matches(scheme, host, port))
    }

    /// Whether `host` is granted for HTTP (`http://`, `https://`) on some port but for
    /// TCP on none: a socket to it is refused with a hint to use wasi:http.
    pub fn http_only(&self, host: &str) -> bool {
        self.tcp_ports(host).is_empty()
            && self
                .outbound
                .iter()
                .any(|e| e.scheme != Scheme::Tcp && e.matches(e.scheme, host, e.port))
    }

    /// Whether any `tcp://` entry is granted (else the instance may not create a TCP
    /// socket at all).
    pub fn tcp(&self) -> bool {
        self.outbound.iter().any(|e| e.scheme == Scheme::Tcp)
    }

    /// The ports the `tcp://` entries matching `host` grant (empty: the name may not be
    /// looked up).
    pub fn tcp_ports(&self, host: &str) -> Vec<u16> {
        self.outbound
            .iter()
            .filter(|e| e.scheme == Scheme::Tcp && e.matches(Scheme::Tcp, host, e.port))
            .map(|e| e.port)
            .collect()
    }
}

/// Everything an instance's imports need: who it is, the grant it runs under, its
/// signals, what its manifest grants, its state backend and its log budget.
pub struct InstanceContext {
    /// The plugin's name (its file stem in the plugins folder).
    pub plugin: String,
    pub grant: Grant,
    pub signals: Signals,
    /// The node's lease: the one check for effects, and the deadline the engine
    /// enforces while `start` runs.
    pub lease: Arc<NodeLease>,
    pub state: Arc<dyn StateBackend>,
    /// Memory cap over all of the instance's linear memories, in bytes.
    pub memory_limit: usize,
    /// The manifest's capabilities (nothing, unless [`InstanceContext::with_granted`]).
    pub granted: Arc<Granted>,
    log_budget: std::sync::Mutex<crate::ratelimit::RateLimiter>,
}

impl InstanceContext {
    pub fn new(
        plugin: String,
        grant: Grant,
        lease: Arc<NodeLease>,
        state: Arc<dyn StateBackend>,
        memory_limit: usize,
    ) -> Self {
        Self {
            plugin,
            grant,
            signals: Signals::new(),
            lease,
            state,
            memory_limit,
            granted: Arc::default(),
            log_budget: std::sync::Mutex::new(crate::ratelimit::RateLimiter::new(
                PLUGIN_LOG_LINES_PER_SECOND,
                Duration::from_secs(1),
            )),
        }
    }

    /// A context for a fresh instance under the same grant (for a cleanup after a trap
    /// or interrupt): new signals, so the new instance is not being stopped.
    pub fn fresh(&self) -> Self {
        Self::new(
            self.plugin.clone(),
            self.grant.clone(),
            self.lease.clone(),
            self.state.clone(),
            self.memory_limit,
        )
        .with_granted(self.granted.clone())
    }

    /// The same context with the manifest's capabilities granted.
    pub fn with_granted(mut self, granted: Arc<Granted>) -> Self {
        self.granted = granted;
        self
    }

    /// Whether this instance may act on the world now: the one lease check that every
    /// effect (state saves, and every capability beside it) asks before acting.
    pub fn may_act(&self) -> Result<(), Refusal> {
        let now = lease::now();
        if self.signals.interrupted_at(now) {
            return Err(Refusal::Stopping);
        }
        self.lease.check(self.grant.session, now)
    }

    /// Whether a plugin log line may be written now: `Some(n)`, `n` lines having been
    /// held back since the last one written.
    fn admit_log_line(&self) -> Option<u64> {
        self.log_budget
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(Instant::now())
    }
}

/// The node's wasm engine, linker and compile cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<cache::CompileCache>,
    pooling: bool,
    /// Where cache misses compile: a child process (a node), or in process (`None`:
    /// `tenure plugin check`, tests, benchmarks).
    compiler: Option<compiler::Compiler>,
    /// The builds loaded plugins hold, by wasm digest: plugin files with the same wasm
    /// share one copy of its code, its checked imports and its footprint.
    builds: Mutex<HashMap<String, Weak<Build>>>,
    /// One lock per wasm digest being loaded: a second file with the same wasm waits
    /// for the first load and then shares its component, instead of compiling or
    /// deserializing again (ten thousand copies of one plugin compile once).
    loading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Compiles run in this process.
    compiles_here: AtomicUsize,
}

/// A compiled component checked against the world, with its footprint: what every
/// plugin loaded from the same wasm shares.
struct Build {
    component: Component,
    pre: instance::Pre,
    /// The `tenure:plugin` version the component was built for.
    version: Version,
    footprint: Footprint,
}

/// A compiled plugin version, ready to instantiate.
pub struct Plugin {
    /// Keeps the build in [`Runtime`]'s shared set while this version is loaded.
    build: Arc<Build>,
    engine: Engine,
    /// `sha256:<hex>` of the wasm bytes.
    pub digest: String,
    /// Whether the compiled code came from the cache.
    pub cache: CacheUse,
    /// What the incremental cache gave the compile (all zero if nothing was compiled in
    /// a compiler process, or without the cache).
    pub reuse: Reuse,
    /// How long compiling or loading took.
    pub load_time: Duration,
    /// What one instance needs at instantiation.
    pub footprint: Footprint,
}

impl Runtime {
    /// Builds the engine (pooling allocator, falling back to on-demand), links the
    /// imports, starts the epoch ticker, and uses `cache_dir` for compiled code (`None`:
    /// compile every time, as `tenure plugin check` does).
    pub fn new(cache_dir: Option<&Path>) -> Result<Self, RuntimeError> {
        Self::with_pool(cache_dir, &POOL)
    }

    /// [`Runtime::new`] with a pool of other totals than [`POOL`]: for tests that fill
    /// a pool to see where it refuses.
    pub fn with_pool(cache_dir: Option<&Path>, pool: &Pool) -> Result<Self, RuntimeError> {
        Self::build(cache_dir, pool, Codegen::Speed)
    }

    /// [`Runtime::new`] making machine code another way than the node does: for the
    /// benchmark that compares them (`benches/codegen.rs`). Compiles in this process.
    pub fn with_codegen(cache_dir: Option<&Path>, codegen: Codegen) -> Result<Self, RuntimeError> {
        Self::build(cache_dir, &POOL, codegen)
    }

    fn build(
        cache_dir: Option<&Path>,
        pool: &Pool,
        codegen: Codegen,
    ) -> Result<Self, RuntimeError> {
        let (engine, pooling) = match Engine::new(&sized_engine_config(Some(pool), codegen)) {
            Ok(engine) => (engine, true),
            Err(err) => {
                tracing::warn!(
                    event = crate::events::RUNTIME_ON_DEMAND,
                    error = %err,
                    "the pooling allocator is unavailable on this machine; using on-demand allocation (slower instantiation)"
                );
                let engine = Engine::new(&sized_engine_config(None, codegen))
                    .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
                (engine, false)
            }
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        tcp::add_to_linker(&mut linker).map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        clocks::add_to_linker(&mut linker).map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        link_served_versions(&mut linker).map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        guest_data::add_to_linker(&mut linker).map_err(|e| RuntimeError::Link(format!("{e:#}")))?;
        let cache = cache_dir
            .map(|dir| cache::CompileCache::open(dir, &engine))
            .transpose()?;
        spawn_epoch_ticker(engine.weak());
        Ok(Self {
            engine,
            linker,
            cache,
            pooling,
            compiler: None,
            builds: Mutex::default(),
            loading: Mutex::default(),
            compiles_here: AtomicUsize::new(0),
        })
    }

    /// Compiles cache misses in child processes of `exe` (this same binary, which must
    /// understand [`CHILD_SUBCOMMAND`]) instead of in this process, reusing the functions
    /// of earlier compiles kept in `incremental` (`incremental.rs`), if given. Needs a
    /// cache dir: the child hands its result over as a cache entry.
    pub fn compile_in_child(mut self, exe: PathBuf, incremental: Option<Incremental>) -> Self {
        if self.cache.is_some() {
            self.compiler = Some(compiler::Compiler::new(exe, incremental));
        }
        self
    }

    /// How many compiles ran in this process (not in child processes).
    pub fn compiles_here(&self) -> usize {
        self.compiles_here.load(Ordering::Relaxed)
    }

    /// Whether instances come from the pooling allocator.
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    /// Compiles `wasm` in this process (or loads it from the cache or the shared set)
    /// and checks it against the world. CPU-heavy on a cache miss, and the compile's
    /// memory stays with the process: for `tenure plugin check`, tests and benchmarks.
    pub fn load(&self, wasm: &[u8]) -> Result<Plugin, LoadError> {
        check_header(wasm)?;
        let started = Instant::now();
        let digest = cache::digest(wasm);
        if let Some(build) = self.shared(&digest) {
            return Ok(self.plugin(build, &digest, CacheUse::Shared, started));
        }
        let (component, cache) = match self.cached(&digest) {
            Some(found) => found,
            None => self.compile_here(&digest, wasm)?,
        };
        self.finish(&digest, wasm, component, cache, started)
    }

    /// The node's load: like [`Runtime::load`], but a cache miss compiles in a child
    /// process (if [`Runtime::compile_in_child`] was called) that the caller awaits, and
    /// the cache reads run on blocking threads, so no runtime worker waits on either.
    /// `plugin` names the plugin in the `plugin.compiling` event; `digest` is the
    /// SHA-256 of `wasm` in hex, as the catalog computed it when it read the bytes (a
    /// folder of 10,000 copies of one plugin is not hashed twice).
    pub async fn load_off_thread(
        self: Arc<Self>,
        plugin: &str,
        wasm: Arc<[u8]>,
        digest: &str,
    ) -> Result<Plugin, LoadError> {
        check_header(&wasm)?;
        let started = Instant::now();
        let digest = digest.to_owned();
        // One load per wasm digest at a time: a second file with the same wasm waits,
        // then finds the first one's component in the shared set (no second compile, no
        // second copy of the code).
        let lock = self
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest.clone())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        let loaded = self
            .clone()
            .load_alone(plugin, wasm, &digest, started)
            .await;
        drop(guard);
        let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        if loading
            .get(&digest)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            loading.remove(&digest);
        }
        loaded
    }

    /// [`Runtime::load_off_thread`] once no other load of `digest` runs.
    async fn load_alone(
        self: Arc<Self>,
        plugin: &str,
        wasm: Arc<[u8]>,
        digest: &str,
        started: Instant,
    ) -> Result<Plugin, LoadError> {
        let digest = digest.to_string();
        if let Some(build) = self.shared(&digest) {
            return Ok(self.plugin(build, &digest, CacheUse::Shared, started));
        }
        let found = {
            let (this, digest) = (self.clone(), digest.clone());
            blocking(move || this.cached(&digest)).await?
        };
        let mut reuse = Reuse::default();
        let (component, cache) = match found {
            Some(found) => found,
            None => {
                tracing::info!(
                    event = crate::events::PLUGIN_COMPILING,
                    plugin,
                    wasm_digest = %digest,
                    bytes = wasm.len(),
                    child = self.compiler.is_some(),
                    "compiling",
                );
                match (&self.compiler, &self.cache) {
                    (Some(compiler), Some(cache)) => {
                        let out = cache.path_of(&digest);
                        let (got, said) = compiler.compile(cache.raw_key(), &wasm, &out).await?;
                        if !said.is_empty() {
                            tracing::warn!(event = crate::events::CACHE_ERROR, plugin, error = %said, "the compiler process reported trouble with the incremental cache; it compiled without the unusable parts");
                        }
                        reuse = got;
                        let (this, digest) = (self.clone(), digest.clone());
                        let component = blocking(move || {
                            this.cache
                                .as_ref()
                                .and_then(|cache| cache.get(&this.engine, &digest))
                        })
                        .await?
                        .ok_or_else(|| {
                            LoadError::Compiler(format!(
                                "the compiler wrote no usable cache entry at {}",
                                out.display()
                            ))
                        })?;
                        (component, CacheUse::Miss)
                    }
                    _ => {
                        let (this, digest, wasm) = (self.clone(), digest.clone(), wasm.clone());
                        blocking(move || this.compile_here(&digest, &wasm)).await??
                    }
                }
            }
        };
        let this = self.clone();
        let mut plugin =
            blocking(move || this.finish(&digest, &wasm, component, cache, started)).await??;
        plugin.reuse = reuse;
        Ok(plugin)
    }

    /// The build a loaded plugin with the same wasm holds, if any: nothing to read,
    /// compile or check.
    fn shared(&self, digest: &str) -> Option<Arc<Build>> {
        self.builds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(digest)
            .and_then(Weak::upgrade)
    }

    /// The component for `digest` from the compile cache (reads a file).
    fn cached(&self, digest: &str) -> Option<(Component, CacheUse)> {
        let component = self.cache.as_ref()?.get(&self.engine, digest)?;
        Some((component, CacheUse::Hit))
    }

    /// Compiles in this process, storing the result in the cache if there is one.
    fn compile_here(&self, digest: &str, wasm: &[u8]) -> Result<(Component, CacheUse), LoadError> {
        self.compiles_here.fetch_add(1, Ordering::Relaxed);
        match &self.cache {
            Some(cache) => cache.get_or_compile(&self.engine, digest, wasm),
            None => Ok((compile(&self.engine, wasm)?, CacheUse::Off)),
        }
    }

    /// Checks `component` (compiled from `wasm`) against the world, takes its
    /// footprint, and records the build in the shared set.
    fn finish(
        &self,
        digest: &str,
        wasm: &[u8],
        component: Component,
        cache: CacheUse,
        started: Instant,
    ) -> Result<Plugin, LoadError> {
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::WorldMismatch(format!("{e:#}")))?;
        let version = Version::of(
            component
                .component_type()
                .imports(&self.engine)
                .map(|(name, _)| name),
        );
        let pre = instance::Pre::new(version, pre)
            .map_err(|e| LoadError::WorldMismatch(format!("{e:#}")))?;
        let footprint = Footprint::of(&component, wasm)?;
        let build = Arc::new(Build {
            component,
            pre,
            version,
            footprint,
        });
        {
            let mut shared = self.builds.lock().unwrap_or_else(|e| e.into_inner());
            shared.retain(|_, b| b.strong_count() > 0);
            shared.insert(digest.to_string(), Arc::downgrade(&build));
        }
        Ok(self.plugin(build, digest, cache, started))
    }

    fn plugin(&self, build: Arc<Build>, digest: &str, cache: CacheUse, started: Instant) -> Plugin {
        Plugin {
            footprint: build.footprint,
            build,
            engine: self.engine.clone(),
            digest: format!("sha256:{digest}"),
            cache,
            reuse: Reuse::default(),
            load_time: started.elapsed(),
        }
    }
}

/// Tenure's own interfaces, in every served version: 0.1.0's world as generated (it
/// imports nothing else), 0.2.0's interface by interface (its world also imports WASI,
/// which wasmtime-wasi links).
fn link_served_versions(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use bindings::v0_2::tenure::plugin as v0_2;
    bindings::v0_1::OwnedTask::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    v0_2::ownership::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    v0_2::host::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    v0_2::state::add_to_linker::<_, HasSelf<_>>(linker, |state| state)?;
    Ok(())
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, LoadError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LoadError::Compiler(format!("the loading thread failed: {e}")))
}

impl Plugin {
    /// A fresh instance for `ctx`: a new store with its limits, then instantiation.
    pub async fn instantiate(&self, ctx: Arc<InstanceContext>) -> Result<Instance, Failure> {
        Instance::new(&self.engine, &self.build.pre, ctx).await
    }

    /// The `tenure:plugin` version the component was built for.
    pub fn version(&self) -> Version {
        self.build.version
    }

    /// The names of the interfaces the component imports.
    pub fn imports(&self) -> Vec<String> {
        self.build
            .component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect()
    }
}

/// Plugin instances one node can run at once (running plugins plus cleanups in
/// progress), if each takes at most four core instances, one memory and four tables. A
/// start beyond the pool fails and is retried like any failed start. The bound under it
/// is the kernel's: each live instance of a small Rust plugin maps about 12 regions, and
/// Linux allows 65,530 per process by default (`vm.max_map_count`); 5,400 instances
/// failed with ENOMEM on this project's machine (BENCHMARKS.md).
pub const MAX_INSTANCES: u32 = 4_000;

/// The node's instance pool, per dimension: what the pooling allocator reserves, and
/// what placement divides among a node's plugins by their footprints (nine tenths of it,
/// `placement::CAPACITY`). A small Rust component takes one memory and three core
/// instances, a Python one 14 core instances, so the core instances, not the instances,
/// bound a node of Python plugins. The reservation is virtual address space, not RAM
/// (about 4 GiB per memory slot: 16 TiB of the 128 TiB a process may map).
///
/// With on-demand allocation (no pool) nothing reserves these, but placement counts the
/// same totals: they are sized under the kernel's map count, which on-demand instances
/// meet sooner (their memories and core instances map regions of their own as they are
/// made), so the same bound keeps those nodes under it too.
pub const POOL: Pool = Pool {
    instances: MAX_INSTANCES,
    core_instances: 4 * MAX_INSTANCES,
    memories: MAX_INSTANCES,
    tables: 4 * MAX_INSTANCES,
};

/// How the engine makes machine code. The node always uses [`Codegen::Speed`]; the
/// others exist for `benches/codegen.rs`, which measures what each costs to compile and
/// to run (BENCHMARKS.md, "Choosing the compile strategy", says why the node stays at
/// `Speed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codegen {
    /// Cranelift, `OptLevel::Speed`.
    Speed,
    /// Cranelift, `OptLevel::None`: no optimization passes.
    Unoptimized,
    /// Winch, wasmtime's single-pass baseline compiler (x86_64 and aarch64; only in a
    /// build with the `winch` feature).
    #[cfg(feature = "winch")]
    Winch,
}

/// The engine's configuration: pooling allocation sized to [`POOL`], or on demand.
fn engine_config(pooling: bool) -> wasmtime::Config {
    sized_engine_config(pooling.then_some(&POOL), Codegen::Speed)
}

/// The engine's configuration: pooling allocation sized to `pool`, or on demand.
fn sized_engine_config(pool: Option<&Pool>, codegen: Codegen) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    match codegen {
        Codegen::Speed => {
            config.cranelift_opt_level(wasmtime::OptLevel::Speed);
        }
        Codegen::Unoptimized => {
            config.cranelift_opt_level(wasmtime::OptLevel::None);
        }
        #[cfg(feature = "winch")]
        Codegen::Winch => {
            config.strategy(wasmtime::Strategy::Winch);
        }
    }
    if let Some(totals) = pool {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        // Every plugin instance runs its calls on one fiber stack of its own.
        pool.total_component_instances(totals.instances)
            .total_core_instances(totals.core_instances)
            .total_memories(totals.memories)
            .total_tables(totals.tables)
            .total_stacks(totals.instances)
            .max_memory_size(4 << 30);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

fn check_header(wasm: &[u8]) -> Result<(), LoadError> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err(LoadError::NotWasm);
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if wasm[6..8] == [0, 0] {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

fn compile(engine: &Engine, wasm: &[u8]) -> Result<Component, LoadError> {
    Component::new(engine, wasm).map_err(|e| LoadError::Invalid(format!("{e:#}")))
}

/// Advances the epoch every tick for as long as the engine lives.
fn spawn_epoch_ticker(engine: EngineWeak) {
    std::thread::Builder::new()
        .name("tenure-epoch".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch ticker thread");
}

#[cfg(test)]
mod stalled;
#[cfg(test)]
mod tests;
