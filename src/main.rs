//! `volmig`: command-line entry point. Parsing and wiring only; the library holds the logic.

use std::process::ExitCode;

use clap::Parser;
use volmig::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match volmig::api::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot render the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(_) | Command::Lookup(_) => {
            eprintln!("error: this subcommand is being wired up");
            ExitCode::from(2)
        }
    }
}
