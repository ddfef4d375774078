//! `kmeta dev`: the offline loop for hook authors. Starts kmeta-apiserver on a local port, writes
//! a kubeconfig, applies the given manifests (CRDs first, then controllers, then everything
//! else), re-applies a file when it changes, and runs the controller against the server until
//! the shutdown token is cancelled. Hooks run wherever the author runs them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use kmeta_apiserver::TestServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cmd::progress::{self, Progress};
use crate::reconcile::core::ManagerConfig;

/// Field manager of the objects `kmeta dev` applies.
pub const FIELD_MANAGER: &str = "kmeta-dev";

/// Errors of `kmeta dev`.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// A manifest could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// File or directory.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A manifest is not valid YAML or not a Kubernetes object.
    #[error("{path}: {message}")]
    Manifest {
        /// File.
        path: PathBuf,
        /// What is wrong (document index and field).
        message: String,
    },
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
    /// An object was rejected.
    #[error("applying {what} from {path}: {message}")]
    Apply {
        /// `Kind namespace/name`.
        what: String,
        /// File.
        path: PathBuf,
        /// Server's answer.
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
    /// The program evaluating Jsonnet hooks. Default `None`: this executable run as
    /// `<exe> jsonnet-worker` (the `kmeta` binary).
    pub jsonnet_worker: Option<crate::hook::jsonnet::WorkerCommand>,
}

impl Default for DevOptions {
    fn default() -> Self {
        DevOptions {
            port: 0,
            kubeconfig_out: PathBuf::from("kmeta-dev.kubeconfig"),
            files: Vec::new(),
            poll_interval: Duration::from_secs(1),
            discovery_interval: Duration::from_secs(2),
            jsonnet_worker: None,
        }
    }
}

/// One object read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file it came from.
    pub path: PathBuf,
    /// The object.
    pub object: Value,
}

/// Apply order: namespaces and CRDs, then Metacontroller's controllers, then the rest.
fn phase(obj: &Value) -> u8 {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "Namespace" | "CustomResourceDefinition" => 0,
        "CompositeController" | "DecoratorController" => 1,
        _ => 2,
    }
}

/// Sorts manifests into apply phases, keeping file order within a phase.
pub fn order(mut manifests: Vec<Manifest>) -> Vec<Manifest> {
    manifests.sort_by_key(|m| phase(&m.object));
    manifests
}

