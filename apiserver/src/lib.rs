#![warn(missing_docs)]
//! kmeta-apiserver: an in-memory Kubernetes API server, faithful to the API conventions, for
//! testing controllers with real clients (`kube::Client`, `kubectl`).
//!
//! Start one with [`TestServer::start`] (plain HTTP on 127.0.0.1) or use [`router`] in-process.
//!
//! Layers, lowest first; a module imports only from its own layer or the ones below it:
//! data and rules (`error`, `cel`, `authn`, `rbac`, `store`, `registry`, `schema`, `selector`, `shard`, `patch`, `ssa`,
//! `convert`, `typed`, `proto`, `metadata`, `immutable`, `strategy`, `webhook`, `policy`, `hooks`, `defaults`), the API
//! semantics (`engine`), the shared server state (`state`), the HTTP layer (`http`), and the
//! test entry point (`test_server`, `tls`). See the crate README for where things live.

mod authn;
mod cel;
mod convert;
pub mod defaults;
mod engine;
mod error;
mod hooks;
mod http;
mod immutable;
mod metadata;
mod patch;
mod policy;
mod proto;
mod rbac;
mod registry;
pub mod schema;
pub mod selector;
mod shard;
mod ssa;
mod state;
mod store;
mod strategy;
mod test_server;
mod tls;
mod typed;
mod webhook;

pub use authn::{ANONYMOUS_USER, AuthConfig, AuthnError, UserInfo, parse_token_file};
pub use error::ApiError;
pub use hooks::{
    Admission, AdmissionError, CounterRow, Counters, FaultSpec, Faults, HookId, Operation,
    WriteLog, WriteRecord,
};
pub use http::{COUNTERS_PATH, router};
pub use state::{ServerConfig, ServerState};
pub use test_server::{
    ADMIN_USER, Error, TestServer, TestServerBuilder, kubeconfig_yaml, kubeconfig_yaml_with_token,
};
pub use tls::TlsError;
