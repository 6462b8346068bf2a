//! The `pav` command: see `pav --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pav::cli::Cli::parse();
    let stdout = std::io::stdout();
    match pav::cli::run(cli, &mut stdout.lock()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
