//! The command line: parsing, logging set-up, and the commands' top-level code.
//!
//! Every command's work is in the library; this module only connects arguments to it and
//! turns errors into messages and exit codes.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

mod admin;
mod logging;
mod member;
mod own_drain;
mod plugin_test;
mod snapshot;
mod watch;

pub use admin::{AdminCommand, Connection, Target, admin};
pub use plugin_test::{DEFAULT_SCRIPT, plugin_test};
pub use snapshot::{SnapshotCommand, snapshot};
pub use watch::watch;

use crate::catalog;
use crate::config::{Config, Overrides};
use crate::pki;
use crate::runtime::{self, Runtime};

/// An error and its causes for people, joined by ": ", each cause said once: most of our
/// errors already name their source in their own message (`cannot read the config file
/// F: No such file or directory`), and anyhow's chain would repeat it.
pub fn describe_error(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Tenure: a WebAssembly plugin host for owned tasks.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, long_version = crate::version::long(), about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node. Without a config file: a single-node cluster with data in
    /// ./tenure-data and plugins from ./plugins.
    Run(RunArgs),
    /// Plugin tools.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Cluster certificates: a CA, node and operator certificates, rotation.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Operator commands: status, move, drain, undrain, release, revoke, member.
    #[command(flatten)]
    Admin(AdminCommand),
    /// Print the completion script for a shell, e.g.
    /// `tenure completions bash > ~/.local/share/bash-completion/completions/tenure`.
    Completions {
        /// The shell (bash, zsh, fish, elvish or powershell).
        shell: clap_complete::Shell,
    },
    /// Make this stopped node the only voter of its cluster, when a majority of the
    /// voters is lost for good (like etcd's --force-new-cluster). It keeps its state,
    /// ends every session, forgets the other members (they join again as new ones),
    /// takes fencing tokens far above every earlier one, and grants nothing until a
    /// full TTL after it leads. Run it on the survivor with the longest log.
    Recover(RecoverArgs),
    /// Snapshots of the replicated state: save one from a running node, check a file,
    /// seed a new cluster from one.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Print every slot's owner, then every ownership change as the cluster applies it
    /// (granted, releasing, released, vacant), until interrupted. Any node answers; give
    /// --addr more than once (NAME@HOST:PORT) to fail over between nodes.
    Watch(WatchArgs),
    /// The node's compiler process (runtime/compiler.rs): reads the cache key and the
    /// wasm from stdin and writes the cache entry OUT, reusing the functions kept in the
    /// incremental cache DIR (runtime/incremental.rs) if given. Not for people.
    #[command(name = "__compile", hide = true)]
    Compile {
        out: PathBuf,
        #[arg(long, value_name = "DIR", requires = "incremental_cap")]
        incremental: Option<PathBuf>,
        #[arg(long, value_name = "BYTES", requires = "incremental")]
        incremental_cap: Option<u64>,
    },
}

/// `tenure recover`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RecoverArgs {
    /// The node's config file (its name, data dir and address).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Confirms that the other voters are lost for good: if they came back with their
    /// data, two clusters would claim the same resources.
    #[arg(long)]
    pub lost_majority: bool,
    /// How far on the first new log index (and so every new fencing token) is placed.
    #[arg(long, value_name = "N", default_value_t = crate::raft::DEFAULT_BUMP)]
    pub bump_token: u64,
}

