//! One running CompositeController: its resolved resources, shared watches, hooks, work queue,
//! event handlers (parent, child, related → queue) and bounded workers.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::api::{ChildUpdateMethod, CompositeController};
use crate::cache::{Change, Informer, Informers, ObjKey, obj_key};
use crate::decide::{self, ChildType, controller_ref, meta_str};
use crate::hook::{HookClient, HookError, HookOptions};
use crate::metrics::Metrics;
use crate::queue::Queue;
use crate::ratelimit::{RateLimit, TokenBucket};
use crate::resources::{Resolved, ResourceError, Resources};
use crate::selector;
use crate::sync::{self, SyncError};
use crate::wire::RelatedResourceRule;

/// Keys the event spam filter remembers (client-go's spam filter LRU holds 4096).
pub const EVENT_FILTER_KEYS: usize = 4096;

/// Settings of the manager and every controller it runs.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Concurrent syncs per CompositeController. Default 5 (Metacontroller `--workers`).
    pub workers: usize,
    /// Discovery refresh period. Default 30 s (Metacontroller `--discovery-interval`).
    pub discovery_interval: Duration,
    /// Every watch relists this often (None: never). Default 30 min (Metacontroller
    /// `--cache-flush-interval`).
    pub cache_flush_interval: Option<Duration>,
    /// Hook transport settings (16 MiB response cap by default).
    pub hook: HookOptions,
    /// Customize response cache lifetime. Default 20 min (Metacontroller's customize cache TTL).
    pub customize_cache_ttl: Duration,
    /// Event reporter name. Default `metacontroller` (Metacontroller's component name, so event
    /// filters carry over).
    pub reporter: String,
    /// Prometheus registry shared with the `/metrics` endpoint. Default: a fresh registry.
    pub metrics: Arc<Metrics>,
    /// Set once every running controller's watches have synced (the `/readyz` signal).
    /// Default: a fresh flag, false.
    pub ready: Arc<AtomicBool>,
    /// Only CompositeControllers whose labels match this selector are run (Metacontroller
    /// `--target-label-selector`). Default: none, every CompositeController.
    pub target_label_selector: Option<String>,
    /// Events per second for one (object, reason) once its burst is spent. Default 1/300 (one
    /// per 5 minutes: Metacontroller `--events-qps`, client-go's event spam filter).
    pub events_qps: f64,
    /// Events one (object, reason) may emit before `events_qps` applies. Default 25
    /// (Metacontroller `--events-burst`).
    pub events_burst: u32,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            workers: 5,
            discovery_interval: Duration::from_secs(30),
            cache_flush_interval: Some(Duration::from_secs(30 * 60)),
            hook: HookOptions::default(),
            customize_cache_ttl: Duration::from_secs(20 * 60),
            reporter: "metacontroller".into(),
            metrics: Arc::new(Metrics::default()),
            ready: Arc::new(AtomicBool::new(false)),
            target_label_selector: None,
            events_qps: 1.0 / 300.0,
            events_burst: 25,
        }
    }
}

