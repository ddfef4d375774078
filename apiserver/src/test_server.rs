//! [`TestServer`]: an API server on a free port of 127.0.0.1 with a `kube::Client` for it, as
//! tests start one.

use crate::authn::{AuthConfig, UserInfo, random_token};
use crate::hooks::{Admission, Counters, Faults, WriteLog};
use crate::http::router;
use crate::state::{ServerConfig, ServerState};
use crate::tls::Pki;
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
    /// The serving certificate could not be made.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A client certificate was asked for while the server serves plain HTTP.
    #[error("the server was started without TLS (TestServerBuilder::tls)")]
    TlsOff,
    /// A token was asked for while the server has no authentication.
    #[error("the server was started without authentication (TestServerBuilder::rbac)")]
    AuthOff,
    /// A token was asked for a ServiceAccount that does not exist.
    #[error("no ServiceAccount {0}")]
    NoServiceAccount(String),
}

/// The superuser of a server with authorization on (in `system:masters`).
pub const ADMIN_USER: &str = "kmeta-admin";

fn client_for(url: &str, token: Option<&str>, ca: Option<&[u8]>) -> Result<kube::Client, Error> {
    let uri: http::Uri = url.parse().map_err(|_| Error::Url(url.to_string()))?;
    let mut config = kube::Config::new(uri);
    config.root_cert = ca.map(|der| vec![der.to_vec()]);
    if let Some(t) = token {
        config.auth_info.token = Some(t.to_string().into());
    }
    kube::Client::try_from(config).map_err(|source| Error::Client {
        url: url.to_string(),
        source,
    })
}

