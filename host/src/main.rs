//! The `tenure` binary: parse the command line and hand over to the library.

use clap::Parser;
use tenure::cli::{Cli, Command, PluginCommand};

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        tenure::cli::end_quietly_on_broken_pipe();
    }
    let result = match cli.command {
        Command::Run(args) => tenure::cli::run(args),
        Command::Plugin(PluginCommand::Check { file, manifest }) => {
            tenure::cli::plugin_check(&file, manifest.as_deref())
        }
        Command::Plugin(PluginCommand::New { path, lang, sdk }) => {
            tenure::cli::plugin_new(&path, lang, sdk.as_deref())
        }
        Command::Plugin(PluginCommand::Test {
            script,
            keep,
            watch,
        }) => tenure::cli::plugin_test(&script, keep, watch),
        Command::Certs(command) => tenure::cli::certs(command),
        Command::Admin(command) => tenure::cli::admin(command),
        Command::Completions { shell } => tenure::cli::completions(shell),
        Command::Recover(args) => tenure::cli::recover(args),
        Command::Snapshot(command) => tenure::cli::snapshot(command),
        Command::Watch(args) => tenure::cli::watch(args.resource, args.json, args.conn),
        Command::Compile {
            out,
            incremental,
            incremental_cap,
        } => {
            let incremental = incremental
                .zip(incremental_cap)
                .map(|(dir, cap)| tenure::runtime::Incremental { dir, cap });
            std::process::exit(tenure::runtime::compile_child(&out, incremental))
        }
    };
    if let Err(err) = result {
        eprintln!("tenure: {}", tenure::cli::describe_error(&err));
        std::process::exit(1);
    }
}
