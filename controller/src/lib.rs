//! kmeta: Metacontroller-compatible lambda controllers for Kubernetes.
//!
//! A `CompositeController` names a parent resource, child resources and webhooks; kmeta watches
//! parents and children, POSTs each parent with its observed children to the sync hook, and
//! applies the desired children it returns with [`dynapply`].
//!
//! The crate is layered; a module only imports from its own layer or the ones below it
//! (`tests/tests/module_graph.rs` checks this):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | 0 | `object`, [`duration`], [`api`] | object accessors, Go durations, the CRD types |
//! | 1 | `runtime` | shared watches (cache), work queue, discovery, API calls, selectors |
//! | 2 | [`ops`] | metrics, API clients and their rate limits, logging, health probes, events, the API server's OpenAPI v3 documents (list rules) |
//! | 3 | [`coord`] | coordinating replicas: leader election, the write fence, sharding, the work clients they check, and the [`coord::scope::WorkScope`] seam the reconcile core asks |
//! | 4 | [`hook`] | the hook client and its back ends behind one trait (webhook: transport, TLS, auth, response cache; in-process Rust; Jsonnet), the trace context, wire decoding |
//! | 5 | [`reconcile`] | the reconcile core (queue workers, hook circuit, waits on kmeta's own writes), pure decisions, child management, the CompositeController and DecoratorController kinds, the manager |
//! | 6 | [`embed`], [`kro`], [`manifest`], [`rbac`], [`render`], [`plan`], [`steer`], [`trace`] | CompositeControllers with in-process Rust hooks; kro's ResourceGraphDefinitions served as CompositeControllers with CEL hooks; manifest files read and applied, kmeta's CRDs installed; the RBAC rules controllers need; what a sync hook would make kmeta write, for one parent or every parent of a controller; steering a parent (`reconcile`/`suspend`/`resume`); tracing it |
//!
//! The commands are compiled into the `kmeta` binary only: `main.rs` and its own modules in
//! `cli/` (every subcommand's flags, `kmeta run`'s wiring of clients, leader election, shards
//! and health endpoints, `kmeta dev`, `kmeta demo`, what each command prints and its exit code,
//! signals, the allocator) are not part of the library and see only its public API.
#![warn(missing_docs)]

pub mod api;
pub mod duration;
pub(crate) mod object;

pub(crate) mod runtime;

pub mod ops;

pub mod coord;

pub mod hook;

pub mod reconcile;

pub mod embed;
pub mod kro;
pub mod manifest;
pub mod plan;
pub mod rbac;
pub mod render;
pub mod steer;
pub mod trace;

pub use reconcile::{Context, ManagerConfig, Wiring};
pub use runtime::cache::{PendingWatches, WatchListMode};
/// The cache's form of a watched object, a resolved resource and the work queue (for the
/// benchmarks).
#[doc(hidden)]
pub use runtime::{
    cache::cached_value, compact::Compact, queue::Queue, resources::Resolved, watched::Watched,
};
