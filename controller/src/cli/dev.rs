//! `kmeta dev`: the offline loop for hook authors. Starts kmeta-apiserver on a local port, writes
//! a kubeconfig, applies the given manifests (CRDs first, then controllers, then everything
//! else), re-applies a file when it changes, and runs the controller against the server until
//! the shutdown token is cancelled. Hooks run wherever the author runs them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use kmeta_apiserver::TestServer;
use kube::api::{Api, DynamicObject};
use tokio_util::sync::CancellationToken;

use crate::cli::progress::{self, Progress};
use kmeta::ManagerConfig;
use kmeta::manifest::{
    ManifestError, ShowWait, Wait, apply_all_showing, install_crds, load, manifest_files, order,
};

/// Errors of `kmeta dev`.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// A manifest could not be read or applied.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The API server could not start or be written to.
    #[error("api server: {0}")]
    Server(String),
    /// The API server could not listen on its port.
    #[error("starting the API server on 127.0.0.1:{port}: {message}")]
    Start {
        /// The port asked for (`--port`; 0 is any free one).
        port: u16,
        /// Cause.
        message: String,
    },
    /// Writing to the terminal failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

/// Settings of `kmeta dev`.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// Port of the API server. Default 0: a free port.
    pub port: u16,
    /// Where the kubeconfig is written. Default `./kmeta-dev.kubeconfig`.
    pub kubeconfig_out: PathBuf,
    /// Manifest files or directories (`*.yaml`, `*.yml`, `*.json`, not recursive).
    pub files: Vec<PathBuf>,
    /// How often files are checked for changes. Default 1 s.
    pub poll_interval: Duration,
    /// Discovery refresh of the controller. Default 2 s (a new CRD is served almost at once).
    pub discovery_interval: Duration,
}

impl Default for DevOptions {
    fn default() -> Self {
        DevOptions {
            port: 0,
            kubeconfig_out: PathBuf::from("kmeta-dev.kubeconfig"),
            files: Vec::new(),
            poll_interval: Duration::from_secs(1),
            discovery_interval: Duration::from_secs(2),
        }
    }
}

/// Shows a wait of [`apply_all_showing`] as a progress line on a terminal.
struct OnTerminal;

impl ShowWait for OnTerminal {
    fn during<'a>(&'a self, what: String, wait: Wait<'a>) -> Wait<'a> {
        Box::pin(async move { Progress::on_terminal().during(&what, wait).await })
    }
}

/// A started dev environment (the server stops when this is dropped).
pub struct DevEnv {
    /// The API server.
    pub server: TestServer,
}

/// Starts the server, writes the kubeconfig, installs kmeta's CRDs and applies the manifests.
pub async fn prepare(opts: &DevOptions, out: &mut (dyn Write + Send)) -> Result<DevEnv, DevError> {
    // a path that does not exist cannot be watched: that stops `dev`; a bad manifest in it is
    // reported, and applied once it is fixed and saved, as later saves are
    manifest_files(&opts.files)?;
    let loaded = load(&opts.files).map(order);
    let server = TestServer::builder()
        .port(opts.port)
        .start()
        .await
        .map_err(|e| DevError::Start {
            port: opts.port,
            message: match e {
                kmeta_apiserver::Error::Io(io) => io.to_string(),
                other => other.to_string(),
            },
        })?;
    server
        .write_kubeconfig(&opts.kubeconfig_out)
        .map_err(|e| DevError::Server(e.to_string()))?;
    let kubeconfig = opts.kubeconfig_out.clone();
    writeln!(out, "kmeta dev: API server at {}", server.url())?;
    writeln!(out, "  kubeconfig written to {}", kubeconfig.display())?;
    writeln!(
        out,
        "  try: kubectl --kubeconfig {} get compositecontrollers,crds",
        kubeconfig.display()
    )?;
    if opts.files.is_empty() {
        writeln!(
            out,
            "  no manifests given: kubectl --kubeconfig {} apply -f FILE, or restart with -f FILE|DIR",
            kubeconfig.display()
        )?;
    }
    let client = server.client();
    install_crds(&client).await?;
    let applied = match loaded {
        Ok(manifests) => apply_all_showing(&client, &manifests, out, &OnTerminal).await,
        Err(e) => Err(e),
    };
    if let Err(e) = applied {
        writeln!(out, "{}", report(&e))?;
    }
    Ok(DevEnv { server })
}

/// How `dev` reports a manifest it could not read or apply (at start and on save alike).
pub fn report(e: &dyn std::fmt::Display) -> String {
    format!("kmeta dev: {e} (fix it and save the file to apply it)")
}

fn mtimes(paths: &[PathBuf]) -> BTreeMap<PathBuf, SystemTime> {
    manifest_files(paths)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|f| {
            let t = std::fs::metadata(&f).and_then(|m| m.modified()).ok()?;
            Some((f, t))
        })
        .collect()
}

