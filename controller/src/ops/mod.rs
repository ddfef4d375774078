//! Layer 2, operating kmeta: Prometheus [`metrics`], client-side rate limits ([`ratelimit`]),
//! [`logging`], health probes (`health`) and leader election ([`leader`]).

pub(crate) mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod ratelimit;

pub use metrics::Metrics;