/// Builder for [`TestServer`].
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    config: ServerConfig,
    port: u16,
    tls: bool,
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
    /// Authentication and RBAC authorization with the default [`AuthConfig`] (anonymous
    /// requests allowed as `system:anonymous`, OwnerReferencesPermissionEnforcement on); off
    /// by default. [`TestServer::client`] and the kubeconfig then authenticate as a member of
    /// `system:masters`, which may do everything.
    pub fn rbac(mut self, on: bool) -> Self {
        self.config.auth = on.then(|| self.config.auth.take().unwrap_or_default());
        self
    }
    /// Authentication and RBAC authorization with this configuration (static tokens, …).
    pub fn auth(mut self, auth: AuthConfig) -> Self {
        self.config.auth = Some(auth);
        self
    }
    /// Serve HTTPS with a certificate of a CA generated at start (its certificate in the
    /// kubeconfig and trusted by [`TestServer::client`]); plain HTTP by default. kubectl sends
    /// credentials (`--token`, `--as`) only over HTTPS.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }
    /// Serve the `shardSelector` of LIST and WATCH (KEP-5866, server-side sharding) from the
    /// start (true, the default) or ignore it like a server without the feature (false). It can
    /// be switched later with [`TestServer::set_shard_selector`].
    pub fn shard_selector(mut self, on: bool) -> Self {
        self.config.shard_selector = on;
        self
    }
    /// Serve the watch-list (`sendInitialEvents` on a WATCH) from the start (true, the default)
    /// or refuse it with 422 like kube-apiserver with its `WatchList` feature gate off (false).
    /// It can be switched later with [`TestServer::set_watch_list`].
    pub fn watch_list(mut self, on: bool) -> Self {
        self.config.watch_list = on;
        self
    }
    /// Replace the whole configuration.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }
    /// Bind and serve.
    pub async fn start(mut self) -> Result<TestServer, Error> {
        let admin_token = self.config.auth.as_mut().map(|auth| {
            let token = random_token(&Default::default(), "kmeta-admin.", 0);
            auth.tokens.push((
                token.clone(),
                UserInfo::new(ADMIN_USER, &[crate::rbac::SUPERUSER_GROUP]),
            ));
            token
        });
        let state = ServerState::new(self.config);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await?;
        let addr = listener.local_addr()?;
        if let Ok(mut a) = state.address.lock() {
            *a = addr.to_string();
        }
        let pki = if self.tls {
            Some(Pki::generate()?)
        } else {
            None
        };
        let url = format!("{}://{addr}", if pki.is_some() { "https" } else { "http" });
        let ca_der = pki.as_ref().map(|p| p.ca_der.clone());
        let client = client_for(&url, admin_token.as_deref(), ca_der.as_deref())?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(state.clone());
        let st = state.clone();
        let tls_config = pki.as_ref().map(|p| p.server_config.clone());
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
                st.faults.close_watches();
            };
            if let Some(config) = tls_config {
                crate::tls::serve(listener, config, app, shutdown).await;
            } else if let Err(e) = axum::serve(listener, app)
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
            url,
            ca: pki.map(Arc::new),
            admin_token,
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
    url: String,
    /// With TLS: the CA.
    ca: Option<Arc<Pki>>,
    admin_token: Option<String>,
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

    /// `http://127.0.0.1:PORT` (`https://` with [`TestServerBuilder::tls`]).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// With TLS, the PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca.as_ref().map(|p| p.ca_pem.clone())
    }

    /// With TLS, a client certificate signed by the server's CA naming `user` (subject CN) in
    /// `group` (the O), as kube-apiserver's `--client-ca-file` authenticates them: the PEM of
    /// the certificate and of its key.
    pub fn client_certificate(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<(String, String), Error> {
        let pki = self.ca.as_ref().ok_or(Error::TlsOff)?;
        Ok(pki.client_certificate(user, group)?)
    }

    /// With TLS, a client authenticating with a client certificate for `user` in `group`.
    pub fn client_with_certificate(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<kube::Client, Error> {
        use base64::Engine;
        let (cert, key) = self.client_certificate(user, group)?;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let uri: http::Uri = self.url.parse().map_err(|_| Error::Url(self.url.clone()))?;
        let mut config = kube::Config::new(uri);
        config.root_cert = self.ca.as_ref().map(|p| vec![p.ca_der.clone()]);
        config.auth_info.client_certificate_data = Some(b64(&cert));
        config.auth_info.client_key_data = Some(b64(&key).into());
        kube::Client::try_from(config).map_err(|source| Error::Client {
            url: self.url.clone(),
            source,
        })
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Kubeconfig YAML text for this server (context `kmeta`, namespace `default`; with
    /// authorization on, the superuser's token).
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_yaml_for(self.admin_token.as_deref())
    }

    /// Kubeconfig YAML text whose user sends `token` (none: no credentials).
    pub fn kubeconfig_yaml_for(&self, token: Option<&str>) -> String {
        let mut yaml = match token {
            Some(t) => kubeconfig_yaml_with_token(&self.url(), t),
            None => kubeconfig_yaml(&self.url()),
        };
        if let Some(pki) = &self.ca {
            yaml = yaml.replacen(
                "    server: ",
                &format!(
                    "    certificate-authority-data: {}\n    server: ",
                    pki.ca_data()
                ),
                1,
            );
        }
        yaml
    }

    /// With authorization on, the bearer token of the superuser [`ADMIN_USER`] (in
    /// `system:masters`) that [`Self::client`] and the kubeconfig use.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// A client sending this bearer token (default namespace `default`).
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, Error> {
        client_for(
            &self.url(),
            Some(token),
            self.ca.as_ref().map(|p| p.ca_der.as_slice()),
        )
    }

    /// A new token of ServiceAccount `ns/name`, as a TokenRequest gives
    /// (`kubectl create token`): it authenticates as `system:serviceaccount:<ns>:<name>` while
    /// that ServiceAccount exists. Errors when authorization is off or there is no such
    /// ServiceAccount.
    pub fn service_account_token(&self, ns: &str, name: &str) -> Result<String, Error> {
        let Some(authn) = &self.state.authn else {
            return Err(Error::AuthOff);
        };
        let key = crate::store::Key {
            res: Arc::from("/serviceaccounts"),
            ns: ns.into(),
            name: name.into(),
        };
        let uid = self
            .state
            .lock()
            .store
            .get(&key)
            .and_then(|sa| crate::store::uid_of(&sa).map(str::to_string))
            .ok_or_else(|| Error::NoServiceAccount(format!("{ns}/{name}")))?;
        Ok(authn.issue(ns, name, &uid))
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

    /// The log of mutating requests (off until [`WriteLog::enable`]).
    pub fn write_log(&self) -> &WriteLog {
        &self.state.write_log
    }

    /// Snapshot of request counters.
    pub fn counters(&self) -> Counters {
        self.state.counters()
    }

    /// Reset request counters.
    pub fn reset_counters(&self) {
        self.state.reset_counters()
    }

    /// Serve (true) or ignore (false) the `shardSelector` of LIST and WATCH from the next
    /// request on ([`ServerState::set_shard_selector`]): off, the server answers as one without
    /// KEP-5866, every object and no `metadata.shardInfo`.
    pub fn set_shard_selector(&self, on: bool) {
        self.state.set_shard_selector(on);
    }

    /// Serve or refuse the watch-list from the next request on
    /// ([`ServerState::set_watch_list`]).
    pub fn set_watch_list(&self, on: bool) {
        self.state.set_watch_list(on);
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

/// [`kubeconfig_yaml`] whose user sends a bearer token.
pub fn kubeconfig_yaml_with_token(url: &str, token: &str) -> String {
    kubeconfig_yaml(url).replace(
        "- name: kmeta\n  user: {}\n",
        &format!("- name: kmeta\n  user:\n    token: {token}\n"),
    )
}

/// Kubeconfig YAML pointing at `url` with context `kmeta` and namespace `default`.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kmeta\n  cluster:\n    server: {url}\ncontexts:\n- name: kmeta\n  context:\n    cluster: kmeta\n    user: kmeta\n    namespace: default\ncurrent-context: kmeta\nusers:\n- name: kmeta\n  user: {{}}\npreferences: {{}}\n"
    )
}
