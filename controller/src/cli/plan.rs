//! `kmeta plan`: its flags, what it prints and its exit code (0 nothing to write, 1 writes, 2 a
//! parent's hook failed or an error). What it plans is `kmeta::plan`'s.

use std::path::PathBuf;

use kmeta::plan::{self, Outcome, ParentPlan, PlanOptions, Summary};

use super::emit;

/// `kmeta plan -o`: a summary for a person, or JSON for tools. (No doc comments on the
/// variants: clap would print them as a list in `--help`.)
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlanOutput {
    Text,
    Json,
}

/// Flags of `kmeta plan`.
#[derive(clap::Args, Debug)]
pub(crate) struct PlanArgs {
    /// `compositecontroller/NAME`: the controller whose parents are planned.
    #[arg(value_name = "compositecontroller/NAME")]
    target: String,
    /// A new CompositeController manifest to plan with instead of the deployed one.
    #[arg(long, value_name = "FILE")]
    controller: Option<PathBuf>,
    /// Objects the hook client reads, from these files instead of the cluster (a new Jsonnet
    /// ConfigMap, a webhook's Secrets).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    hook_objects: Vec<PathBuf>,
    /// Call this URL instead of the hook's own (a new hook version deployed beside the old).
    #[arg(long, value_name = "URL")]
    hook_url: Option<String>,
    /// Only the parents this label selector selects.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Only the parents in this namespace. Default: every namespace.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Hook calls in flight at once.
    #[arg(long, default_value_t = plan::DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Also print, per parent that would change, its writes as a diff (as `kmeta render --diff`).
    #[arg(long)]
    diff: bool,
    /// Output format: text (default) or json.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: PlanOutput,
    /// Path to a kubeconfig. Default: $KUBECONFIG / ~/.kube/config, else in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

/// The controller's name from `compositecontroller/NAME` (or `compositecontrollers/`, `cc/`).
fn controller_name(target: &str) -> Option<&str> {
    let (kind, name) = target.split_once('/')?;
    let known = ["compositecontroller", "compositecontrollers", "cc"];
    let kind = kind.to_ascii_lowercase();
    let kind = kind.strip_suffix(".metacontroller.k8s.io").unwrap_or(&kind);
    (known.contains(&kind) && !name.is_empty()).then_some(name)
}

/// What one parent's plan prints: with `--diff`, the diff of a parent that would change; a
/// failure is always named.
fn parent_text(p: &ParentPlan, diff: bool) -> Option<String> {
    match &p.outcome {
        Outcome::Planned(r) if diff && r.changes() => {
            Some(format!("=== {}\n{}", p.parent, kmeta::render::as_diff(r)))
        }
        Outcome::Failed(why) => Some(format!("=== {}\nhook failed: {why}\n", p.parent)),
        _ => None,
    }
}

/// The exit code of a plan: 2 when a parent's hook failed (the plan is incomplete), 1 when a
/// sync would write, else 0.
fn exit_code(summary: &Summary) -> i32 {
    if summary.failed_count > 0 {
        2
    } else {
        i32::from(summary.writes())
    }
}

/// `kmeta plan`: the exit code.
pub(crate) async fn plan(args: PlanArgs) -> i32 {
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

async fn run(args: PlanArgs) -> anyhow::Result<i32> {
    let Some(name) = controller_name(&args.target) else {
        anyhow::bail!(
            "{}: kmeta plan plans the parents of a CompositeController: give compositecontroller/NAME",
            args.target
        );
    };
    let config = match &args.kubeconfig {
        Some(path) => super::run::kube_config(Some(path)).await?,
        None => kube::Config::infer().await?,
    };
    let client = kube::Client::try_from(config)?;
    let opts = PlanOptions {
        controller: name.to_owned(),
        controller_file: args.controller,
        hook_url: args.hook_url,
        hook_objects: args.hook_objects,
        selector: args.selector,
        namespace: args.namespace,
        concurrency: args.concurrency,
        jsonnet_worker: None,
    };
    let (json, diff) = (args.output == PlanOutput::Json, args.diff);
    let mut parents = Vec::new();
    let summary = plan::plan(&client, &opts, |p| {
        if json {
            let mut v = plan::summary::parent_json(p);
            if let (true, Outcome::Planned(r)) = (diff, &p.outcome) {
                v["diff"] = kmeta::render::as_diff(r).into();
            }
            parents.push(v);
        } else if let Some(text) = parent_text(p, diff) {
            // streamed: a fleet's diffs are printed as they come, not held
            let _ = emit(text.as_bytes());
        }
    })
    .await?;
    let out = if json {
        let mut v = summary.json(name);
        v["plans"] = parents.into();
        format!("{v:#}\n")
    } else {
        summary.text(name)
    };
    emit(out.as_bytes())?;
    Ok(exit_code(&summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_a_composite_controller() {
        assert_eq!(controller_name("compositecontroller/web"), Some("web"));
        assert_eq!(controller_name("CompositeControllers/web"), Some("web"));
        assert_eq!(
            controller_name("compositecontroller.metacontroller.k8s.io/web"),
            Some("web")
        );
        assert_eq!(controller_name("decoratorcontroller/web"), None);
        assert_eq!(controller_name("compositecontroller/"), None);
        assert_eq!(controller_name("web"), None);
    }
}
