//! `kmeta demo`: the whole story in one process, in well under 30 seconds.
//!
//! Starts an in-memory API server ([`kmeta_apiserver::TestServer`]), the controller and a
//! built-in sync hook (an HTTP server on 127.0.0.1), then shows step by step, with the relevant
//! YAML, what kmeta's dynamic apply guarantees: a `WebApp` parent owns a Deployment built from
//! its embedded pod template; a (simulated) mutating admission webhook injects a sidecar into the
//! Deployment when it is created; an image update of the parent reaches the Deployment and the
//! sidecar survives it; and a resync with nothing new writes nothing.
//!
//! Every wait polls a condition against a deadline; a step that does not hold ends the demo with
//! a [`DemoError`] naming the step, what was expected and what was found. The demo prints only
//! its own story; the controller logs through `tracing`, and installing a subscriber (or not) is
//! up to the caller.
//!
//! The parts: `hook` (the demo's sync hook and its HTTP server), `fixtures` (the CRD, the
//! CompositeController, the parent and the simulated admission webhook) and `story` (the steps
//! and their waits).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

mod fixtures;
mod hook;
mod story;

use story::Demo;

/// Stops a spawned task when dropped (the demo may be cut short by its timeout).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Settings of [`run`].
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Bound on the whole demo. Default 30 s: the demo is meant to finish well under 30 s;
    /// past this bound something is wrong and the demo fails instead of hanging.
    pub timeout: Duration,
    /// Print extra details (server and hook URLs, hook call counts, resourceVersions). Default
    /// false: a newcomer sees only the story.
    pub verbose: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            timeout: Duration::from_secs(30),
            verbose: false,
        }
    }
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The in-process API server did not start.
    #[error("starting the in-memory api server: {0}")]
    Server(#[from] kmeta_apiserver::Error),
    /// The built-in hook server could not bind.
    #[error("starting the demo's sync hook on 127.0.0.1: {0}")]
    Hook(#[source] std::io::Error),
    /// kmeta's own CRDs could not be built.
    #[error("building kmeta's crds: {0}")]
    Crds(#[from] kmeta::api::crds::CrdError),
    /// An API call the demo makes itself failed.
    #[error("step {step}: {action}: {}", kmeta::ops::client::describe_api_error(.source))]
    Api {
        /// The step.
        step: &'static str,
        /// What the demo was doing.
        action: String,
        /// Cause.
        source: kube::Error,
    },
    /// A step did not hold.
    #[error("step {step}: expected {expected}, found {found}")]
    Step {
        /// The step.
        step: &'static str,
        /// What should have held.
        expected: String,
        /// What was there instead (when the deadline passed).
        found: String,
    },
    /// The controller stopped with an error, or did not stop.
    #[error("controller: {0}")]
    Controller(String),
    /// The whole demo took longer than its bound.
    #[error("step {step}: the demo did not finish within {timeout:?}")]
    Timeout {
        /// The step the demo was in.
        step: &'static str,
        /// The bound ([`DemoOptions::timeout`]).
        timeout: Duration,
    },
    /// Writing the demo's output failed.
    #[error("writing the demo output: {0}")]
    Output(#[source] std::io::Error),
}

/// The parent's group.
pub const GROUP: &str = "apps.example.com";
/// The parent's apiVersion.
pub const PARENT_API_VERSION: &str = "apps.example.com/v1";
/// The container the hook manages inside the embedded pod template.
pub const APP_CONTAINER: &str = "app";
/// The container the simulated admission webhook injects.
pub const SIDECAR: &str = "istio-proxy";
/// The label tying the Deployment's pods to their WebApp.
pub const APP_LABEL: &str = "apps.example.com/webapp";

const NAMESPACE: &str = "demo";
const SETUP: &str = "0 (setup)";
const PARENT: &str = "shop";
const CONTROLLER: &str = "webapp-controller";
const TOUCH: &str = "demo.kmeta.dev/touch";
const POLL: Duration = Duration::from_millis(50);
/// Bound on each wait (within the whole demo's bound): every step takes well under a second on
/// a laptop; 10 s leaves room for a loaded CI machine.
const STEP_WAIT: Duration = Duration::from_secs(10);
/// Bound on stopping the controller and the servers at the end.
const SHUTDOWN: Duration = Duration::from_secs(10);
/// Step 1 of the tour.
const S1: &str = "1 (sidecar injected at creation)";
/// Step 2 of the tour.
const S2: &str = "2 (image update keeps the sidecar)";
/// Step 3 of the tour.
const S3: &str = "3 (a resync writes nothing)";
/// Step 4 of the tour.
const S4: &str = "4 (shutdown)";

/// Runs the demo, printing its story to `out`.
pub async fn run(
    opts: DemoOptions,
    out: &mut (dyn std::io::Write + Send),
) -> Result<(), DemoError> {
    let timeout = opts.timeout;
    let deadline = Instant::now() + timeout;
    let progress = Arc::new(Mutex::new(SETUP));
    match tokio::time::timeout(timeout, Demo::run(&opts, deadline, progress.clone(), out)).await {
        Ok(result) => result,
        Err(_) => Err(DemoError::Timeout {
            step: progress.lock().map_or(SETUP, |s| *s),
            timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DemoOptions, run};

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
}
