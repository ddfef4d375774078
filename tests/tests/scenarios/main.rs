//! End-to-end scenarios: kmeta against kmeta-apiserver over real HTTP (or a real cluster with
//! `KMETA_TEST_KUBECONFIG`), with real HTTP hooks. One binary, one module per area.

#![allow(clippy::unwrap_used)]

mod basic;
mod caches;
mod decorator;
mod failures;
mod fairness;
mod lifecycle;
mod metacontroller;
mod rollout;
mod schema;
mod sidecar;
mod ssa;
mod transport;
