//! Jsonnet hooks (kmeta): `jsonnet: {source}` or `jsonnet: {configMapRef}` instead of a
//! webhook, evaluated with the semantics of Metacontroller's `jsonnetd` (`eval`) by supervised
//! worker processes (`pool`, `worker`), never on the async runtime's threads. The controller
//! reads and syntax-checks a program once when it builds the hook (`compile`); a change to a
//! ConfigMap holding one (`SourceWatch`) rebuilds the controller. Design:
//! `docs/design/jsonnet-hooks.md`.

#[doc(hidden)] // for the differential test against the reference Jsonnet
pub mod eval;
#[doc(hidden)] // for the worker pool's tests and bench
pub mod pool;
mod syntax;
pub(crate) mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use super::backend::{Answer, Call, HookBackend};
use super::error::HookError;
use crate::api::{JsonnetConfigMapRef, JsonnetHook};
use crate::ops::metrics::WorkerKill;
#[doc(hidden)]
pub use eval::Sources;
pub use pool::WorkerCommand;
#[doc(hidden)]
pub use pool::{Pool, PoolError};

/// Default bound of one evaluation, as a webhook's default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How Jsonnet hooks are evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonnetOptions {
    /// How to start a worker process; `None`: Jsonnet hooks are refused (a library user who
    /// wants them names a program that calls [`worker_main`]; the `kmeta` binary names itself).
    pub worker: Option<WorkerCommand>,
    /// At most this many evaluations at once (worker processes). Default 4.
    pub max_workers: usize,
    /// A worker whose resident memory passes this many bytes while evaluating is killed and
    /// the evaluation fails. Default 512 MiB.
    pub memory_limit_bytes: u64,
}

impl Default for JsonnetOptions {
    fn default() -> Self {
        JsonnetOptions {
            worker: None,
            max_workers: 4,
            memory_limit_bytes: 512 * 1024 * 1024,
        }
    }
}

/// Options whose worker is this executable run as `<exe> jsonnet-worker` (the `kmeta` binary's
/// setting); the defaults when the executable's path is unknown.
pub fn this_binary() -> JsonnetOptions {
    JsonnetOptions {
        worker: std::env::current_exe().ok().map(|program| WorkerCommand {
            program,
            args: vec!["jsonnet-worker".to_owned()],
        }),
        ..JsonnetOptions::default()
    }
}

/// The worker process's body (`kmeta jsonnet-worker`): serves evaluations on stdin/stdout until
/// stdin closes; returns the exit code.
pub fn worker_main() -> i32 {
    worker::main()
}

/// Why a Jsonnet hook could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JsonnetError {
    /// The `jsonnet` stanza is unusable.
    #[error("{0}")]
    Spec(String),
    /// The ConfigMap or its key could not be read.
    #[error("reading ConfigMap {namespace}/{name}: {message}")]
    ConfigMap {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What failed.
        message: String,
    },
    /// A file of the program does not parse.
    #[error("{0}")]
    Syntax(String),
}

/// A checked program version, ready to be sent to workers.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    /// The files.
    pub sources: Arc<Sources>,
    /// Its version ([`Sources::digest`]).
    pub digest: String,
    /// Where it came from, as shown in errors and metrics (`jsonnet:inline`,
    /// `jsonnet:configmap/<ns>/<name>/<key>`).
    pub shown: String,
    /// The bound of one evaluation.
    pub timeout: Duration,
}

/// Reads `hook`'s program (from its ConfigMap if it names one) and checks the syntax of every
/// Jsonnet file of it (the main file and keys ending in `.jsonnet` or `.libsonnet`) off the
/// async runtime's threads, so a syntax error stops the controller before any parent is synced.
pub(crate) async fn compile(
    client: &kube::Client,
    j: &JsonnetHook,
) -> Result<Program, JsonnetError> {
    let timeout = match &j.timeout {
        Some(t) => crate::duration::parse_go_duration(t)
            .map_err(|e| JsonnetError::Spec(format!("jsonnet.timeout: {e}")))?,
        None => DEFAULT_TIMEOUT,
    };
    let (sources, shown) = match (&j.source, &j.config_map_ref) {
        (Some(text), None) => (Sources::inline(text), "jsonnet:inline".to_owned()),
        (None, Some(r)) => (
            read_config_map(client, r).await?,
            format!("jsonnet:configmap/{}/{}/{}", r.namespace, r.name, r.key),
        ),
        _ => {
            return Err(JsonnetError::Spec(
                "jsonnet needs exactly one of source and configMapRef".into(),
            ));
        }
    };
    let checked = sources.clone();
    tokio::task::spawn_blocking(move || check_all(&checked))
        .await
        .map_err(|e| JsonnetError::Syntax(format!("checking the program: {e}")))??;
    let digest = sources.digest();
    Ok(Program {
        sources: Arc::new(sources),
        digest,
        shown,
        timeout,
    })
}

