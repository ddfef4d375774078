//! `kmeta trace`, `reconcile`, `suspend` and `resume`: a parent (or a controller) named on the
//! command line, found in the cluster, then shown or steered (`kmeta::trace`,
//! `kmeta::steer`).

use std::path::PathBuf;

use kmeta::steer::{self, Reconciled, Target};
use kmeta::trace;

use super::emit;
use super::signal::shutdown_on_signal;

/// How often `kmeta trace --watch` redraws: 2 s.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The object a steering command names, and the cluster it is in.
#[derive(clap::Args, Debug)]
pub(crate) struct TargetArgs {
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
    async fn resolve(&self) -> anyhow::Result<(kube::Client, kube::Discovery, Target)> {
        let config = match &self.kubeconfig {
            Some(path) => super::run::kube_config(Some(path)).await?,
            None => kube::Config::infer().await?,
        };
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config)?;
        let discovery = steer::discover(&client).await?;
        let target = steer::resolve_in(&discovery, &self.target, &namespace)?;
        Ok((client, discovery, target))
    }
}

/// `kmeta trace -o`: how the trace is printed: lines for a person (colored on a terminal), YAML
/// or JSON. (The variants carry no doc comments: clap would print them as a list in `--help`.)
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TraceOutput {
    Text,
    Yaml,
    Json,
}

/// What `kmeta trace` adds to a parent's trace: the related objects of its last change
/// (`--related`), every earlier record kept (`--history`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Detail {
    pub(crate) related: bool,
    pub(crate) history: bool,
}

/// `kmeta trace`: the parent (or a controller's parents) once, or redrawn with `--watch`.
pub(crate) async fn trace(
    args: TargetArgs,
    output: TraceOutput,
    watch: bool,
    detail: Detail,
) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let (client, discovery, target) = args.resolve().await?;
    let color = output == TraceOutput::Text && std::io::stdout().is_terminal();
    let stop = shutdown_on_signal();
    loop {
        let text = trace_once(&client, &discovery, &target, output, detail, color).await?;
        if watch && color {
            emit(b"\x1b[2J\x1b[H")?;
        }
        emit(text.as_bytes())?;
        if !watch {
            return Ok(());
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}

/// One trace of `target`, printed as `output` asks.
async fn trace_once(
    client: &kube::Client,
    discovery: &kube::Discovery,
    target: &Target,
    output: TraceOutput,
    detail: Detail,
    color: bool,
) -> anyhow::Result<String> {
    Ok(if target.resource.kind == "CompositeController" {
        let rows = trace::trace_controller(client, discovery, &target.name).await?;
        match output {
            TraceOutput::Json => serde_json::to_string_pretty(&rows)?,
            TraceOutput::Yaml => serde_saphyr::to_string(&rows)?,
            TraceOutput::Text => trace::render_list(&rows),
        }
    } else {
        let mut t = trace::trace_parent(client, discovery, target).await?;
        if detail.related {
            t = trace::with_related(t);
        }
        if detail.history {
            t = trace::with_history(t);
        }
        match output {
            TraceOutput::Json => serde_json::to_string_pretty(&t)?,
            TraceOutput::Yaml => serde_saphyr::to_string(&t)?,
            TraceOutput::Text => trace::render_text(&t, color),
        }
    })
}

/// What a steering command does to its target.
pub(crate) enum Steer {
    Reconcile(std::time::Duration),
    Suspend,
    Resume,
}

/// `kmeta reconcile`, `suspend` and `resume`: one line of result; an error (exit 1) when the
/// sync failed or the parent is paused.
pub(crate) async fn steer(args: TargetArgs, what: Steer) -> anyhow::Result<()> {
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
