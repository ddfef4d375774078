//! Layer 2, operating kmeta: Prometheus [`metrics`], client-side rate limits ([`ratelimit`]), the
//! Kubernetes clients built with them ([`client`]), [`logging`], health probes (`health`), leader
//! election ([`leader`]), the write [`fence`] that keeps a leader that lost its Lease from
//! writing, and Kubernetes [`events`] retried when the API server did not take them.

pub mod client;
pub mod events;
pub mod fence;
pub(crate) mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod ratelimit;

pub use metrics::Metrics;