/// The manifest files named by `paths` (directories expanded, sorted by name).
pub fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, DevError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| DevError::Read {
            path: p.clone(),
            source,
        })?;
        if !meta.is_dir() {
            out.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| DevError::Read {
            path: p.clone(),
            source,
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|f| {
                f.is_file()
                    && matches!(
                        f.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Parses the documents of one manifest file. Empty documents are skipped (and not counted in
/// error messages); every other document must be an object with `apiVersion`, `kind` and
/// `metadata.name` (or `generateName`).
pub fn parse_manifest(path: &Path, text: &str) -> Result<Vec<Manifest>, DevError> {
    let bad = |message: String| DevError::Manifest {
        path: path.to_owned(),
        message,
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| bad(crate::cmd::cli::yaml_error(&e)))?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let Some(obj) = doc.as_object() else {
            return Err(bad(format!("document {}: not a mapping", i + 1)));
        };
        for field in ["apiVersion", "kind"] {
            if !obj.get(field).is_some_and(Value::is_string) {
                return Err(bad(format!("document {}: {field} is missing", i + 1)));
            }
        }
        let meta = obj.get("metadata");
        let named = ["name", "generateName"]
            .iter()
            .any(|f| meta.and_then(|m| m.get(f)).is_some_and(Value::is_string));
        if !named {
            return Err(bad(format!("document {}: metadata.name is missing", i + 1)));
        }
        out.push(Manifest {
            path: path.to_owned(),
            object: doc,
        });
    }
    Ok(out)
}

/// Reads and parses every manifest under `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Manifest>, DevError> {
    let mut all = Vec::new();
    for file in manifest_files(paths)? {
        let text = std::fs::read_to_string(&file).map_err(|source| DevError::Read {
            path: file.clone(),
            source,
        })?;
        all.extend(parse_manifest(&file, &text)?);
    }
    Ok(all)
}

fn describe(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = s("/metadata/namespace");
    let name = match s("/metadata/name") {
        "" => s("/metadata/generateName"),
        n => n,
    };
    if ns.is_empty() {
        format!("{} {name}", s("/kind"))
    } else {
        format!("{} {ns}/{name}", s("/kind"))
    }
}

/// Applies manifests with server-side apply (as `kubectl apply --server-side`), in order; waits
/// for each CRD to be Established and refreshes discovery before the next phase.
pub async fn apply_all(
    client: &kube::Client,
    manifests: &[Manifest],
    out: &mut (dyn Write + Send),
) -> Result<(), DevError> {
    let discover = || async {
        Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| DevError::Server(e.to_string()))
    };
    let mut discovery = discover().await?;
    let mut last_phase = 0;
    for m in manifests {
        let p = phase(&m.object);
        if p != last_phase {
            discovery = discover().await?;
            last_phase = p;
        }
        apply_one(client, &discovery, m).await?;
        writeln!(
            out,
            "applied {} ({})",
            describe(&m.object),
            m.path.display()
        )?;
        if m.object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            let what = format!("{} to be Established", describe(&m.object));
            Progress::on_terminal()
                .during(&what, wait_established(client, &m.object))
                .await?;
        }
    }
    Ok(())
}

async fn apply_one(
    client: &kube::Client,
    discovery: &Discovery,
    m: &Manifest,
) -> Result<(), DevError> {
    let obj = &m.object;
    let what = describe(obj);
    let fail = |message: String| DevError::Apply {
        what: what.clone(),
        path: m.path.clone(),
        message,
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery.resolve_gvk(&gvk).ok_or_else(|| {
        let served: Vec<(String, String)> = discovery
            .groups()
            .flat_map(|g| {
                g.versions()
                    .flat_map(|v| g.versioned_resources(v))
                    .map(|(r, _)| (r.api_version, r.kind))
                    .collect::<Vec<_>>()
            })
            .collect();
        let hint = suggest_kind(&served, api_version, kind)
            .map(|s| format!("; did you mean {s}?"))
            .unwrap_or_default();
        fail(format!(
            "the server does not serve {kind} in {api_version}{hint}"
        ))
    })?;
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &ar),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let dynamic: DynamicObject =
        serde_json::from_value(obj.clone()).map_err(|e| fail(e.to_string()))?;
    match obj.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER)
                    .force()
                    .validation_strict(),
                &Patch::Apply(&dynamic),
            )
            .await
            .map(drop),
        None => api.create(&Default::default(), &dynamic).await.map(drop),
    }
    .map_err(|e| {
        fail(match e {
            // the server's message alone, not kube's debug rendering of the whole Status
            kube::Error::Api(status) => status.message.clone(),
            other => other.to_string(),
        })
    })
}

/// A served kind close to `kind` in `api_version` that was not found: the same name in other
/// case, or at most two edits away; else the same kind in another apiVersion. Shown as
/// `apiVersion Kind`.
pub fn suggest_kind(served: &[(String, String)], api_version: &str, kind: &str) -> Option<String> {
    let show = |(av, k): &(String, String)| format!("{av} {k}");
    let same_version = served.iter().filter(|(av, _)| av == api_version);
    let close = same_version
        .map(|s| {
            let d = if s.1.eq_ignore_ascii_case(kind) {
                0
            } else {
                strsim::levenshtein(&s.1.to_ascii_lowercase(), &kind.to_ascii_lowercase())
            };
            (d, s)
        })
        .filter(|(d, _)| *d <= 2)
        .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.1.cmp(&b.1.1)));
    if let Some((_, s)) = close {
        return Some(show(s));
    }
    let mut elsewhere: Vec<&(String, String)> = served.iter().filter(|(_, k)| k == kind).collect();
    elsewhere.sort();
    elsewhere.first().map(|s| show(s))
}

