//! `kmeta-apiserver`: serve the in-memory Kubernetes API until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;

/// The allocator of the binary (chosen by measurement: docs/design/sync-path-costs.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "kmeta-apiserver",
    about = "In-memory Kubernetes API server for testing controllers"
)]
struct Args {
    /// Port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write a kubeconfig for the server to this file.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Retained watch events (older resourceVersions get 410 Gone).
    #[arg(long, default_value_t = 10_000)]
    watch_window: usize,
    /// Seed for uids and generated names.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Default built-in workload fields (imagePullPolicy, protocol, replicas, ...) like a real cluster.
    #[arg(long)]
    builtin_defaults: bool,
    /// `AlwaysAllow` (default: no authentication, every request allowed) or `RBAC`
    /// (authentication, impersonation checks and RBAC authorization as kube-apiserver's
    /// `--authorization-mode=RBAC`; the kubeconfig written then holds a `system:masters`
    /// token).
    #[arg(long, default_value = "AlwaysAllow", value_parser = ["AlwaysAllow", "RBAC"])]
    authorization_mode: String,
    /// Static bearer tokens, as kube-apiserver's: `token,user,uid[,"group1,group2"]` per line
    /// (with `--authorization-mode=RBAC`).
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Requests without credentials are `system:anonymous` (true, as kube-apiserver) or 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Serve HTTPS with a certificate of a CA generated at start (written into the
    /// kubeconfig); kubectl sends credentials only over HTTPS.
    #[arg(long)]
    tls: bool,
    /// Serve the `shardSelector` parameter of LIST and WATCH (KEP-5866 server-side sharding,
    /// the `ShardedListAndWatch` feature of kube-apiserver). `false` ignores it as a server
    /// without the feature does: every object, no `metadata.shardInfo` echo.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    shard_selector: bool,
    /// Serve the watch-list (`sendInitialEvents=true` on a WATCH, kube-apiserver's `WatchList`
    /// feature gate). `false` answers such a watch 422 Invalid, as kube-apiserver with the
    /// gate off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_list: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut builder = kmeta_apiserver::TestServer::builder();
    if args.authorization_mode == "RBAC" {
        let mut auth = kmeta_apiserver::AuthConfig {
            anonymous: args.anonymous_auth,
            ..Default::default()
        };
        if let Some(path) = &args.token_auth_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading token file {}", path.display()))?;
            auth = auth
                .with_token_file(&text)
                .with_context(|| format!("token file {}", path.display()))?;
        }
        builder = builder.auth(auth);
    } else if args.token_auth_file.is_some() {
        anyhow::bail!("--token-auth-file needs --authorization-mode=RBAC");
    }
    let server = builder
        .tls(args.tls)
        .port(args.port)
        .watch_window(args.watch_window)
        .seed(args.seed)
        .builtin_defaults(args.builtin_defaults)
        .shard_selector(args.shard_selector)
        .watch_list(args.watch_list)
        .start()
        .await
        .context("starting apiserver")?;
    if let Some(path) = &args.kubeconfig_out {
        server
            .write_kubeconfig(path)
            .with_context(|| format!("writing kubeconfig to {}", path.display()))?;
    }
    println!("{}", server.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}
