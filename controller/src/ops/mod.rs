//! Layer 2, operating kmeta: Prometheus [`metrics`], client-side rate limits ([`ratelimit`]), the
//! Kubernetes clients built with them ([`client`]), [`logging`], health probes (`health`), leader
//! election ([`leader`]), the write [`fence`] that keeps a leader that lost its Lease from
//! writing, Kubernetes [`events`] retried when the API server did not take them, and the API
//! server's OpenAPI v3 documents the children's list rules are read from (`openapi`), and
//! [`shard`]ing parents across active replicas with one Lease per bucket.

pub mod client;
pub mod events;
pub mod fence;
pub(crate) mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub(crate) mod openapi;
pub mod ratelimit;
pub mod shard;

pub use metrics::Metrics;
