//! Helpers shared by the binary's integration tests.

use std::time::{Duration, Instant};

/// How long a test waits for a condition before failing.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Polls `f` every 50 ms until it holds, failing with "timed out waiting for {what}" after
/// [`TIMEOUT`].
pub async fn wait_for<F, Fut>(what: &str, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + TIMEOUT;
    while !f().await {
        if Instant::now() > deadline {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
