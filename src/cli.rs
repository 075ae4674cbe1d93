//! The command line of the `volmig` binary (DESIGN.md §3).

use clap::{Parser, Subcommand};

/// volmig registers in-tree vSphere vmdks as CNS volumes exactly once.
#[derive(Debug, Parser)]
#[command(name = "volmig", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the VolumeMigration CustomResourceDefinition as YAML.
    Crd,
}