/// Shared by every controller of a manager.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Settings.
    pub config: ManagerConfig,
    /// Discovered resources.
    pub resources: Resources,
    /// Shared watches.
    pub informers: Informers,
    /// Event recorder.
    pub recorder: Recorder,
    /// Event spam filter: one token bucket per (object, reason).
    event_limits: Mutex<HashMap<(String, String), TokenBucket>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client`.
    pub fn new(client: kube::Client, config: ManagerConfig) -> Arc<Context> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: config.reporter.clone(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Arc::new(Context {
            informers: Informers::new(client.clone(), config.cache_flush_interval),
            resources: Resources::default(),
            client,
            config,
            recorder,
            event_limits: Mutex::new(HashMap::new()),
        })
    }

    /// Whether an event with `reason` about `obj` passes the spam filter (`events_qps` /
    /// `events_burst` per object and reason). The filter remembers at most
    /// [`EVENT_FILTER_KEYS`] keys and starts afresh beyond that.
    fn event_allowed(&self, obj: &Value, reason: &str) -> bool {
        let limits = RateLimit {
            qps: self.config.events_qps,
            burst: self.config.events_burst,
        };
        if !limits.enabled() {
            return true;
        }
        let object = match meta_str(obj, "uid") {
            "" => format!("{}/{}", meta_str(obj, "namespace"), meta_str(obj, "name")),
            uid => uid.to_owned(),
        };
        let now = tokio::time::Instant::now();
        let Ok(mut buckets) = self.event_limits.lock() else {
            return true;
        };
        if buckets.len() >= EVENT_FILTER_KEYS {
            buckets.clear();
        }
        let bucket = buckets
            .entry((object, reason.to_owned()))
            .or_insert_with(|| TokenBucket::new(limits, now));
        // a dropped event reserves nothing
        bucket.allow(now)
    }

    /// Publishes an event about `obj` (errors are logged, never fatal), unless the spam filter
    /// drops it (counted in the dropped-events metric).
    pub async fn event(&self, obj: &Value, warning: bool, reason: &str, note: String) {
        if !self.event_allowed(obj, reason) {
            self.config.metrics.event_dropped();
            tracing::debug!(reason, "event dropped by the spam filter");
            return;
        }
        let reference = ObjectReference {
            api_version: obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(str::to_owned),
            kind: obj.get("kind").and_then(Value::as_str).map(str::to_owned),
            name: Some(meta_str(obj, "name").to_owned()),
            namespace: Some(meta_str(obj, "namespace").to_owned()).filter(|s| !s.is_empty()),
            uid: Some(meta_str(obj, "uid").to_owned()).filter(|s| !s.is_empty()),
            ..Default::default()
        };
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let ev = KEvent {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(reason, error = %e, "publishing event failed");
        }
    }
}

/// A declared child type, resolved and watched.
pub struct ChildRule {
    /// The resolved resource.
    pub resolved: Resolved,
    /// The shared watch.
    pub informer: Arc<Informer>,
    /// Update method.
    pub method: ChildUpdateMethod,
    /// dynapply options with the list rules of this type.
    pub options: dynapply::Options,
}

/// Why a controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A resource is not served (yet).
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// A hook is misconfigured or its credentials are unreadable.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// The parent resource has no status subresource.
    #[error(
        "parent resource {resource} in {api_version} has no status subresource; kmeta (like Metacontroller) requires one, enable `subresources.status` in the CRD"
    )]
    NoStatusSubresource {
        /// apiVersion.
        api_version: String,
        /// Plural.
        resource: String,
    },
    /// No sync hook.
    #[error("spec.hooks.sync is required")]
    NoSyncHook,
}

/// Cached customize answers: parent UID → (generation, rules, fetched at).
type CustomizeCache = HashMap<String, (i64, Vec<RelatedResourceRule>, Instant)>;

/// A running CompositeController.
pub struct ParentController {
    /// Shared context.
    pub ctx: Arc<Context>,
    /// The CC's name.
    pub name: String,
    /// The CC as sent in hook requests (`controller`).
    pub cc_json: Value,
    /// The CC.
    pub cc: CompositeController,
    /// The parent resource.
    pub parent: Resolved,
    /// Parent watch.
    pub parents: Arc<Informer>,
    /// Child rules by `<Kind>.<apiVersion>`.
    pub children: HashMap<String, ChildRule>,
    /// Declared child types for validation.
    pub declared: HashMap<String, ChildType>,
    /// Declared group keys in spec order.
    pub child_keys: Vec<String>,
    /// Hooks.
    pub sync_hook: HookClient,
    /// Finalize hook.
    pub finalize_hook: Option<HookClient>,
    /// Customize hook.
    pub customize_hook: Option<HookClient>,
    /// Work queue of parent keys.
    pub queue: Queue<ObjKey>,
    /// Customize cache.
    pub customize_cache: Mutex<CustomizeCache>,
    /// Related watches by watch key.
    pub related: Mutex<HashMap<String, Arc<Informer>>>,
    /// Child updates the API server answered without writing, not to be sent again.
    pub futile_updates: Mutex<decide::FutileUpdates>,
}

impl std::fmt::Debug for ParentController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentController")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

async fn list_rules(ctx: &Context, r: &Resolved) -> dynapply::ListRules {
    let builtin = dynapply::ListRules::builtin(&r.api.api_version, &r.api.kind);
    // CRD groups always contain a dot; built-in groups have none or end in `.k8s.io`
    if !r.api.group.contains('.') || r.api.group.ends_with(".k8s.io") {
        return builtin;
    }
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(ctx.client.clone());
    match crds
        .get_opt(&format!("{}.{}", r.api.plural, r.api.group))
        .await
    {
        Ok(Some(crd)) => match serde_json::to_value(crd)
            .map_err(|e| e.to_string())
            .and_then(|v| {
                dynapply::ListRules::from_crd(&v, Some(&r.api.version)).map_err(|e| e.to_string())
            }) {
            Ok(from_schema) => builtin.merge(from_schema),
            Err(e) => {
                tracing::warn!(resource = %r.watch_key(), error = %e, "ignoring crd list markers");
                builtin
            }
        },
        _ => builtin,
    }
}

impl ParentController {
    /// Resolves resources, starts (or shares) watches and builds hook clients.
    pub async fn build(
        ctx: Arc<Context>,
        cc: CompositeController,
    ) -> Result<ParentController, BuildError> {
        let name = cc.metadata.name.clone().unwrap_or_default();
        let spec = &cc.spec;
        let parent = ctx.resources.get(
            &spec.parent_resource.api_version,
            &spec.parent_resource.resource,
        )?;
        if !parent.has_status {
            return Err(BuildError::NoStatusSubresource {
                api_version: spec.parent_resource.api_version.clone(),
                resource: spec.parent_resource.resource.clone(),
            });
        }
        let mut children = HashMap::new();
        let mut declared = HashMap::new();
        let mut child_keys = Vec::new();
        for rule in spec.child_rules() {
            let r = ctx.resources.get(&rule.api_version, &rule.resource)?;
            let method = rule
                .update_strategy
                .as_ref()
                .and_then(|s| s.method)
                .unwrap_or_default();
            let key = r.group_key();
            declared.insert(
                key.clone(),
                ChildType {
                    namespaced: r.namespaced,
                    method,
                },
            );
            let options = dynapply::Options {
                rules: list_rules(&ctx, &r).await,
                ..dynapply::Options::default()
            };
            child_keys.push(key.clone());
            children.insert(
                key,
                ChildRule {
                    informer: ctx.informers.get(&r),
                    resolved: r,
                    method,
                    options,
                },
            );
        }
        let eps = spec.endpoint_configs.as_deref().unwrap_or_default();
        let opts = &ctx.config.hook;
        let metrics = &ctx.config.metrics;
        let sync_hook = match spec.sync_hook() {
            Some(h) => HookClient::new(&ctx.client, "sync", h, eps, opts)
                .await?
                .with_metrics(metrics.clone(), &name),
            None => return Err(BuildError::NoSyncHook),
        };
        let finalize_hook = match spec.finalize_hook() {
            Some(h) => Some(
                HookClient::new(&ctx.client, "finalize", h, eps, opts)
                    .await?
                    .with_metrics(metrics.clone(), &name),
            ),
            None => None,
        };
        let customize_hook = match spec.customize_hook() {
            Some(h) => Some(
                HookClient::new(&ctx.client, "customize", h, eps, opts)
                    .await?
                    .with_metrics(metrics.clone(), &name),
            ),
            None => None,
        };
        let mut cc_json = serde_json::to_value(&cc).unwrap_or(Value::Null);
        if let Some(m) = cc_json.as_object_mut() {
            m.remove("status");
        }
        Ok(ParentController {
            parents: ctx.informers.get(&parent),
            ctx,
            name,
            cc_json,
            cc,
            parent,
            children,
            declared,
            child_keys,
            sync_hook,
            finalize_hook,
            customize_hook,
            queue: Queue::default(),
            customize_cache: Mutex::new(HashMap::new()),
            related: Mutex::new(HashMap::new()),
            futile_updates: Mutex::new(decide::FutileUpdates::default()),
        })
    }

    /// Is this parent selected by `parentResource.labelSelector`?
    pub fn selected(&self, parent: &Value) -> Result<bool, SyncError> {
        match &self.cc.spec.parent_resource.label_selector {
            None => Ok(true),
            Some(sel) => Ok(selector::matches(sel, &selector::labels_of(parent))?),
        }
    }

    /// Enqueues the parent that controls `child`, or every parent whose selector matches an
    /// orphan.
    fn enqueue_for_child(&self, child: &Value) {
        if let Some(r) = controller_ref(child) {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
            let av = r
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let group = av.rsplit_once('/').map_or("", |(g, _)| g);
            if kind != self.parent.api.kind || group != self.parent.api.group {
                return;
            }
            let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            let ns = if self.parent.namespaced {
                meta_str(child, "namespace")
            } else {
                ""
            };
            let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
            if let Some(p) = self.parents.get(ns, name)
                && meta_str(&p, "uid") == uid
            {
                self.queue.add((ns.to_owned(), name.to_owned()));
            }
            return;
        }
        let labels = selector::labels_of(child);
        let generate = self.cc.spec.generate_selector.unwrap_or(false);
        for p in self.parents.list() {
            if self.parent.namespaced && meta_str(&p, "namespace") != meta_str(child, "namespace") {
                continue;
            }
            let Ok(sel) = decide::parent_selector(&p, generate) else {
                continue;
            };
            if selector::matches(&sel, &labels).unwrap_or(false) {
                self.queue.add(obj_key(&p));
            }
        }
    }

    fn on_parent_change(&self, change: &Change) {
        match change {
            Change::Applied { old, new } => {
                let ignore = self
                    .cc
                    .spec
                    .parent_resource
                    .ignore_status_changes
                    .unwrap_or(false);
                if ignore
                    && let Some(old) = old
                    && !decide::parent_update_relevant(old, new)
                {
                    return;
                }
                self.queue.add(obj_key(new));
            }
            Change::Deleted(old) => {
                let key = obj_key(old);
                self.queue.forget(&key);
                self.ctx
                    .config
                    .metrics
                    .parent_gone(&self.name, meta_str(old, "uid"));
                if let Ok(mut c) = self.customize_cache.lock() {
                    c.remove(meta_str(old, "uid"));
                }
            }
        }
    }

    fn on_child_change(&self, change: &Change) {
        match change {
            Change::Applied { old, new } => {
                if old.as_ref().is_some_and(|o| {
                    meta_str(o, "resourceVersion") == meta_str(new, "resourceVersion")
                }) {
                    return;
                }
                if let Some(o) = old
                    && controller_ref(o).map(|r| r.get("uid"))
                        != controller_ref(new).map(|r| r.get("uid"))
                {
                    self.enqueue_for_child(o);
                }
                self.enqueue_for_child(new);
            }
            Change::Deleted(old) => self.enqueue_for_child(old),
        }
    }

    /// A related object changed: enqueue parents whose cached rules name its resource.
    pub fn on_related_change(&self, r: &Resolved) {
        let uids: Vec<String> = match self.customize_cache.lock() {
            Ok(c) => c
                .iter()
                .filter(|(_, (_, rules, _))| {
                    rules
                        .iter()
                        .any(|x| x.api_version == r.api.api_version && x.resource == r.api.plural)
                })
                .map(|(uid, _)| uid.clone())
                .collect(),
            Err(_) => return,
        };
        for p in self.parents.list() {
            if uids.iter().any(|u| u == meta_str(&p, "uid")) {
                self.queue.add(obj_key(&p));
            }
        }
    }

    fn enqueue_all(&self) {
        for p in self.parents.list() {
            self.queue.add(obj_key(&p));
        }
    }

    /// Waits until the parent watch and every child watch have listed once.
    pub async fn wait_synced(&self) {
        self.parents.wait_synced().await;
        for rule in self.children.values() {
            rule.informer.wait_synced().await;
        }
    }

    /// Runs event handlers and workers until `stop` is cancelled; then stops taking work and
    /// returns once the syncs in flight have finished (the caller bounds how long it waits).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut handlers = tokio::task::JoinSet::new();
        {
            let pc = self.clone();
            let mut rx = pc.parents.subscribe();
            handlers.spawn(async move {
                pc.parents.wait_synced().await;
                pc.enqueue_all();
                loop {
                    match rx.recv().await {
                        Ok(c) => pc.on_parent_change(&c),
                        Err(RecvError::Lagged(_)) => pc.enqueue_all(),
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
        for rule in self.children.values() {
            let pc = self.clone();
            let mut rx = rule.informer.subscribe();
            handlers.spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(c) => pc.on_child_change(&c),
                        Err(RecvError::Lagged(_)) => pc.enqueue_all(),
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
        if let Some(secs) = self.cc.spec.resync_period_seconds {
            let pc = self.clone();
            let period = Duration::from_secs(u64::from(secs.max(1).unsigned_abs()));
            handlers.spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    pc.enqueue_all();
                }
            });
        }
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.ctx.config.workers.max(1) {
            let pc = self.clone();
            workers.spawn(async move {
                while let Some((key, waited)) = pc.queue.next_timed().await {
                    let metrics = &pc.ctx.config.metrics;
                    metrics.queue_wait(&pc.name, waited);
                    pc.process(&key).await;
                    pc.queue.done(&key);
                    metrics.queue_depth(&pc.name, pc.queue.len());
                }
            });
        }
        stop.cancelled().await;
        self.queue.shutdown();
        handlers.abort_all();
        while handlers.join_next().await.is_some() {}
        while workers.join_next().await.is_some() {}
        self.ctx.config.metrics.controller_stopped(&self.name);
    }

    /// One sync of one parent, in a `sync` span carrying the controller and the parent (events
    /// inside it do not repeat them).
    async fn process(self: &Arc<Self>, key: &ObjKey) {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "sync",
            controller = %self.name,
            parent = %ParentName(key)
        );
        self.process_in_span(key).instrument(span).await;
    }

    async fn process_in_span(self: &Arc<Self>, key: &ObjKey) {
        let _ = tokio::time::timeout(Duration::from_secs(30), self.parents.wait_synced()).await;
        let started = Instant::now();
        let result = sync::sync_parent(self, key).await;
        let label = match &result {
            Ok(_) => "ok",
            Err(
                SyncError::RelatedNotSynced(_) | SyncError::Hook(HookError::TooManyRequests { .. }),
            ) => "retry",
            Err(_) => "error",
        };
        self.ctx
            .config
            .metrics
            .reconcile(&self.name, label, started.elapsed());
        match result {
            Ok(after) => {
                self.queue.forget(key);
                if let Some(d) = after {
                    self.queue.add_after(key.clone(), d);
                }
            }
            Err(SyncError::Hook(HookError::TooManyRequests { retry_after, .. })) => {
                tracing::info!(?retry_after, "hook asked to retry later");
                self.queue.add_after(key.clone(), retry_after);
            }
            Err(SyncError::RelatedNotSynced(r)) => {
                tracing::debug!(related = %r, "waiting for related watch");
                self.queue.add_rate_limited(key.clone());
            }
            Err(e) => {
                let delay = self.queue.add_rate_limited(key.clone());
                tracing::warn!(error = %e, ?delay, "sync failed");
                if let Some(p) = self.parents.get(&key.0, &key.1) {
                    self.ctx
                        .event(&p, true, "SyncError", format!("Sync error: {e}"))
                        .await;
                    if let Err(err) = sync::report_failure(self, &p, &e.to_string()).await {
                        tracing::warn!(error = %err, "writing the SyncError condition failed");
                    }
                }
            }
        }
    }
}

/// A parent's key as logged: `namespace/name`, or `name` for a cluster-scoped parent.
struct ParentName<'a>(&'a ObjKey);

impl std::fmt::Display for ParentName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.0.is_empty() {
            f.write_str(&self.0.1)
        } else {
            write!(f, "{}/{}", self.0.0, self.0.1)
        }
    }
}
