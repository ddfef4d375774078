//! The `kmeta` command line.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kmeta",
    version,
    about = "Metacontroller-compatible lambda controllers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the CRD manifests (CompositeController, DecoratorController, ControllerRevision).
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long, value_name = "DIR", conflicts_with = "check")]
        write: Option<PathBuf>,
        /// Fail (exit 1) when the files in this directory differ from the generated ones.
        #[arg(long, value_name = "DIR")]
        check: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { write, check } => {
            if let Some(dir) = write {
                kmeta::crds::write_dir(&dir)?;
            } else if let Some(dir) = check {
                kmeta::crds::check_dir(&dir)?;
            } else {
                print!(
                    "{}",
                    kmeta::crds::rendered_stream().context("rendering crds")?
                );
            }
            Ok(())
        }
    }
}
