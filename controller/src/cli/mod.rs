//! The binary's command line: the subcommands and their flags (clap), what the commands that
//! are no library API do, and what each command prints and how it exits. The parts a Rust user
//! or a test needs on their own are library modules: `kmeta::rbac`, `kmeta::render`,
//! `kmeta::steer`, `kmeta::trace`, `kmeta::manifest`.
//!
//! - `mod.rs`: [`Cli`], [`Command`], the dispatch, and the exit on error;
//! - `args`: `kmeta run`'s flags (`RunArgs`, typed by clap) and their validation into a
//!   `RunConfig` (`controller/tests/deploy.rs` compiles this file to parse the Helm chart's
//!   Deployment with it);
//! - `run`: `kmeta run` (clients, leader election or shards, health endpoints, the manager;
//!   `run::manager_config` is the one place it builds its `ManagerConfig`);
//! - `dev`, `demo`, `progress`: `kmeta dev` and `kmeta demo` (with the default
//!   `embedded-apiserver` feature), and their progress lines on a terminal;
//! - `render`: `kmeta render` (its flags and exit codes);
//! - `plan`: `kmeta plan` (its flags, output and exit codes);
//! - `target`: `kmeta trace`, `reconcile`, `suspend`, `resume` (a parent named on the command
//!   line);
//! - `signal`: the shutdown token of SIGINT/SIGTERM;
//! - `memory`: the allocator's settings.

mod args;
#[cfg(test)]
mod args_tests;
#[cfg(feature = "embedded-apiserver")]
mod demo;
#[cfg(feature = "embedded-apiserver")]
mod dev;
pub(crate) mod memory;
mod plan;
#[cfg(feature = "embedded-apiserver")]
mod progress;
mod render;
mod run;
mod signal;
mod target;

use std::path::PathBuf;

use self::args::{LogArgs, RunArgs};
use anyhow::Context as _;
use clap::{Parser, Subcommand};

