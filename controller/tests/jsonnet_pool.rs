//! The Jsonnet worker pool with the `kmeta` binary as its worker (`kmeta jsonnet-worker`): a
//! program that never ends is stopped at its timeout, one that allocates without bound at the
//! memory limit, each by killing its worker, whose memory is then gone; the next evaluation gets a
//! fresh worker; a program running for ever holds one worker, not the others; and a runtime
//! never gets a worker another runtime spawned.

use std::time::{Duration, Instant};

use kmeta::hook::jsonnet::{Pool, PoolError, Sources, WorkerCommand};

fn worker() -> WorkerCommand {
    WorkerCommand {
        program: env!("CARGO_BIN_EXE_kmeta").into(),
        args: vec!["jsonnet-worker".into()],
    }
}

const QUICK: &str = "function(request) {n: request.n * 2}";
const ENDLESS: &str = "local f(x) = f(x + 1) tailstrict; function(request) f(0)";
const HUGE: &str = "function(request) std.length(std.repeat('x', 2000000000))";

async fn eval(pool: &Pool, program: &str, timeout: Duration) -> Result<String, PoolError> {
    let sources = Sources::inline(program);
    let digest = sources.digest();
    pool.evaluate(&digest, &sources, r#"{"n": 21}"#.into(), timeout, 1 << 20)
        .await
}

#[tokio::test]
async fn runaway_programs_are_killed_and_their_memory_returned() -> anyhow::Result<()> {
    // a pool of its own (the pools are per command and limits)
    let pool = Pool::shared(&worker(), 1, 192 * 1024 * 1024);
    assert_eq!(
        eval(&pool, QUICK, Duration::from_secs(10)).await?,
        "{\n   \"n\": 42\n}\n"
    );
    assert_eq!(
        pool.idle_workers().0,
        1,
        "the worker is kept for the next call"
    );

    let started = Instant::now();
    let e = eval(&pool, ENDLESS, Duration::from_secs(1))
        .await
        .expect_err("an endless program cannot answer");
    assert!(matches!(e, PoolError::Timeout(_)), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stopped at its timeout, not later: {:?}",
        started.elapsed()
    );
    assert_eq!(pool.idle_workers().0, 0, "the looping worker was killed");

    let e = eval(&pool, HUGE, Duration::from_secs(30))
        .await
        .expect_err("a 2 GB string is past the limit");
    assert!(matches!(e, PoolError::Memory { .. }), "{e}");
    assert_eq!(pool.idle_workers().0, 0, "the swollen worker was killed");

    // a fresh worker answers, small again
    assert_eq!(
        eval(&pool, QUICK, Duration::from_secs(10)).await?,
        "{\n   \"n\": 42\n}\n"
    );
    let (idle, rss) = pool.idle_workers();
    assert_eq!(idle, 1);
    assert!(
        rss < 64 * 1024 * 1024,
        "a fresh worker's memory: {rss} bytes"
    );
    Ok(())
}

#[tokio::test]
async fn an_endless_program_holds_one_worker_not_the_others() -> anyhow::Result<()> {
    let pool = Pool::shared(&worker(), 2, 256 * 1024 * 1024);
    let endless = eval(&pool, ENDLESS, Duration::from_secs(5));
    // both start at once: whichever takes a worker first, the other has the second one
    let quick = async {
        let started = Instant::now();
        let answer = eval(&pool, QUICK, Duration::from_secs(5)).await;
        (answer, started.elapsed())
    };
    let (endless, (quick, took)) = tokio::join!(endless, quick);
    assert!(matches!(endless, Err(PoolError::Timeout(_))), "{endless:?}");
    assert_eq!(quick?, "{\n   \"n\": 42\n}\n");
    assert!(
        took < Duration::from_secs(2),
        "the quick program waited for the endless one: {took:?}"
    );
    Ok(())
}

/// A worker's pipes belong to the tokio runtime that spawned it: a process running several
/// runtimes (a test binary, a library user) gets a pool per runtime, so one whose runtime has
/// shut down never hands its dead worker to another.
#[test]
fn a_runtime_never_gets_a_worker_of_one_that_shut_down() -> anyhow::Result<()> {
    let limits = (1, 160 * 1024 * 1024);
    let first = tokio::runtime::Runtime::new()?;
    first.block_on(async {
        let pool = Pool::shared(&worker(), limits.0, limits.1);
        eval(&pool, QUICK, Duration::from_secs(10)).await?;
        assert_eq!(pool.idle_workers().0, 1, "an idle worker kept");
        anyhow::Ok(())
    })?;
    drop(first);
    let second = tokio::runtime::Runtime::new()?;
    second.block_on(async {
        let pool = Pool::shared(&worker(), limits.0, limits.1);
        let answer = eval(&pool, QUICK, Duration::from_secs(10)).await?;
        assert_eq!(answer, "{\n   \"n\": 42\n}\n");
        anyhow::Ok(())
    })
}