/// The files whose modification time changed or that appeared (a pure comparison).
pub fn changed(
    before: &BTreeMap<PathBuf, SystemTime>,
    after: &BTreeMap<PathBuf, SystemTime>,
) -> Vec<PathBuf> {
    after
        .iter()
        .filter(|(f, t)| before.get(*f) != Some(*t))
        .map(|(f, _)| f.clone())
        .collect()
}

/// Re-applies manifests whose files change, until `stop`. Errors are printed, not fatal: the
/// author fixes the file and saves again.
async fn watch_files(
    client: kube::Client,
    files: Vec<PathBuf>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut seen = mtimes(&files);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let now = mtimes(&files);
        let changed = changed(&seen, &now);
        seen = now;
        if changed.is_empty() {
            continue;
        }
        let result = load(&changed).map(order);
        let mut stdout = std::io::stdout();
        let applied = match result {
            Ok(manifests) => apply_all_showing(&client, &manifests, &mut stdout, &OnTerminal).await,
            Err(e) => Err(e),
        };
        if let Err(e) = applied {
            eprintln!("{}", report(&e));
        }
    }
}

/// The names of the CompositeControllers and DecoratorControllers, and of those a `Started`
/// event says are running.
async fn controllers_and_started(
    client: &kube::Client,
) -> Result<(Vec<String>, Vec<String>), kube::Error> {
    use k8s_openapi::api::core::v1::Event;
    let mut all = Vec::new();
    for (kind, plural) in [
        ("CompositeController", "compositecontrollers"),
        ("DecoratorController", "decoratorcontrollers"),
    ] {
        let gvk = kube::core::GroupVersionKind::gvk("metacontroller.k8s.io", "v1alpha1", kind);
        let ar = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        all.extend(
            api.list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name),
        );
    }
    let events: Api<Event> = Api::all(client.clone());
    let started = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Started"))
        .filter(|e| {
            matches!(
                e.involved_object.kind.as_deref(),
                Some("CompositeController" | "DecoratorController")
            )
        })
        .filter_map(|e| e.involved_object.name)
        .collect();
    Ok((all, started))
}

/// On a terminal, names the controllers that have not started yet until they all have (a
/// controller whose resources are missing retries at each discovery interval), for at most a
/// minute.
async fn show_controllers_starting(
    client: kube::Client,
    progress: Progress,
    stop: CancellationToken,
) {
    const AT_MOST: Duration = Duration::from_secs(60);
    if !progress.is_enabled() {
        return;
    }
    let since = tokio::time::Instant::now();
    while since.elapsed() < AT_MOST && !stop.is_cancelled() {
        let Ok((all, started)) = controllers_and_started(&client).await else {
            break;
        };
        let waiting = progress::not_started(&all, &started);
        if waiting.is_empty() {
            break;
        }
        progress.show(&progress::controllers_text(&waiting), since);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(progress::TICK) => {}
        }
    }
    progress.clear();
}

/// Runs `kmeta dev` until `stop`.
pub async fn run(
    opts: DevOptions,
    stop: CancellationToken,
    out: &mut (dyn Write + Send),
) -> Result<(), DevError> {
    let env = prepare(&opts, out).await?;
    let client = env.server.client();
    tokio::spawn(watch_files(
        client.clone(),
        opts.files.clone(),
        opts.poll_interval,
        stop.clone(),
    ));
    let config = ManagerConfig::default()
        .discovery_interval(opts.discovery_interval)
        .hook(kmeta::hook::HookOptions {
            // Jsonnet hooks are evaluated by this binary run as `kmeta jsonnet-worker`
            jsonnet: kmeta::hook::jsonnet::this_binary(),
            ..kmeta::hook::HookOptions::default()
        });
    writeln!(
        out,
        "controller running; edit and save a manifest to re-apply it; Ctrl-C to stop"
    )?;
    out.flush()?;
    let progress = Progress::on_terminal();
    tokio::spawn(show_controllers_starting(
        client.clone(),
        progress,
        stop.clone(),
    ));
    let manager = (config, kmeta::reconcile::Wiring::default());
    crate::cli::run::run_manager(client, manager, stop, Duration::from_secs(10))
        .await
        .map_err(|e| DevError::Server(e.to_string()))?;
    env.server.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_files_are_new_or_touched() {
        let t0 = SystemTime::UNIX_EPOCH;
        let t1 = t0 + Duration::from_secs(1);
        let before = BTreeMap::from([(PathBuf::from("a"), t0), (PathBuf::from("b"), t0)]);
        let after = BTreeMap::from([
            (PathBuf::from("a"), t0),
            (PathBuf::from("b"), t1),
            (PathBuf::from("c"), t0),
        ]);
        assert_eq!(
            changed(&before, &after),
            [PathBuf::from("b"), PathBuf::from("c")]
        );
    }
}
