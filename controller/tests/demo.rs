//! `kmeta demo` end to end: the in-process API server, controller and hook, and the story it
//! prints.
//!
//! That the demo fails naming its step when it runs out of time is a unit test of the binary
//! (`controller/src/cli/demo/mod.rs`): its time bound is no flag.

use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_succeeds_and_tells_the_story() -> anyhow::Result<()> {
    // a generous bound: the demo runs in a few seconds, but CI machines are slow and shared
    let demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_kmeta"))
        .args(["demo", "--verbose"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), demo).await??;
    let text = String::from_utf8(out.stdout)?;
    println!("{text}");
    if !out.status.success() {
        let e = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!("demo failed: {e}\noutput so far:\n{text}");
    }
    for expected in [
        "1. ",
        "2. ",
        "3. ",
        "4. ",
        "istio-proxy",
        "nginx:1.28",
        "wrote nothing",
        "api server writes to deployments during the resyncs: 0",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    Ok(())
}