async fn wait_established(client: &kube::Client, crd: &Value) -> Result<(), DevError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let established = api
            .get_opt(name)
            .await
            .map_err(|e| DevError::Server(e.to_string()))?
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(DevError::Server(format!(
                "CustomResourceDefinition {name} not Established after 10s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Installs the CompositeController/DecoratorController/ControllerRevision CRDs.
pub async fn install_crds(client: &kube::Client) -> Result<(), DevError> {
    let crds = crate::api::crds::all().map_err(|e| DevError::Server(e.to_string()))?;
    let manifests: Vec<Manifest> = crds
        .into_iter()
        .map(|crd| {
            Ok(Manifest {
                path: PathBuf::from("<kmeta crds>"),
                object: serde_json::to_value(crd).map_err(|e| DevError::Server(e.to_string()))?,
            })
        })
        .collect::<Result<_, DevError>>()?;
    apply_all(client, &manifests, &mut std::io::sink()).await
}

/// A started dev environment (the server stops when this is dropped).
pub struct DevEnv {
    /// The API server.
    pub server: TestServer,
    /// The kubeconfig written for it.
    pub kubeconfig: PathBuf,
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
        Ok(manifests) => apply_all(&client, &manifests, out).await,
        Err(e) => Err(e),
    };
    if let Err(e) = applied {
        writeln!(out, "{}", report(&e))?;
    }
    Ok(DevEnv { server, kubeconfig })
}

/// How `dev` reports a manifest it could not read or apply (at start and on save alike).
pub fn report(e: &DevError) -> String {
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
            Ok(manifests) => apply_all(&client, &manifests, &mut stdout).await,
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
    let config = ManagerConfig {
        discovery_interval: opts.discovery_interval,
        hook: crate::hook::HookOptions {
            jsonnet: match &opts.jsonnet_worker {
                Some(w) => crate::hook::jsonnet::JsonnetOptions {
                    worker: Some(w.clone()),
                    ..crate::hook::jsonnet::JsonnetOptions::default()
                },
                None => crate::hook::jsonnet::this_binary(),
            },
            ..crate::hook::HookOptions::default()
        },
        ..ManagerConfig::default()
    };
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
    let manager = (config, crate::reconcile::Wiring::default());
    crate::cmd::run::run_manager(client, manager, stop, Duration::from_secs(10))
        .await
        .map_err(|e| DevError::Server(e.to_string()))?;
    env.server.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_document_files_parse_and_name_bad_documents() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: X\n";
        let e = parse_manifest(Path::new("f.yaml"), text).expect_err("second doc invalid");
        assert_eq!(e.to_string(), "f.yaml: document 2: apiVersion is missing");
        let ok = parse_manifest(
            Path::new("f.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {generateName: s-}\n",
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
    }

    #[test]
    fn a_kind_typo_or_a_wrong_api_version_gets_a_suggestion() {
        let served: Vec<(String, String)> = [
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "DaemonSet"),
        ]
        .iter()
        .map(|(a, k)| ((*a).to_owned(), (*k).to_owned()))
        .collect();
        let s = |av: &str, k: &str| suggest_kind(&served, av, k);
        assert_eq!(s("v1", "Configmap").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(s("v1", "ConfigMaps").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(
            s("apps/v1", "Deployemnt").as_deref(),
            Some("apps/v1 Deployment")
        );
        assert_eq!(s("apps/v1", "ConfigMap").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(s("v1", "Gadget"), None);
    }

    #[test]
    fn a_yaml_syntax_error_is_one_line_with_its_position() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n";
        let e = parse_manifest(Path::new("f.yaml"), text).expect_err("unclosed bracket");
        assert_eq!(
            e.to_string(),
            "f.yaml: unclosed bracket '{' at line 3, column 11"
        );
    }

    #[test]
    fn crds_first_then_controllers_then_the_rest() {
        let m = |kind: &str| Manifest {
            path: PathBuf::from(kind),
            object: json!({"kind": kind}),
        };
        let ordered = order(vec![
            m("WebApp"),
            m("CompositeController"),
            m("CustomResourceDefinition"),
            m("ConfigMap"),
            m("Namespace"),
        ]);
        let kinds: Vec<_> = ordered
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "Namespace",
                "CompositeController",
                "WebApp",
                "ConfigMap"
            ]
        );
    }

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
