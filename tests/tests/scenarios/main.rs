//! End-to-end scenarios: kmeta against kmeta-apiserver over real HTTP (or a real cluster with
//! `KMETA_TEST_KUBECONFIG`), with real HTTP hooks (and, for the scenarios run `each_hook_mode!`, in-process hooks). One binary,
//! one module per area.

#![allow(clippy::unwrap_used)]

/// Runs a scenario written as `async fn name(mode: HookMode) -> anyhow::Result<()>` once per
/// [`kmeta_tests::HookMode`], as tests `name::webhook` and `name::in_process`: the webhook path
/// and the in-process hooks (`kmeta::embed`) must pass the same scenario.
macro_rules! each_hook_mode {
    ($name:ident) => {
        mod $name {
            use kmeta_tests::HookMode;

            #[tokio::test]
            async fn webhook() -> anyhow::Result<()> {
                super::$name(HookMode::Webhook).await
            }

            #[tokio::test]
            async fn in_process() -> anyhow::Result<()> {
                super::$name(HookMode::InProcess).await
            }
        }
    };
}

mod admission;
mod basic;
mod caches;
mod contract;
mod decorator;
mod failures;
mod fairness;
mod flush;
mod handoff;
mod history;
mod impersonation;
mod jsonnet;
mod kro;
mod kro_examples;
mod lifecycle;
mod list_rules;
mod metacontroller;
mod plan;
mod quiet;
mod rollout;
mod schema;
mod sidecar;
mod ssa;
mod ssa_omit;
mod steer;
mod transport;
mod triggers;
mod watch_list;