/// Checks the main file and every other `.jsonnet` / `.libsonnet` file.
fn check_all(sources: &Sources) -> Result<(), JsonnetError> {
    let names = sources
        .files
        .keys()
        .filter(|n| **n == sources.main || n.ends_with(".jsonnet") || n.ends_with(".libsonnet"));
    for name in names {
        let one = Sources {
            main: name.clone(),
            files: sources.files.clone(),
        };
        eval::check(&one).map_err(|e| JsonnetError::Syntax(e.to_string()))?;
    }
    Ok(())
}

async fn read_config_map(
    client: &kube::Client,
    r: &JsonnetConfigMapRef,
) -> Result<Sources, JsonnetError> {
    let err = |message: String| JsonnetError::ConfigMap {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        message,
    };
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &r.namespace);
    let cm = api.get(&r.name).await.map_err(|e| err(e.to_string()))?;
    let files: BTreeMap<String, String> = cm.data.unwrap_or_default();
    if !files.contains_key(&r.key) {
        return Err(err(format!("no key {:?}", r.key)));
    }
    Ok(Sources {
        main: r.key.clone(),
        files,
    })
}

/// Watches the ConfigMaps Jsonnet hooks are read from; [`SourceWatch::changed`] completes once
/// one of them changes (created, edited, deleted) after the watch started.
pub(crate) struct SourceWatch {
    changes: watch::Receiver<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for SourceWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How long [`SourceWatch::start`] waits for a ConfigMap's first list.
const FIRST_LIST: Duration = Duration::from_secs(10);

impl SourceWatch {
    /// Starts watching `refs` and waits (up to 10 s each) until each has been listed once, so a
    /// program read after this returns is either the version seen here or a later one that
    /// [`SourceWatch::changed`] reports.
    pub async fn start(client: &kube::Client, refs: &[JsonnetConfigMapRef]) -> SourceWatch {
        let (tx, changes) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let mut tasks = Vec::new();
        let mut listed = Vec::new();
        for r in refs {
            let (done, first) = tokio::sync::oneshot::channel();
            listed.push(first);
            tasks.push(tokio::spawn(watch_one(
                client.clone(),
                r.clone(),
                tx.clone(),
                done,
            )));
        }
        for first in listed {
            let _ = tokio::time::timeout(FIRST_LIST, first).await;
        }
        SourceWatch { changes, tasks }
    }

