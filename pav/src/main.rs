//! The `pav` command: see `pav --help`.

// The pav image holds no programs to run (clippy.toml).
#![deny(clippy::disallowed_methods)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pav::cli::Cli::parse();
    // Not `stdout().lock()`: the long-running commands log to stdout from
    // runtime worker threads, which would wait forever for a lock held by
    // the main thread. `Stdout` locks per write.
    match pav::cli::run(cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
