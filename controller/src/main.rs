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
    /// Print the least-privilege ClusterRole kmeta needs for the CompositeControllers and
    /// DecoratorControllers in these manifests.
    Rbac {
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
        /// Name of the ClusterRole.
        #[arg(long, default_value = "kmeta")]
        name: String,
        /// Only what this controller (CompositeController or DecoratorController, by name) needs
        /// on its own: its children or attachments, its parents' finalizers, its related
        /// resources; for a ServiceAccount of its own.
        #[arg(long, value_name = "NAME")]
        controller: Option<String>,
        /// The `--default-service-account` kmeta runs with: controllers naming no
        /// ServiceAccount have their children written as it, so kmeta's own role only watches
        /// them and may impersonate it.
        #[arg(long, value_name = "NAME")]
        default_service_account: Option<String>,
    },
    /// What kmeta would write for one parent, without a cluster: calls the controller's sync hook
    /// once and prints the desired children and the parent's status as YAML, or with --diff the
    /// write per child. Exit 0: nothing to write; 1: writes; 2: an error.
    Render(Box<RenderArgs>),
    /// One parent as kmeta sees it: its sync state, conditions, controller, children (age, ready,
    /// field managers) and latest Events; or, for compositecontroller/NAME, all of its parents,
    /// the ones not synced first.
    Trace {
        #[command(flatten)]
        target: TargetArgs,
        /// Output format: text (default), yaml or json.
        #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "yaml", "json"])]
        output: String,
        /// Redraw every 2 s until interrupted.
        #[arg(long)]
        watch: bool,
        /// Also list the related objects the hook was sent at the parent's last change.
        #[arg(long)]
        related: bool,
    },
    /// Sync a CompositeController parent now (past its backoff and an open hook circuit) by
    /// setting kmeta.dev/reconcile-requested-at, wait for that sync and print its result; exits 1
    /// when it failed or the parent is paused.
    Reconcile {
        #[command(flatten)]
        target: TargetArgs,
        /// How long to wait for the sync.
        #[arg(long, default_value = "60s", value_parser = go_duration)]
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

/// Flags of `kmeta render`.
#[derive(clap::Args, Debug)]
struct RenderArgs {
    /// The CompositeController manifest.
    #[arg(long, value_name = "FILE")]
    controller: PathBuf,
    /// The parent manifest.
    #[arg(long, value_name = "FILE")]
    parent: PathBuf,
    /// Manifests of the observed children (YAML, several documents or a List).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    observed: Vec<PathBuf>,
    /// Manifests of related objects, as the customize hook would select them.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    related: Vec<PathBuf>,
    /// CustomResourceDefinitions of custom child kinds (their kind, scope and list markers).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    crd: Vec<PathBuf>,
    /// Call this URL instead of the hook's own.
    #[arg(long, value_name = "URL")]
    hook_url: Option<String>,
    /// Objects the hook client reads from the cluster: a Jsonnet hook's ConfigMap, the Secrets
    /// of a webhook's credentials.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    hook_objects: Vec<PathBuf>,
    /// Call the finalize hook (finalizing: true).
    #[arg(long)]
    finalizing: bool,
    /// Print, per child, the write kmeta would make as a diff against the observed object.
    #[arg(long)]
    diff: bool,
    /// Read the parent's observed children (and custom child kinds, and the objects the hook
    /// client reads) from the cluster: the parent as it is there with the file's spec, labels
    /// and annotations.
    #[arg(long)]
    live: bool,
    /// Path to a kubeconfig for --live. Default: $KUBECONFIG / ~/.kube/config, else in-cluster.
    #[arg(long, value_name = "FILE", requires = "live")]
    kubeconfig: Option<PathBuf>,
}

/// The cluster of `kmeta render --live`, if asked for.
async fn live_cluster(args: &RenderArgs) -> anyhow::Result<Option<kmeta::cmd::render::Live>> {
    if !args.live {
        return Ok(None);
    }
    let config = match &args.kubeconfig {
        Some(path) => kmeta::cmd::run::kube_config(Some(path)).await?,
        None => kube::Config::infer().await?,
    };
    Ok(Some(kmeta::cmd::render::Live(kube::Client::try_from(
        config,
    )?)))
}

/// `kmeta render`: the exit code (0 nothing to write, 1 writes, 2 an error).
async fn render(args: RenderArgs) -> i32 {
    use kmeta::cmd::render;
    let live = match live_cluster(&args).await {
        Ok(live) => live,
        Err(e) => {
            eprintln!("error: {e:#}");
            return 2;
        }
    };
    let opts = render::RenderOptions {
        controller: args.controller,
        parent: args.parent,
        observed: args.observed,
        related: args.related,
        crds: args.crd,
        hook_url: args.hook_url,
        hook_objects: args.hook_objects,
        jsonnet_worker: None,
        live,
        finalizing: args.finalizing,
    };
    let rendered = match render::render(&opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if rendered.parent.pointer("/metadata/uid").is_none() {
        eprintln!(
            "note: the parent has no metadata.uid (a manifest, not a live object): owner references and the controller-uid label carry an empty uid"
        );
    }
    let text = if args.diff {
        render::as_diff(&rendered)
    } else {
        render::as_yaml(&rendered)
    };
    if emit(text.as_bytes()).is_err() {
        return 2;
    }
    i32::from(rendered.changes())
}

/// The object a steering command names, and the cluster it is in.
#[derive(clap::Args, Debug)]
struct TargetArgs {
    /// `<resource>/<name>`: the resource by plural or kind, optionally `.<group>`
    /// (things/one, thing.example.com/one, compositecontroller/web).
    #[arg(value_name = "RESOURCE/NAME")]
    target: String,
    /// Namespace of a namespaced object. Default: the kubeconfig context's, else "default".
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Path to a kubeconfig. Default: $KUBECONFIG / ~/.kube/config, else in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

impl TargetArgs {
    /// The client, the server's resources and the resolved object.
    async fn resolve(
        &self,
    ) -> anyhow::Result<(kube::Client, kube::Discovery, kmeta::cmd::steer::Target)> {
        let config = match &self.kubeconfig {
            Some(path) => kmeta::cmd::run::kube_config(Some(path)).await?,
            None => kube::Config::infer().await?,
        };
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config)?;
        let discovery = kmeta::cmd::steer::discover(&client).await?;
        let target = kmeta::cmd::steer::resolve_in(&discovery, &self.target, &namespace)?;
        Ok((client, discovery, target))
    }
}

/// `kmeta trace`: the parent (or a controller's parents) once, or redrawn with `--watch`.
async fn trace(args: TargetArgs, output: &str, watch: bool, related: bool) -> anyhow::Result<()> {
    use kmeta::cmd::trace;
    use std::io::IsTerminal as _;
    let (client, discovery, target) = args.resolve().await?;
    let color = output == "text" && std::io::stdout().is_terminal();
    let stop = shutdown_on_signal();
    loop {
        let text = if target.resource.kind == "CompositeController" {
            let rows = trace::trace_controller(&client, &discovery, &target.name).await?;
            match output {
                "json" => serde_json::to_string_pretty(&rows)?,
                "yaml" => serde_saphyr::to_string(&rows)?,
                _ => trace::render_list(&rows),
            }
        } else {
            let mut t = trace::trace_parent(&client, &discovery, &target).await?;
            if related {
                t = trace::with_related(t);
            }
            match output {
                "json" => serde_json::to_string_pretty(&t)?,
                "yaml" => serde_saphyr::to_string(&t)?,
                _ => trace::render_text(&t, color),
            }
        };
        if watch && color {
            emit(b"\x1b[2J\x1b[H")?;
        }
        emit(text.as_bytes())?;
        if !watch {
            return Ok(());
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(trace::WATCH_EVERY) => {}
        }
    }
}

/// What a steering command does to its target.
enum Steer {
    Reconcile(std::time::Duration),
    Suspend,
    Resume,
}

/// `kmeta reconcile`, `suspend` and `resume`: one line of result; an error (exit 1) when the
/// sync failed or the parent is paused.
async fn steer(args: TargetArgs, what: Steer) -> anyhow::Result<()> {
    use kmeta::cmd::steer::{self, Reconciled};
    let (client, _, target) = args.resolve().await?;
    let name = target.display();
    match what {
        Steer::Reconcile(timeout) => match steer::reconcile(&client, &target, timeout).await? {
            Reconciled::Synced => println!("{name}: synced"),
            Reconciled::Failed(why) => anyhow::bail!("{name}: sync failed: {why}"),
            Reconciled::Paused(why) => anyhow::bail!("{name}: not synced, paused: {why}"),
        },
        Steer::Suspend => {
            steer::suspend(&client, &target).await?;
            println!("{name}: paused (kmeta resume to undo)");
        }
        Steer::Resume => {
            steer::resume(&client, &target).await?;
            println!("{name}: resumed");
        }
    }
    Ok(())
}

fn go_duration(s: &str) -> Result<std::time::Duration, String> {
    kmeta::cmd::cli::parse_duration("timeout", s).map_err(|e| e.to_string())
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

/// Transparent huge pages off for this process (Linux): mimalloc asks the kernel for 2 MiB pages
/// on the memory it maps, and each one partly used stays resident whole — a controller of 1000
/// parents × 10 children peaked at ~75 MiB with them and ~50 MiB without, at no measured cost in
/// CPU at 10 000 × 10 (docs/design/sync-path-costs.md). Where the call is refused (a seccomp
/// profile), a note says so and they stay on.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("note: transparent huge pages stay on ({e}): memory may peak higher");
    }
}

/// mimalloc's `mi_option_purge_delay`: its position in the `mi_option_t` enum of the mimalloc
/// v3 that libmimalloc-sys builds (the crate names no constant for it; a test checks the
/// option's default, 1000 ms, at this position).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps emptied pages before returning them to the OS: 10 ms, mimalloc v2's
/// default (v3 waits 1000 ms). A controller's work comes in bursts (a resync, a rollout), and
/// pages freed after one stayed resident: 50 workers over 1000 parents × 10 ConfigMaps peaked at
/// 52-53 MiB with 1000 ms and 50 MiB with 10 ms, at no measured CPU cost
/// (docs/design/sizing-bench.md).
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// The purge delay `kmeta` sets: [`PURGE_DELAY_MS`], or none when the operator chose one
/// (`operator`: `MIMALLOC_PURGE_DELAY`, which mimalloc reads itself).
fn purge_delay_to_set(operator: Option<&std::ffi::OsStr>) -> Option<std::ffi::c_long> {
    operator.is_none().then_some(PURGE_DELAY_MS)
}

/// Sets mimalloc's purge delay as [`purge_delay_to_set`] decides.
#[allow(unsafe_code)]
fn set_purge_delay() {
    let operator = std::env::var_os("MIMALLOC_PURGE_DELAY");
    if let Some(ms) = purge_delay_to_set(operator.as_deref()) {
        // SAFETY: `mi_option_set` stores a value in mimalloc's option table (callable from any
        // thread at any time); the option index is one of the linked mimalloc's (see above).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms) }
    }
}

fn main() {
    // a Jsonnet worker (started by this binary's controller) serves stdin without a runtime
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("jsonnet-worker")) {
        std::process::exit(kmeta::hook::jsonnet::worker_main());
    }
    run_main();
}