use self::plan::PlanArgs;
use self::render::RenderArgs;
use self::signal::shutdown_on_signal;
use self::target::{Steer, TargetArgs, TraceOutput};

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
    /// Print the least-privilege ClusterRole kmeta needs for the CompositeControllers and
    /// DecoratorControllers in these manifests.
    Rbac(RbacArgs),
    /// What kmeta would write for one parent, without a cluster: calls the controller's sync hook
    /// once and prints the desired children and the parent's status as YAML, or with --diff the
    /// write per child. Exit 0: nothing to write; 1: writes; 2: an error.
    Render(Box<RenderArgs>),
    /// What kmeta would write for every parent of a CompositeController, read-only: calls its
    /// hook (or a new one: --controller, --hook-url, --hook-objects) for each parent and prints
    /// what would change. Exit 0: nothing to write; 1: writes; 2: a hook failed or an error.
    Plan(Box<PlanArgs>),
    /// One parent as kmeta sees it: its sync state, conditions, controller, children (age, ready,
    /// field managers) and latest Events; or, for compositecontroller/NAME, all of its parents,
    /// the ones not synced first.
    Trace {
        #[command(flatten)]
        target: TargetArgs,
        /// Output format: text (default), yaml or json.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: TraceOutput,
        /// Redraw every 2 s until interrupted.
        #[arg(long)]
        watch: bool,
        /// Also list the related objects the hook was sent at the parent's last change.
        #[arg(long)]
        related: bool,
        /// Also print the earlier syncs that wrote something (up to 4 kept), each with what
        /// triggered it.
        #[arg(long)]
        history: bool,
    },
    /// Sync a CompositeController parent now (past its backoff and an open hook circuit) by
    /// setting kmeta.dev/reconcile-requested-at, wait for that sync and print its result; exits 1
    /// when it failed or the parent is paused.
    Reconcile {
        #[command(flatten)]
        target: TargetArgs,
        /// How long to wait for the sync.
        #[arg(long, default_value = "60s", value_parser = args::duration_value)]
        timeout: std::time::Duration,
    },
    /// Pause kmeta for a parent, a decorator target, or every object of a CompositeController or
    /// DecoratorController (kmeta.dev/paused: "true"): no hook call, no child write.
    Suspend {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Resume what `kmeta suspend` paused (removes kmeta.dev/paused).
    Resume {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Print a shell completion script (e.g. `kmeta completion bash > /etc/bash_completion.d/kmeta`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the version.
    Version,
}

/// Flags of `kmeta rbac`.
#[derive(clap::Args, Debug)]
struct RbacArgs {
    /// Manifest files or directories holding the controllers.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR",
        required = true
    )]
    files: Vec<PathBuf>,
    /// Read access to a related resource a customize hook selects (repeatable).
    #[arg(long, value_name = "APIVERSION/RESOURCE")]
    related: Vec<String>,
    /// Name of the ClusterRole and of its ClusterRoleBinding; default `kmeta` (kmeta's own, as
    /// deploy/ installs it), with --controller `kmeta-compositecontroller-<NAME>` or
    /// `kmeta-decoratorcontroller-<NAME>` (kmeta's own name is refused there).
    #[arg(long)]
    name: Option<String>,
    /// The ServiceAccount the ClusterRoleBinding binds, as <namespace>/<name>; default
    /// `kmeta/kmeta` (kmeta's own, as deploy/ installs it), with --controller the controller's
    /// spec.serviceAccountName in its spec.serviceAccountNamespace.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    service_account: Option<kmeta::rbac::ServiceAccountRef>,
    /// Only what this controller (CompositeController or DecoratorController, by name) needs
    /// on its own: its children or attachments, its parents' finalizers, its related
    /// resources; for a ServiceAccount of its own.
    #[arg(long, value_name = "NAME", conflicts_with = "plan")]
    controller: Option<String>,
    /// The read-only role `kmeta plan compositecontroller/NAME` runs with (a plan Job):
    /// `get`/`list` on what the plan reads, nothing it could write with; named
    /// `kmeta-plan-<NAME>`.
    #[arg(long, value_name = "NAME")]
    plan: Option<String>,
    /// The `--default-service-account` kmeta runs with: controllers naming no
    /// ServiceAccount have their children written as it, so kmeta's own role only watches
    /// them and may impersonate it.
    #[arg(long, value_name = "NAME")]
    default_service_account: Option<String>,
    /// With ResourceGraphDefinitions among the files: also `delete` on
    /// customresourcedefinitions, for `kmeta run --serve-kro --kro-allow-crd-deletion`.
    #[arg(long)]
    kro_allow_crd_deletion: bool,
}

/// Parses the command line and runs the command; on an error, prints it on one line and exits 1
/// (`kmeta render` exits with its own code).
pub(crate) fn main() {
    match Cli::try_parse() {
        Ok(cli) => run_main(cli),
        Err(e) => {
            // the help or the version, or clap's refusal; the error's own exit code but for
            // the flags below
            let code = refused_exit_code(&e);
            let _ = e.print();
            std::process::exit(code);
        }
    }
}

/// `kmeta run`'s flags whose values and combinations kmeta checked itself before clap did: a
/// refusal naming one of them exits 1, as it did, and any other clap's way (2; 0 for --help).
const CHECKED_BY_KMETA: &[&str] = &[
    "--sharding",
    "--leader-election",
    "--leader-election-resource-lock",
];

/// The exit code of a command line clap refused.
fn refused_exit_code(e: &clap::Error) -> i32 {
    use clap::error::{ContextKind, ErrorKind};
    // a value kmeta's own parsers refused (durations, addresses, strategy, buckets, prefix)
    let value = e.kind() == ErrorKind::ValueValidation
        && std::error::Error::source(e).is_some_and(|s| s.is::<args::CliError>());
    let named = |arg: String| {
        let flag = arg.split_whitespace().next().unwrap_or_default().to_owned();
        CHECKED_BY_KMETA.contains(&flag.as_str())
    };
    let relation = matches!(
        e.kind(),
        ErrorKind::ArgumentConflict | ErrorKind::MissingRequiredArgument | ErrorKind::InvalidValue
    ) && e.get(ContextKind::InvalidArg).is_some_and(|arg| match arg {
        clap::error::ContextValue::Strings(args) => args.iter().cloned().any(named),
        other => named(other.to_string()),
    });
    if value || relation { 1 } else { e.exit_code() }
}

