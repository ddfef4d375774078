//! Layer 3, calling hooks: the hook client (`client`: trace context, timeout, metrics and
//! decoding around any back end), the back-end interface (`backend`), the one place a hook
//! spec's back end is chosen (`registry`), the back ends — webhooks (`webhook`), Rust functions in this process (`local`),
//! Jsonnet hooks evaluated by kmeta's own worker processes ([`jsonnet`]), kro resource graphs
//! evaluated with CEL (`cel`) — how a webhook is
//! reached: URL, TLS, credentials (`transport`), the rustls configuration for caBundle and
//! clientTLS (`tls`), the ETag response cache (`etag`), the W3C trace context of hook requests
//! (`trace`), bodies as trace logs show them (`redact`), the errors (`error`), and the wire
//! format's decoding and object maps ([`wire`]).

pub(crate) mod backend;
pub(crate) mod cel;
pub(crate) mod client;
pub(crate) mod error;
pub(crate) mod etag;
pub mod jsonnet;
pub(crate) mod local;
mod redact;
mod registry;
mod tls;
pub(crate) mod trace;
pub(crate) mod transport;
mod webhook;
/// Hook requests and responses as the controller builds and decodes them; public (hidden) for the
/// SDK's agreement test (`sdk/tests/agree_with_controller.rs`). Hook authors use `kmeta-hook`.
#[doc(hidden)]
pub mod wire;

pub(crate) use client::HookClient;
pub use client::{DEFAULT_MAX_RESPONSE_BYTES, HookOptions};
pub(crate) use error::HookError;