/// `tenure watch`'s arguments.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Only this resource.
    #[arg(value_name = "RESOURCE")]
    pub resource: Option<String>,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: Connection,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Create a cluster CA: DIR/ca.pem and DIR/ca.key (mode 0600).
    Init {
        /// Folder for ca.pem and ca.key (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Key algorithm: ed25519 or p256.
        #[arg(long, default_value = "ed25519")]
        algo: pki::Algo,
        /// Validity in days.
        #[arg(long, default_value_t = pki::DEFAULT_CA_VALIDITY_DAYS)]
        days: u32,
        /// Replace an existing CA in DIR.
        #[arg(long)]
        force: bool,
    },
    /// Issue a node or operator certificate signed by the CA: NAME.pem and NAME.key.
    #[command(group(clap::ArgGroup::new("subject").required(true).args(["node", "operator"])))]
    Issue {
        /// Folder holding ca.pem and ca.key.
        #[arg(long)]
        ca: PathBuf,
        /// Issue a node certificate (SAN URI:tenure://node/NAME and DNS:NAME).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Issue an operator certificate (SAN URI:tenure://operator/NAME).
        #[arg(long, value_name = "NAME")]
        operator: Option<String>,
        /// Folder for NAME.pem and NAME.key.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Validity in days.
        #[arg(long, default_value_t = pki::DEFAULT_LEAF_VALIDITY_DAYS)]
        days: u32,
        /// Key algorithm (default: the CA's).
        #[arg(long)]
        algo: Option<pki::Algo>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Replace a node's key and certificate in place, atomically.
    Rotate {
        /// Folder holding ca.pem and ca.key.
        #[arg(long)]
        ca: PathBuf,
        /// The node's name (must match the current certificate).
        #[arg(long)]
        node: String,
        /// The node's certificate file.
        #[arg(long)]
        cert: PathBuf,
        /// The node's key file.
        #[arg(long)]
        key: PathBuf,
        /// Validity of the new certificate in days.
        #[arg(long, default_value_t = pki::DEFAULT_LEAF_VALIDITY_DAYS)]
        days: u32,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Config file (TOML).
    #[arg(long, env = "TENURE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The node's name (overrides the config file).
    #[arg(long, env = "TENURE_NAME")]
    pub name: Option<String>,
    /// Data folder (overrides the config file).
    #[arg(long, env = "TENURE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Plugins folder (overrides the config file).
    #[arg(long, env = "TENURE_PLUGINS_DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// UDP address to listen on, e.g. 127.0.0.1:0 (overrides the config file).
    #[arg(long, env = "TENURE_LISTEN")]
    pub listen: Option<String>,
    /// Serve the status page (/), /status, Prometheus /metrics, /livez and /readyz on
    /// this IP:PORT over plain HTTP, or `off` (overrides the config file; default: off).
    #[arg(long, env = "TENURE_METRICS_LISTEN", value_name = "IP:PORT")]
    pub metrics_listen: Option<String>,
    /// Log format: human-readable text, or one JSON object per line (the event log).
    #[arg(long, env = "TENURE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Check that a wasm file is a component of the tenure:plugin/owned-task world and
    /// that its manifest is valid.
    Check {
        /// The plugin's .wasm file.
        file: PathBuf,
        /// Its manifest (default: the .toml beside the .wasm, if there is one).
        #[arg(long)]
        manifest: Option<PathBuf>,
    },
    /// Make a plugin project in Rust, Python or JavaScript, with the SDK of a Tenure
    /// checkout.
    ///
    /// The project has a start loop, a cleanup, a manifest naming the resource and a
    /// README. It builds with one command (`./build.sh`, or `npm run build` for js) into
    /// NAME.wasm beside NAME.toml, ready for `tenure plugin check` and a plugins folder.
    New {
        /// The project's directory; its last part is the plugin's name (lowercase letters,
        /// digits, - and _), which also names its resource.
        path: PathBuf,
        /// The language.
        #[arg(long, value_enum)]
        lang: crate::template::Lang,
        /// The Tenure source checkout whose SDK (sdk/) the project uses by path (default:
        /// the checkout this binary was built from, if it is still there).
        #[arg(long, env = "TENURE_SDK", value_name = "PATH")]
        sdk: Option<PathBuf>,
    },
    /// Run a plugin on a local cluster and check what it does when its slot moves.
    ///
    /// Starts three nodes of this binary on loopback in a temporary dir: two with the
    /// plugin (the slot moves between them) and a witness, so that either can crash and
    /// the other takes over. Then runs the script's steps (start, wait-log, handover,
    /// crash-owner, restart, expect-cleanup, expect-tokens-increase,
    /// expect-state-carried), saying what each did; the first failure prints what was
    /// expected, what was found and the nodes' last lines, and exits 1.
    Test {
        /// The test script (TOML), which names the plugin's .wasm.
        #[arg(default_value = crate::cli::DEFAULT_SCRIPT)]
        script: PathBuf,
        /// Keep the cluster's temporary dir (configs, data, certificates) afterwards.
        #[arg(long)]
        keep: bool,
        /// Run the script's `build` command and the script, then again whenever a source
        /// file of the project changes, until interrupted.
        #[arg(long)]
        watch: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lets a write into a pipe whose reader has gone end the process quietly, as it ends
/// `cat` or `ls` (killed by SIGPIPE: status 141 in a shell), for the commands that print
/// and exit (`tenure plugin check x | head -1`). Rust starts with SIGPIPE ignored, so such
/// a write fails with EPIPE instead and `println!` panics ("failed printing to stdout").
/// Not for `tenure run`: a node must outlive whoever reads its log.
pub fn end_quietly_on_broken_pipe() {
    // SAFETY: restoring a signal's default disposition, called from `main` before any
    // thread exists, touches no state of the program.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// `tenure completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use clap::CommandFactory as _;
    clap_complete::generate(shell, &mut Cli::command(), "tenure", &mut std::io::stdout());
    Ok(())
}

/// `tenure run`.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    logging::init(args.log_format);
    let overrides = Overrides {
        name: args.name,
        data_dir: args.data_dir,
        plugins_dir: args.plugins_dir,
        listen: args.listen,
        metrics_listen: args.metrics_listen,
    };
    let config = Config::load(args.config.as_deref(), overrides)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        crate::node::run(config, shutdown_signal()).await?;
        Ok(())
    })
}

