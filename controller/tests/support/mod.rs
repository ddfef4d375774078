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

/// A test that cannot run on this machine (a program it needs is missing): under CI
/// (`KMETA_CI=1`, which `.ci/run` sets) that is a failure naming `reason`; elsewhere the test
/// prints `SKIPPED: {reason}` and passes. Such a test's name ends in `_or_skips_without_…`, so
/// a local run shows that it may not have run.
#[allow(dead_code)] // not every test file has a test that may skip
pub fn skip_or_fail(reason: &str) -> anyhow::Result<()> {
    if std::env::var("KMETA_CI").is_ok_and(|v| v == "1") {
        anyhow::bail!("required under CI (KMETA_CI=1) but cannot run: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    Ok(())
}

/// Whether `program` is an executable file in one of the directories of `$PATH`.
#[allow(dead_code)] // not every test file has a test that may skip
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}