    /// Completes once a watched ConfigMap changed; never when none is watched.
    pub async fn changed(&mut self) {
        if self.tasks.is_empty() || self.changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The digest of what a program can read from a ConfigMap (`None`: it does not exist).
fn data_digest(cm: Option<&ConfigMap>) -> Option<String> {
    let cm = cm?;
    let sources = Sources {
        main: String::new(),
        files: cm.data.clone().unwrap_or_default(),
    };
    Some(sources.digest())
}

async fn watch_one(
    client: kube::Client,
    r: JsonnetConfigMapRef,
    tx: Arc<watch::Sender<u64>>,
    done: tokio::sync::oneshot::Sender<()>,
) {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &r.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", r.name));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut seen: Option<Option<String>> = None;
    let mut listing: Option<Option<String>> = None;
    let mut done = Some(done);
    while let Some(ev) = stream.next().await {
        let now = match ev {
            Ok(watcher::Event::Init) => {
                listing = Some(None);
                continue;
            }
            Ok(watcher::Event::InitApply(cm)) => {
                listing = Some(data_digest(Some(&cm)));
                continue;
            }
            Ok(watcher::Event::InitDone) => listing.take().unwrap_or(None),
            Ok(watcher::Event::Apply(cm)) => data_digest(Some(&cm)),
            Ok(watcher::Event::Delete(_)) => None,
            Err(e) => {
                tracing::debug!(configmap = %format!("{}/{}", r.namespace, r.name), error = %e, "jsonnet source watch");
                continue;
            }
        };
        match &seen {
            None => {
                seen = Some(now);
                if let Some(d) = done.take() {
                    let _ = d.send(());
                }
            }
            Some(before) if *before != now => {
                tracing::info!(configmap = %format!("{}/{}", r.namespace, r.name), "jsonnet hook source changed");
                seen = Some(now);
                tx.send_modify(|n| *n += 1);
            }
            Some(_) => {}
        }
    }
}

/// A Jsonnet hook ready to call: its program and the pool evaluating it.
pub(crate) struct Runner {
    program: Program,
    pool: Arc<Pool>,
    max_output: usize,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("program", &self.program.shown)
            .field("digest", &self.program.digest)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// Evaluates `program` with the workers `opts` describes, answers at most `max_output`
    /// bytes; refused when `opts` names no worker.
    pub fn new(
        program: Program,
        opts: &JsonnetOptions,
        max_output: usize,
    ) -> Result<Runner, JsonnetError> {
        let Some(cmd) = &opts.worker else {
            return Err(JsonnetError::Spec(
                "this kmeta has no Jsonnet worker configured (JsonnetOptions::worker)".into(),
            ));
        };
        let pool = Pool::shared(cmd, opts.max_workers, opts.memory_limit_bytes);
        Ok(Runner {
            program,
            pool,
            max_output,
        })
    }

    /// The Jsonnet hook `j` (the controller's `hook` hook): its program read (from its
    /// ConfigMap, if it names one) and syntax-checked now, evaluated by the worker processes
    /// `opts` describes, answering at most `max_output` bytes.
    pub async fn build(
        client: &kube::Client,
        hook: &'static str,
        j: &JsonnetHook,
        opts: &JsonnetOptions,
        max_output: usize,
    ) -> Result<Runner, HookError> {
        let cfg = |e: JsonnetError| HookError::Config {
            hook,
            message: format!("jsonnet: {e}"),
        };
        let program = compile(client, j).await.map_err(cfg)?;
        Runner::new(program, opts, max_output).map_err(cfg)
    }

    /// The answer to `request` (the hook request's JSON text), as the bytes a webhook would
    /// have sent.
    pub async fn evaluate(&self, request: String) -> Result<Vec<u8>, PoolError> {
        let p = &self.program;
        self.pool
            .evaluate(&p.digest, &p.sources, request, p.timeout, self.max_output)
            .await
            .map(String::into_bytes)
    }
}

/// A Jsonnet hook as a hook back end: the request's JSON text evaluated by a worker, bounded by
/// the program's own timeout (the pool kills the worker, and the kill is counted).
impl HookBackend for Runner {
    fn shown(&self) -> &str {
        &self.program.shown
    }

    fn timeout(&self) -> Option<Duration> {
        None
    }

    fn timed_out(&self, hook: &'static str, after: Duration) -> HookError {
        self.failed(hook, &PoolError::Timeout(after))
    }

    fn call<'a>(&'a self, call: Call<'a>) -> Answer<'a> {
        let hook = call.hook;
        let request = call
            .body
            .and_then(|b| b.into_text())
            .map_err(|e| HookError::Jsonnet {
                hook,
                source_name: self.program.shown.clone(),
                message: format!("encoding the request: {e}"),
                killed: None,
            });
        Box::pin(async move {
            let answer = self.evaluate(request?).await;
            answer.map_err(|e| self.failed(hook, &e))
        })
    }
}

impl Runner {
    /// Evaluation failure `e` as this hook's error, with the worker kill it caused.
    fn failed(&self, hook: &'static str, e: &PoolError) -> HookError {
        HookError::Jsonnet {
            hook,
            source_name: self.program.shown.clone(),
            message: e.to_string(),
            killed: match e {
                PoolError::Timeout(_) => Some(WorkerKill::Timeout),
                PoolError::Memory { .. } => Some(WorkerKill::Memory),
                _ => None,
            },
        }
    }
}
