//! `kmeta demo` end to end: the in-process API server, controller and hook, and the story it
//! prints.

use std::time::Duration;

use kmeta::cmd::demo::{DemoOptions, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_succeeds_and_tells_the_story() -> anyhow::Result<()> {
    let mut out: Vec<u8> = Vec::new();
    // a generous bound: the demo runs in a few seconds, but CI machines are slow and shared
    let opts = DemoOptions {
        timeout: Duration::from_secs(120),
        verbose: true,
    };
    let result = run(opts, &mut out).await;
    let text = String::from_utf8(out)?;
    println!("{text}");
    if let Err(e) = result {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_fails_loudly_when_it_runs_out_of_time() -> anyhow::Result<()> {
    let mut out: Vec<u8> = Vec::new();
    let opts = DemoOptions {
        timeout: Duration::from_millis(1),
        verbose: false,
    };
    let Err(e) = run(opts, &mut out).await else {
        anyhow::bail!("a demo bounded by 1 ms cannot succeed");
    };
    let msg = e.to_string();
    assert!(msg.starts_with("step 0 (setup)"), "unexpected error: {msg}");
    Ok(())
}
