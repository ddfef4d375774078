//! [`ServerState`]: the engine behind one lock, the notification of watchers on every change,
//! admission hooks, fault injection, request counters and the configuration.

use crate::engine::{Inner, Req, WriteOpts};
use crate::error::{ApiError, ApiResult};
use crate::hooks::{Admission, CounterStore, Faults, WriteLog};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Number of watch events retained for resuming watches; older resourceVersions get 410.
    /// Default 10_000 (the order of what kube-apiserver's watch cache keeps for a busy resource).
    pub watch_window: usize,
    /// Seed for uids, generated names and fault rates. Default 0.
    pub seed: u64,
    /// Interval of BOOKMARK events on watches that allow them. Default 60 s (kube-apiserver
    /// sends bookmarks about once a minute).
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no `timeoutSeconds`. Default 1800 s (the
    /// `--min-request-timeout` of kube-apiserver, which randomizes between 1x and 2x of it).
    pub default_watch_timeout: Duration,
    /// Namespaces created at start. Default `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease` (what every cluster has).
    pub namespaces: Vec<String>,
    /// Register [`crate::defaults::register`] at start. Default false: objects are stored as
    /// sent, and tests opt in to server-side defaulting.
    pub builtin_defaults: bool,
    /// How long a get or list with `resourceVersion=N` (not older than) waits for a
    /// resourceVersion the server has not reached before it answers 504 with a
    /// `ResourceVersionTooLarge` cause. Default 3 s (the watch cache's `blockTimeout`).
    pub rv_wait: Duration,
    /// Authentication and RBAC authorization (`None`, the default: every request is allowed,
    /// as without `--authorization-mode`). With it the bootstrap ClusterRoles and bindings are
    /// created at start and ClusterRoles are aggregated.
    pub auth: Option<crate::authn::AuthConfig>,
    /// Serve the `shardSelector` of LIST and WATCH (KEP-5866) at start; switch it at run time
    /// with [`ServerState::set_shard_selector`]. Default true. When off the parameter is
    /// ignored, as by a server without the feature.
    pub shard_selector: bool,
    /// Serve the watch-list (`sendInitialEvents` on a WATCH, kube-apiserver's `WatchList`
    /// feature gate) at start; switch it at run time with [`ServerState::set_watch_list`].
    /// Default true. When off a watch with `sendInitialEvents` gets 422 Invalid, as from
    /// kube-apiserver with the gate off.
    pub watch_list: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            watch_window: 10_000,
            seed: 0,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            namespaces: vec![
                "default".into(),
                "kube-system".into(),
                "kube-public".into(),
                "kube-node-lease".into(),
            ],
            builtin_defaults: false,
            rv_wait: Duration::from_secs(3),
            auth: None,
            shard_selector: true,
            watch_list: true,
        }
    }
}

/// Shared server state: storage, hooks, counters.
pub struct ServerState {
    inner: Mutex<Inner>,
    notify: tokio::sync::watch::Sender<u64>,
    /// Admission functions.
    pub admission: Admission,
    /// Fault injection.
    pub faults: Faults,
    pub(crate) counters: CounterStore,
    /// The opt-in log of mutating requests.
    pub write_log: WriteLog,
    /// Configuration.
    pub config: ServerConfig,
    /// `host:port` advertised in discovery (set once the listener is bound).
    pub(crate) address: Mutex<String>,
    /// Authentication state, when authorization is on.
    pub(crate) authn: Option<crate::authn::Authn>,
    /// The message of every 403 answered, in order (authorization on only).
    denials: Mutex<Vec<String>>,
    /// Whether `shardSelector` is served now ([`ServerConfig::shard_selector`] at start).
    shard_selector: AtomicBool,
    /// Whether the watch-list is served now ([`ServerConfig::watch_list`] at start).
    watch_list: AtomicBool,
}

impl ServerState {
    /// Build state with the built-in resources and the configured namespaces.
    pub fn new(config: ServerConfig) -> Arc<Self> {
        let mut inner = Inner::new(config.watch_window, config.seed);
        let adm = Admission::default();
        if let Some(def) = inner.registry.lookup("", "v1", "namespaces").cloned() {
            let req = Req {
                def,
                version: "v1".into(),
                ns: None,
                name: None,
                sub: None,
            };
            let opts = WriteOpts {
                field_manager: "kube-apiserver".into(),
                ..Default::default()
            };
            for ns in &config.namespaces {
                if let Err(e) =
                    inner.create(&adm, &req, json!({"metadata": {"name": ns}}), &opts, false)
                {
                    tracing::warn!("creating namespace {ns}: {e}");
                }
            }
        }
        if config.auth.is_some() {
            bootstrap_rbac(&mut inner, &adm);
        }
        let rv = inner.store.rv();
        if config.builtin_defaults {
            crate::defaults::register(&adm);
        }
        Arc::new(ServerState {
            inner: Mutex::new(inner),
            notify: tokio::sync::watch::channel(rv).0,
            admission: adm,
            faults: Faults::new(config.seed),
            counters: CounterStore::default(),
            write_log: WriteLog::default(),
            address: Mutex::new("127.0.0.1:0".into()),
            authn: config.auth.clone().map(crate::authn::Authn::new),
            denials: Mutex::new(Vec::new()),
            shard_selector: AtomicBool::new(config.shard_selector),
            watch_list: AtomicBool::new(config.watch_list),
            config,
        })
    }