#[tokio::main]
async fn run_main(cli: Cli) {
    if let Err(e) = run_command(cli).await {
        // the error and its causes on one line; no backtrace (RUST_BACKTRACE is for panics)
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
}

async fn run_command(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run(&args).await?,
        Command::Demo { verbose } => demo(verbose).await?,
        Command::Dev {
            files,
            port,
            kubeconfig_out,
            log,
        } => dev(files, port, kubeconfig_out, &log).await?,
        Command::Crds { write, check } => crds(write, check)?,
        Command::Rbac(args) => emit(rbac(&args)?.as_bytes())?,
        Command::Render(args) => std::process::exit(render::render(*args).await),
        Command::Plan(args) => std::process::exit(plan::plan(*args).await),
        Command::Trace {
            target,
            output,
            watch,
            related,
            history,
        } => {
            let detail = target::Detail { related, history };
            target::trace(target, output, watch, detail).await?
        }
        Command::Reconcile { target, timeout } => {
            target::steer(target, Steer::Reconcile(timeout)).await?;
        }
        Command::Suspend { target } => target::steer(target, Steer::Suspend).await?,
        Command::Resume { target } => target::steer(target, Steer::Resume).await?,
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kmeta", &mut script);
            emit(&script)?;
        }
        Command::Version => println!("kmeta {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}

/// `kmeta run`: validates the flags, starts logging, runs until a signal.
async fn run(args: &RunArgs) -> anyhow::Result<()> {
    let config = args.to_config()?;
    kmeta::ops::logging::init(&config.log).map_err(anyhow::Error::msg)?;
    run::run(config, shutdown_on_signal()).await?;
    Ok(())
}

/// `kmeta demo`, with the controller's logs when `verbose`.
async fn demo(verbose: bool) -> anyhow::Result<()> {
    if verbose {
        let log = args::LogConfig {
            format: args::LogFormat::Text,
            filter: Some("kmeta=debug,info".into()),
        };
        kmeta::ops::logging::init(&log).map_err(anyhow::Error::msg)?;
    }
    let opts = demo::DemoOptions {
        verbose,
        ..Default::default()
    };
    let mut out = std::io::stdout();
    demo::run(opts, &mut out).await.context("the demo failed")
}

/// `kmeta dev`: the local API server, the manifests, the controller, until a signal.
async fn dev(
    files: Vec<PathBuf>,
    port: u16,
    kubeconfig_out: PathBuf,
    log: &LogArgs,
) -> anyhow::Result<()> {
    let config = log.to_config()?;
    kmeta::ops::logging::init(&config).map_err(anyhow::Error::msg)?;
    let opts = dev::DevOptions {
        port,
        kubeconfig_out,
        files,
        ..Default::default()
    };
    let mut out = std::io::stdout();
    dev::run(opts, shutdown_on_signal(), &mut out).await?;
    Ok(())
}

/// `kmeta crds`: writes, checks or prints the CRD manifests.
fn crds(write: Option<PathBuf>, check: Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(dir) = write {
        kmeta::api::crds::write_dir(&dir)?;
    } else if let Some(dir) = check {
        kmeta::api::crds::check_dir(&dir)?;
    } else {
        let text = kmeta::api::crds::rendered_stream().context("rendering crds")?;
        emit(text.as_bytes())?;
    }
    Ok(())
}

/// `kmeta rbac`: the ClusterRole of every controller in the files and its binding to kmeta's
/// ServiceAccount, or with `--controller` those of one controller's ServiceAccount.
fn rbac(args: &RbacArgs) -> anyhow::Result<String> {
    use kmeta::rbac::{OWN_NAME, ServiceAccountRef, render, render_controller, render_plan};
    let RbacArgs {
        files,
        related,
        name,
        service_account,
        controller,
        plan,
        default_service_account,
        kro_allow_crd_deletion,
    } = args;
    if let Some(plan) = plan {
        let sa = service_account.as_ref();
        return Ok(render_plan(files, related, name.as_deref(), plan, sa)?);
    }
    Ok(match controller {
        None => render(
            files,
            related,
            name.as_deref().unwrap_or(OWN_NAME),
            default_service_account.as_deref(),
            &service_account
                .clone()
                .unwrap_or_else(ServiceAccountRef::kmeta),
            *kro_allow_crd_deletion,
        )?,
        Some(controller) => render_controller(
            files,
            related,
            name.as_deref(),
            controller,
            service_account.as_ref(),
        )?,
    })
}

/// Writes `bytes` to stdout; a reader that went away (`kmeta crds | head`) is not an error.
fn emit(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The error and its causes joined by `: `, each cause once: a cause whose text its error's
/// message already includes (`reading {path}: {source}` with `source` also the error's source)
/// is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut chain = e.chain();
    while let Some(cause) = chain.next() {
        // an API error as its message, code and reason, not kube's dump of the whole Status
        // (which is its cause, then skipped)
        let text = match cause.downcast_ref::<kube::Error>() {
            Some(k @ kube::Error::Api(_)) => {
                chain.next();
                kmeta::ops::client::describe_api_error(k)
            }
            _ => cause.to_string(),
        };
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Cli, one_line, refused_exit_code};
    use clap::Parser as _;

    /// Exit 1 for the values and combinations kmeta checked before clap did, clap's code for
    /// the rest.
    #[test]
    fn refused_flags_keep_their_exit_codes() {
        let code = |args: &[&str]| match Cli::try_parse_from(args) {
            Ok(_) => 0,
            Err(e) => refused_exit_code(&e),
        };
        for ours in [
            &["kmeta", "run", "--discovery-interval=soon"][..],
            &["kmeta", "run", "--metrics-address=9999"],
            &["kmeta", "run", "--apply-strategy=merge"],
            &["kmeta", "run", "--sharding", "--leader-election"],
            &["kmeta", "run", "--leader-election", "--sharding"],
            &["kmeta", "run", "--shard-key=uid"],
            &["kmeta", "run", "--shard-watch=server"],
            &["kmeta", "run", "--sharding", "--shard-buckets=12"],
            &["kmeta", "run", "--leader-election-resource-lock=configmaps"],
            &["kmeta", "reconcile", "things/one", "--timeout=soon"],
        ] {
            assert_eq!(code(ours), 1, "{ours:?}");
        }
        for clap in [
            &["kmeta", "run", "--workers=abc"][..],
            &["kmeta", "run", "--log-format=xml"],
            &["kmeta", "run", "--no-such-flag"],
            &["kmeta", "trace", "-o", "xml", "things/one"],
            &[
                "kmeta",
                "render",
                "--controller=a",
                "--parent=b",
                "--kubeconfig=c",
            ],
            &["kmeta", "rbac"],
            &["kmeta", "run", "--kro-allow-crd-deletion"],
        ] {
            assert_eq!(code(clap), 2, "{clap:?}");
        }
        assert_eq!(code(&["kmeta", "run", "--help"]), 0);
        assert_eq!(code(&["kmeta", "run"]), 0);
        assert_eq!(
            code(&["kmeta", "run", "--serve-kro", "--kro-allow-crd-deletion"]),
            0
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}: {source}")]
    struct Read {
        path: &'static str,
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(Read {
            path: "x/",
            source: io,
        });
        assert_eq!(one_line(&e), "reading x/: No such file or directory");
        let e = e.context("loading manifests");
        assert_eq!(
            one_line(&e),
            "loading manifests: reading x/: No such file or directory"
        );
    }

    /// An API server's refusal reads as its message, code and reason: kube's own rendering
    /// dumps the whole Status struct.
    #[test]
    fn an_api_error_is_printed_without_debug_formatting() {
        let status = kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "leases is forbidden".into(),
            ..Default::default()
        };
        let e = anyhow::Error::new(kube::Error::Api(Box::new(status))).context("renewing");
        assert_eq!(
            one_line(&e),
            "renewing: leases is forbidden (403 Forbidden)"
        );
    }
}