#[tokio::main]
async fn run_main() {
    no_transparent_huge_pages();
    set_purge_delay();
    if let Err(e) = run_command(Cli::parse()).await {
        // the error and its causes on one line; no backtrace (RUST_BACKTRACE is for panics)
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
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
    for cause in e.chain() {
        let text = cause.to_string();
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

/// `kmeta demo`, with the controller's logs when `verbose`.
async fn demo(verbose: bool) -> anyhow::Result<()> {
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
        .context("the demo failed")
}

async fn run_command(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let config = args.to_config()?;
            kmeta::ops::logging::init(&config.log).map_err(anyhow::Error::msg)?;
            kmeta::cmd::run::run(config, shutdown_on_signal()).await?;
        }
        Command::Demo { verbose } => demo(verbose).await?,
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
                let text = kmeta::api::crds::rendered_stream().context("rendering crds")?;
                emit(text.as_bytes())?;
            }
        }
        Command::Rbac {
            files,
            related,
            name,
            controller: None,
            default_service_account,
        } => emit(
            kmeta::cmd::rbac::render(&files, &related, &name, default_service_account.as_deref())?
                .as_bytes(),
        )?,
        Command::Rbac {
            files,
            related,
            name,
            controller: Some(controller),
            ..
        } => emit(
            kmeta::cmd::rbac::render_controller(&files, &related, &name, &controller)?.as_bytes(),
        )?,
        Command::Render(args) => std::process::exit(render(*args).await),
        Command::Trace {
            target,
            output,
            watch,
            related,
        } => trace(target, &output, watch, related).await?,
        Command::Reconcile { target, timeout } => steer(target, Steer::Reconcile(timeout)).await?,
        Command::Suspend { target } => steer(target, Steer::Suspend).await?,
        Command::Resume { target } => steer(target, Steer::Resume).await?,
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

#[cfg(test)]
mod tests {
    use super::{
        MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS, one_line, purge_delay_to_set, set_purge_delay,
    };

    /// The option index is the purge delay's in the linked mimalloc: its default (1000 ms in
    /// mimalloc v3) or the value `MIMALLOC_PURGE_DELAY` gives it; `set_purge_delay` then sets
    /// it to 10 ms, unless the variable is set. (One test: the option is process-wide.)
    #[test]
    #[allow(unsafe_code)]
    fn purge_delay_index_is_mimallocs_and_set() {
        let operator = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        let before = match &operator {
            Some(v) => v.parse().expect("MIMALLOC_PURGE_DELAY is a number"),
            None => 1000,
        };
        // SAFETY: reads an option of mimalloc's table (any thread, any time).
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), before);
        set_purge_delay();
        assert_eq!(get(), if operator.is_some() { before } else { 10 });
    }

    #[test]
    fn an_operators_purge_delay_wins() {
        assert_eq!(purge_delay_to_set(None), Some(PURGE_DELAY_MS));
        assert_eq!(purge_delay_to_set(Some("0".as_ref())), None);
        assert_eq!(purge_delay_to_set(Some("".as_ref())), None);
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
}
