//! The `kmeta` command line.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kmeta::cmd::cli::{LogArgs, RunArgs};
use tokio_util::sync::CancellationToken;

/// The allocator of the binary (chosen by measurement: docs/design/sync-path-costs.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Run the controller against a cluster (in-cluster, --kubeconfig, or $KUBECONFIG).
    Run(Box<RunArgs>),
    /// A guided tour in one process (API server, controller, hook): an injected sidecar survives an
    /// image update and a resync writes nothing.
    Demo {
        /// Show the controller's logs too.
        #[arg(long)]
        verbose: bool,
    },
    /// Offline loop for hook authors: a local API server, your manifests, the controller.
    Dev {
        /// Manifest files or directories to apply (CRDs, controllers, parents).
        #[arg(short = 'f', long = "filename", value_name = "FILE|DIR")]
        files: Vec<PathBuf>,
        /// Port of the local API server (0: a free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Where to write the kubeconfig for kubectl.
        #[arg(long, default_value = "kmeta-dev.kubeconfig", value_name = "FILE")]
        kubeconfig_out: PathBuf,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Print the CRD manifests (CompositeController, DecoratorController, ControllerRevision).
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long, value_name = "DIR", conflicts_with = "check")]
        write: Option<PathBuf>,
        /// Fail (exit 1) when the files in this directory differ from the generated ones.
        #[arg(long, value_name = "DIR")]
        check: Option<PathBuf>,
    },
    /// Print the version.
    Version,
}

/// A token cancelled by the first SIGINT or SIGTERM; a second signal exits at once.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_signal().await;
        tracing::info!("signal received: shutting down (again to exit at once)");
        t.cancel();
        wait_signal().await;
        std::process::exit(130);
    });
    token
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn init_logs(log: &LogArgs) -> anyhow::Result<()> {
    let config = log.to_config()?;
    kmeta::ops::logging::init(&config).map_err(anyhow::Error::msg)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run_command(Cli::parse()).await {
        // the error and its causes on one line; no backtrace (RUST_BACKTRACE is for panics)
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run_command(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let config = args.to_config()?;
            kmeta::ops::logging::init(&config.log).map_err(anyhow::Error::msg)?;
            kmeta::cmd::run::run(config, shutdown_on_signal()).await?;
        }
        Command::Demo { verbose } => {
            if verbose {
                let log = kmeta::cmd::cli::LogConfig {
                    format: kmeta::cmd::cli::LogFormat::Text,
                    filter: Some("kmeta=debug,info".into()),
                };
                kmeta::ops::logging::init(&log).map_err(anyhow::Error::msg)?;
            }
            let opts = kmeta::cmd::demo::DemoOptions {
                verbose,
                ..Default::default()
            };
            let mut out = std::io::stdout();
            kmeta::cmd::demo::run(opts, &mut out)
                .await
                .context("the demo failed")?;
        }
        Command::Dev {
            files,
            port,
            kubeconfig_out,
            log,
        } => {
            init_logs(&log)?;
            let opts = kmeta::cmd::dev::DevOptions {
                port,
                kubeconfig_out,
                files,
                ..Default::default()
            };
            let mut out = std::io::stdout();
            kmeta::cmd::dev::run(opts, shutdown_on_signal(), &mut out).await?;
        }
        Command::Crds { write, check } => {
            if let Some(dir) = write {
                kmeta::api::crds::write_dir(&dir)?;
            } else if let Some(dir) = check {
                kmeta::api::crds::check_dir(&dir)?;
            } else {
                print!(
                    "{}",
                    kmeta::api::crds::rendered_stream().context("rendering crds")?
                );
            }
        }
        Command::Version => println!("kmeta {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
