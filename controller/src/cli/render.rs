//! `kmeta render`: its flags, and its exit code (0 nothing to write, 1 writes, 2 an error).
//! What it renders is `kmeta::render`'s.

use std::path::PathBuf;

use kmeta::render::{self, Live, RenderOptions};

use super::emit;

/// Flags of `kmeta render`.
#[derive(clap::Args, Debug)]
pub(crate) struct RenderArgs {
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
    /// Render a parent manifest without metadata.uid (not the live object) with a placeholder
    /// uid (00000000-0000-0000-0000-000000000000) in owner references and labels, instead of
    /// refusing it.
    #[arg(long)]
    placeholder_uid: bool,
}

/// The cluster of `kmeta render --live`, if asked for.
async fn live_cluster(args: &RenderArgs) -> anyhow::Result<Option<Live>> {
    if !args.live {
        return Ok(None);
    }
    let config = match &args.kubeconfig {
        Some(path) => super::run::kube_config(Some(path)).await?,
        None => kube::Config::infer().await?,
    };
    Ok(Some(Live(kube::Client::try_from(config)?)))
}

/// `kmeta render`: the exit code (0 nothing to write, 1 writes, 2 an error).
pub(crate) async fn render(args: RenderArgs) -> i32 {
    let live = match live_cluster(&args).await {
        Ok(live) => live,
        Err(e) => {
            eprintln!("error: {e:#}");
            return 2;
        }
    };
    let diff = args.diff;
    let opts = RenderOptions {
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
        placeholder_uid: args.placeholder_uid,
    };
    let rendered = match render::render(&opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if args.placeholder_uid
        && rendered.parent.pointer("/metadata/uid") == Some(&render::PLACEHOLDER_UID.into())
    {
        eprintln!(
            "note: the parent has no metadata.uid: owner references and the controller-uid label carry the placeholder {}",
            render::PLACEHOLDER_UID
        );
    }
    let text = if diff {
        render::as_diff(&rendered)
    } else {
        render::as_yaml(&rendered)
    };
    if emit(text.as_bytes()).is_err() {
        return 2;
    }
    i32::from(rendered.changes())
}
