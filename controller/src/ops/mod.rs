//! Layer 2, operating kmeta: Prometheus [`metrics`], client-side rate limits ([`ratelimit`]),
//! [`logging`], health probes (`health`), leader election ([`leader`]) and the write
//! [`fence`] that keeps a leader that lost its Lease from writing.

pub mod fence;
pub(crate) mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod ratelimit;

pub use metrics::Metrics;
