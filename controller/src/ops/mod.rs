//! Layer 2, operating kmeta: Prometheus [`metrics`], client-side rate limits ([`ratelimit`]), the
//! Kubernetes clients built with them ([`client`]), [`logging`], health probes (`health`),
//! Kubernetes [`events`] retried when the API server did not take them, and the API server's
//! OpenAPI v3 documents the children's list rules are read from (`openapi`). Leader election,
//! the write fence and sharding are one layer up, in [`crate::coord`].

pub mod client;
pub mod events;
pub mod health;
pub mod logging;
pub mod metrics;
pub(crate) mod openapi;
pub mod ratelimit;

pub use metrics::Metrics;