/// `tenure recover`.
pub fn recover(args: RecoverArgs) -> anyhow::Result<()> {
    if !args.lost_majority {
        anyhow::bail!(
            "recover makes this node the only voter of its cluster: run it only when most \
             voters are lost for good and will not come back with their data (else two \
             clusters would own the same resources), on the survivor with the longest log \
             (`tenure status` showed the highest applied index); add --lost-majority to \
             confirm"
        );
    }
    check_bump(args.bump_token)?;
    let config = Config::load(Some(&args.config), Overrides::default())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let done = runtime.block_on(crate::node::recover(&config, args.bump_token))?;
    let last = done.last.map_or("none".to_string(), |(term, index)| {
        format!("index {index} (term {term})")
    });
    println!(
        "{name} is now the only voter of a new cluster, {id} (it was {was}; voters before: \
         {before}); a node of the old cluster is refused should it come back.\n\
         last entry of its log: {last}; the log was replaced by a snapshot at index {index}: \
         every fencing token from now on is above {index}.\n\
         sessions ended: {sessions}.\n\
         members forgotten: {forgotten} (they join again as new members: an emptied data \
         dir and `join = [\"{name}@ADDR\"]`).\n\
         once it runs and leads, it grants nothing for a full lease TTL: plugins of the \
         lost nodes may still be running until their leases run out.",
        name = config.name,
        before = list(&done.voters_before),
        id = done.cluster,
        was = cluster_before(done.cluster_before),
        index = done.index,
        sessions = list(&done.sessions),
        forgotten = list(&done.forgotten),
    );
    Ok(())
}

/// Refuses a token bump too small to keep new tokens above a lost cluster's.
pub(crate) fn check_bump(bump: u64) -> anyhow::Result<()> {
    if bump < crate::raft::MIN_BUMP {
        anyhow::bail!(
            "--bump-token {bump} is below {}: new fencing tokens could fall among those the \
             lost cluster granted, and downstream services would refuse the new owners",
            crate::raft::MIN_BUMP
        );
    }
    Ok(())
}

/// The old cluster's id, as `recover` and `restore` print it.
pub(crate) fn cluster_before(id: Option<crate::cluster::ClusterId>) -> String {
    id.map_or("a cluster without an id".into(), |id| {
        format!("cluster {id}")
    })
}

pub(crate) fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Resolves at the first SIGINT or SIGTERM. A second one exits at once. The handlers
/// are installed when this is called (inside the runtime), not when the future is first
/// polled: a signal while the node forms or joins must not kill it by default.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let int = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    let term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    async move { shutdown_then_abort(int, term).await }
}

async fn shutdown_then_abort(
    mut int: tokio::signal::unix::Signal,
    mut term: tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = int.recv() => {},
        _ = term.recv() => {},
    }
    // From here openraft's reports of its stopped core are a clean stop, not errors.
    logging::stopping();
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
        tracing::warn!(
            event = crate::events::NODE_ABORTED,
            "second signal: exiting without waiting for cleanups"
        );
        std::process::exit(130);
    });
}