    /// Serve (true) or ignore (false) the `shardSelector` of LIST and WATCH from the next
    /// request on (KEP-5866); open watches keep the selector they started with. Ignoring it is
    /// what a server without the feature does: every object, no `shardInfo` echo.
    pub fn set_shard_selector(&self, on: bool) {
        self.shard_selector.store(on, Ordering::SeqCst);
    }

    /// Whether the `shardSelector` of LIST and WATCH is served now.
    pub fn shard_selector_served(&self) -> bool {
        self.shard_selector.load(Ordering::SeqCst)
    }

    /// Serve (true) or refuse (false) the watch-list (`sendInitialEvents` on a WATCH) from the
    /// next request on, as kube-apiserver with its `WatchList` feature gate on or off.
    pub fn set_watch_list(&self, on: bool) {
        self.watch_list.store(on, Ordering::SeqCst);
    }

    /// Whether the watch-list is served now.
    pub fn watch_list_served(&self) -> bool {
        self.watch_list.load(Ordering::SeqCst)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run a mutation under the lock and wake watchers.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.lock();
        let before = g.store.rv();
        let out = f(&mut g);
        let after = g.store.rv();
        drop(g);
        if after != before {
            self.notify.send_replace(after);
        }
        out
    }

    /// [`Self::write`], also returning the `Warning` texts the write produced.
    pub(crate) fn write_warn<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> (T, Vec<String>) {
        self.write(|i| {
            i.warnings.clear();
            let out = f(i);
            (out, std::mem::take(&mut i.warnings))
        })
    }

    /// Snapshot of request counters.
    pub fn counters(&self) -> crate::hooks::Counters {
        self.counters.snapshot()
    }

    /// Reset request counters.
    pub fn reset_counters(&self) {
        self.counters.reset()
    }

    /// With authorization on, the message of every 403 Forbidden answered so far (refused by
    /// RBAC, impersonation, the escalation check or OwnerReferencesPermissionEnforcement), in
    /// order: what a least-privilege test checks is empty.
    pub fn denials(&self) -> Vec<String> {
        self.denials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Record a 403 answered with authorization on.
    pub(crate) fn record_denial(&self, message: &str) {
        if self.authn.is_some() {
            self.denials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(message.to_string());
        }
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().store.rv()
    }

    /// Wait (at most `config.rv_wait`) until the global resourceVersion reaches `rv`, like the
    /// watch cache's `waitUntilFreshAndBlock`; 504 `ResourceVersionTooLarge` if it does not.
    pub(crate) async fn reach_rv(&self, rv: u64) -> ApiResult<()> {
        let mut seen = self.notify.subscribe();
        let waited =
            tokio::time::timeout(self.config.rv_wait, seen.wait_for(|cur| *cur >= rv)).await;
        let current = self.resource_version();
        if matches!(waited, Ok(Ok(_))) || current >= rv {
            Ok(())
        } else {
            Err(ApiError::resource_version_too_large(
                rv,
                current,
                crate::engine::RV_TOO_LARGE_RETRY_SECONDS,
            ))
        }
    }

    /// Drop all retained watch events: watches resuming from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        self.lock().store.compact_all();
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.lock().store.len()
    }

    /// A receiver of the global resourceVersion after every change (watch streams wait on it).
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// The served resource `plural` of `group/version`, if any.
    pub(crate) fn lookup(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<crate::registry::ResourceDef> {
        self.lock().registry.lookup(group, version, plural).cloned()
    }

    pub(crate) fn registry_snapshot(&self) -> crate::registry::Registry {
        self.lock().registry.clone()
    }
}

/// Create the bootstrap RBAC policy ([`crate::rbac::bootstrap_policy`]) as kube-apiserver's
/// `rbac/bootstrap-roles` post-start hook does.
fn bootstrap_rbac(inner: &mut Inner, adm: &Admission) {
    let opts = WriteOpts {
        field_manager: "kube-apiserver".into(),
        ..Default::default()
    };
    for (plural, obj) in crate::rbac::bootstrap_policy() {
        let Some(def) = inner
            .registry
            .lookup(crate::rbac::RBAC_GROUP, "v1", plural)
            .cloned()
        else {
            tracing::warn!("bootstrapping RBAC: {plural} are not served");
            continue;
        };
        let req = Req {
            def,
            version: "v1".into(),
            ns: None,
            name: None,
            sub: None,
        };
        if let Err(e) = inner.create(adm, &req, obj, &opts, false) {
            tracing::warn!("bootstrapping RBAC {plural}: {e}");
        }
    }
}
