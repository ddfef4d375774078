//! The shutdown signal of the long-running commands (`run`, `dev`, `trace --watch`).

use tokio_util::sync::CancellationToken;

/// A token cancelled by the first SIGINT or SIGTERM; a second signal exits at once.
pub(crate) fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_signal().await;
        tracing::info!("signal received: shutting down (again to exit at once)");
        t.cancel();
        wait_signal().await;
        std::process::exit(130);
    });
    token
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