/// `tenure plugin new`.
pub fn plugin_new(
    path: &Path,
    lang: crate::template::Lang,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: give a directory whose last part names the plugin",
            path.display()
        )
    })?;
    crate::template::check_name(name)?;
    let checkout = crate::template::checkout(sdk)?;
    let files = crate::template::write_project(path, name, lang, &checkout)?;
    println!(
        "created {} ({lang:?}, SDK from {})",
        path.display(),
        checkout.display()
    );
    for file in files {
        println!("  {}", file.display());
    }
    println!(
        "next: cd {} && {} && tenure plugin check {name}.wasm",
        path.display(),
        lang.build_command()
    );
    Ok(())
}

/// `tenure plugin check`.
pub fn plugin_check(file: &Path, manifest: Option<&Path>) -> anyhow::Result<()> {
    let beside = file.with_extension("toml");
    let manifest = manifest.or(beside.exists().then_some(beside.as_path()));
    let entry = catalog::read_plugin(file, manifest)
        .map_err(|(path, error)| anyhow::anyhow!("{}: {error}", path.display()))?;
    // Compiled in this process, once: the check is short-lived, so the compile's memory
    // leaves with it, and everything below (imports, footprint) reads the same component.
    let runtime = Runtime::new(None)?;
    let plugin = runtime
        .load(&entry.wasm)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let imports = plugin.imports();
    let m = &entry.manifest;
    let l = &m.limits;
    let f = plugin.footprint;
    println!(
        "ok: {} is a tenure:plugin/owned-task@{} component",
        file.display(),
        plugin.version().name()
    );
    println!("  digest     {}", plugin.digest);
    println!("  size       {}", runtime::mib(entry.wasm.len() as u64));
    println!(
        "  manifest   {}",
        manifest.map_or("(none: defaults)".to_string(), |p| p.display().to_string())
    );
    println!(
        "  resource   {} (tickets {}, version {})",
        m.resource, m.tickets, m.version
    );
    println!(
        "  limits     memory {}, stop_grace {}, cleanup_timeout {}, max_restarts {} within {}",
        runtime::mib(l.memory),
        humantime::format_duration(l.stop_grace),
        humantime::format_duration(l.cleanup_timeout),
        l.max_restarts,
        humantime::format_duration(l.restart_window),
    );
    if !m.require.is_empty() {
        let labels: Vec<String> = m.require.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  requires   {}", labels.join(", "));
    }
    let compiles = match runtime.compiles_here() {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    println!(
        "  compiled   {compiles}, in {:.0} ms",
        plugin.load_time.as_secs_f64() * 1000.0
    );
    println!(
        "  footprint  core instances {}, memories {} (the largest starts at {}), tables {}",
        f.core_instances,
        f.memories,
        runtime::mib(f.initial_memory),
        f.tables
    );
    let capacity = crate::placement::CAPACITY;
    let (fits, bound) = f.pool().fits(&capacity);
    println!(
        "  per node   {} instances of it at most (placement gives a node {} {}, {} per instance)",
        crate::cluster::thousands(fits.into()),
        crate::cluster::thousands(capacity.get(bound).into()),
        bound.name(),
        f.pool().get(bound),
    );
    println!(
        "  suggested  limits.memory = \"{}\" (twice the initial memory, at least 16MiB; \
         raise it if the plugin's heap grows)",
        runtime::mib(f.suggested_limit())
    );
    if let Some(why) = f.refuses(l.memory) {
        anyhow::bail!("{}: {why}", file.display());
    }
    println!("  imports    {}", imports.join("\n             "));
    println!("  capabilities (what it imports, what its manifest grants)");
    for line in capability_report(&imports, &m.capabilities, &entry.secrets) {
        println!("{line}");
    }
    Ok(())
}

/// The capabilities a component asks for (the WASI interfaces it imports) next to what
/// its manifest grants, one line each, then a `warning:` line for each import that can
/// only fail because nothing is granted. Secret values are never shown, only names.
fn capability_report(
    imports: &[String],
    granted: &catalog::capabilities::Capabilities,
    secrets: &catalog::Secrets,
) -> Vec<String> {
    use catalog::capabilities::Scheme;
    let imported = |prefix: &str| {
        imports
            .iter()
            .filter(|i| i.starts_with(prefix))
            .map(|i| i.split('@').next().unwrap_or(i).to_string())
            .collect::<Vec<_>>()
    };
    let hosts = |schemes: &[Scheme]| {
        granted
            .allowed_outbound_hosts
            .iter()
            .filter(|h| schemes.contains(&h.scheme))
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
    };
    let or_none = |list: Vec<String>| {
        if list.is_empty() {
            "nothing".to_string()
        } else {
            list.join(", ")
        }
    };
    let mut lines = Vec::new();
    let mut warnings = Vec::new();
    let mut row = |what: &str, asks: Vec<String>, grants: String| {
        let asks = if asks.is_empty() {
            "-".to_string()
        } else {
            asks.join(", ")
        };
        lines.push(format!(
            "    {what:<12} imported: {asks}; granted: {grants}"
        ));
    };

    let http = imported("wasi:http/outgoing-handler");
    let http_hosts = hosts(&[Scheme::Http, Scheme::Https]);
    if !http.is_empty() && http_hosts.is_empty() {
        warnings.push(
            "imports wasi:http/outgoing-handler, but allowed_outbound_hosts has no http or https entry: every request will be refused".to_string(),
        );
    }
    row("http", http, or_none(http_hosts));

    let sockets = imported("wasi:sockets/");
    let uses_sockets = sockets
        .iter()
        .any(|i| !i.ends_with("/network") && !i.ends_with("/instance-network"));
    let tcp_hosts = hosts(&[Scheme::Tcp]);
    if uses_sockets && tcp_hosts.is_empty() {
        warnings.push(format!(
            "imports {}, but allowed_outbound_hosts has no tcp entry: every socket call will be refused",
            sockets.join(", ")
        ));
    }
    if sockets.iter().any(|i| i.ends_with("/udp")) {
        warnings.push("imports wasi:sockets/udp: UDP is never granted".to_string());
    }
    row(
        "sockets",
        sockets,
        if tcp_hosts.is_empty() {
            "nothing".to_string()
        } else {
            format!("outbound TCP to {}", tcp_hosts.join(", "))
        },
    );

    let mut vars: Vec<String> = granted.env.keys().cloned().collect();
    vars.extend(secrets.iter().map(|(name, _)| format!("{name} (secret)")));
    row(
        "environment",
        imported("wasi:cli/environment"),
        or_none(vars),
    );
    row(
        "files",
        imported("wasi:filesystem/"),
        "nothing (files are never granted)".to_string(),
    );
    lines.extend(warnings.into_iter().map(|w| format!("warning: {w}")));
    lines
}

/// `tenure certs ...`.
pub fn certs(command: CertsCommand) -> anyhow::Result<()> {
    let if_exists = |force: bool| {
        if force {
            pki::IfExists::Overwrite
        } else {
            pki::IfExists::Refuse
        }
    };
    match command {
        CertsCommand::Init {
            out,
            algo,
            days,
            force,
        } => {
            let (cert, key) = pki::init_ca(&out, algo, days, if_exists(force))?;
            println!(
                "wrote {} and {} ({algo}, {days} days)",
                cert.display(),
                key.display()
            );
        }
        CertsCommand::Issue {
            ca,
            node,
            operator,
            out,
            days,
            algo,
            force,
        } => {
            let subject = match (node, operator) {
                (Some(name), None) => pki::Subject::Node(name),
                (None, Some(name)) => pki::Subject::Operator(name),
                _ => unreachable!("clap requires exactly one of --node and --operator"),
            };
            let (cert, key) = pki::issue(&ca, &subject, &out, days, algo, if_exists(force))?;
            let identity = pki::load_identity(&cert, &key)?.identity;
            println!(
                "wrote {} and {} for {} ({days} days)",
                cert.display(),
                key.display(),
                identity.uri()
            );
        }
        CertsCommand::Rotate {
            ca,
            node,
            cert,
            key,
            days,
        } => {
            pki::rotate(&ca, &node, &cert, &key, days)?;
            println!(
                "rotated {} and {} for node {node} ({days} days)",
                cert.display(),
                key.display()
            );
        }
    }
    Ok(())
}
