//! [`TestServer`]: an API server on a free port of 127.0.0.1 with a `kube::Client` for it, as
//! tests start one.

use crate::hooks::{Admission, Counters, Faults};
use crate::http::router;
use crate::state::{ServerConfig, ServerState};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Errors starting or using a [`TestServer`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving failed.
    #[error("apiserver i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Building the kube client failed.
    #[error("building kube client for {url}: {source}")]
    Client {
        /// Server URL.
        url: String,
        /// Cause.
        source: kube::Error,
    },
    /// The server URL could not be parsed.
    #[error("invalid server url {0}")]
    Url(String),
    /// The kubeconfig could not be built.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
}

/// Builder for [`TestServer`].
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    config: ServerConfig,
    port: u16,
}

impl TestServerBuilder {
    /// Number of retained watch events (older resourceVersions get 410 Gone).
    pub fn watch_window(mut self, n: usize) -> Self {
        self.config.watch_window = n;
        self
    }
    /// Seed for uids, generated names and fault rates.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }
    /// Interval between BOOKMARK events on watches that allow them.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.config.bookmark_interval = d;
        self
    }
    /// Default built-in workload fields (imagePullPolicy, protocol, replicas, ...) like a real
    /// kube-apiserver, via mutating admission ([`crate::defaults::register`]). Off by default.
    pub fn builtin_defaults(mut self, on: bool) -> Self {
        self.config.builtin_defaults = on;
        self
    }
    /// Port to bind on 127.0.0.1 (0 = any free port, the default).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }
    /// Replace the whole configuration.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }
    /// Bind and serve.
    pub async fn start(self) -> Result<TestServer, Error> {
        let state = ServerState::new(self.config);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await?;
        let addr = listener.local_addr()?;
        if let Ok(mut a) = state.address.lock() {
            *a = addr.to_string();
        }
        let url = format!("http://{addr}");
        let uri: http::Uri = url.parse().map_err(|_| Error::Url(url.clone()))?;
        let client =
            kube::Client::try_from(kube::Config::new(uri)).map_err(|source| Error::Client {
                url: url.clone(),
                source,
            })?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(state.clone());
        let st = state.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
                st.faults.close_watches();
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!("apiserver stopped: {e}");
            }
        });
        Ok(TestServer {
            state,
            addr,
            client,
            shutdown: Some(tx),
            task: Some(task),
        })
    }
}

/// A running in-memory API server, serving plain HTTP on 127.0.0.1 until it is shut down or
/// dropped.
///
/// A test starts one, talks to it with the `kube::Client` it hands out (default namespace
/// `default`), and may inspect it through [`TestServer::counters`], [`TestServer::state`],
/// [`TestServer::admission`] and [`TestServer::faults`]:
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = kmeta_apiserver::TestServer::start().await?;
/// let configmaps: Api<ConfigMap> = Api::default_namespaced(server.client());
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// configmaps.create(&PostParams::default(), &cm).await?;
/// let stored = configmaps.get("settings").await?;
/// assert!(stored.metadata.uid.is_some());
/// assert_eq!(server.counters().count("create", "configmaps"), 1);
/// server.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub struct TestServer {
    state: Arc<ServerState>,
    addr: SocketAddr,
    client: kube::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Start with defaults on a free port.
    pub async fn start() -> Result<TestServer, Error> {
        Self::builder().start().await
    }

    /// Builder with options.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// A client for this server (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Kubeconfig YAML text for this server (context `kmeta`, namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    /// Kubeconfig for this server.
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        // the text is generated here and always parses; fall back to an empty config otherwise
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml()).unwrap_or_default()
    }

    /// Write the kubeconfig to a file.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.kubeconfig_yaml())?;
        Ok(())
    }

    /// Admission hooks.
    pub fn admission(&self) -> &Admission {
        &self.state.admission
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// Snapshot of request counters.
    pub fn counters(&self) -> Counters {
        self.state.counters()
    }

    /// Reset request counters.
    pub fn reset_counters(&self) {
        self.state.reset_counters()
    }

    /// Shared state (storage inspection, compaction).
    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// Stop serving and wait for the server task.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.state.faults.close_watches();
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Kubeconfig YAML pointing at `url` with context `kmeta` and namespace `default`.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kmeta\n  cluster:\n    server: {url}\ncontexts:\n- name: kmeta\n  context:\n    cluster: kmeta\n    user: kmeta\n    namespace: default\ncurrent-context: kmeta\nusers:\n- name: kmeta\n  user: {{}}\npreferences: {{}}\n"
    )
}
