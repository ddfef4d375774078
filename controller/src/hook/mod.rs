//! Layer 3, calling hooks: the HTTP client (`client`), how a hook is reached — URL, TLS,
//! credentials (`transport`), the rustls configuration for caBundle and clientTLS (`tls`), the
//! ETag response cache (`etag`), the W3C trace context of hook requests (`trace`), the errors
//! (`error`), Jsonnet hooks evaluated by kmeta's own worker processes ([`jsonnet`]), and the
//! wire format's decoding and object maps ([`wire`]).

pub(crate) mod client;
pub(crate) mod error;
pub(crate) mod etag;
pub mod jsonnet;
mod tls;
pub(crate) mod trace;
pub(crate) mod transport;
/// Hook requests and responses as the controller builds and decodes them; public (hidden) for the
/// SDK's agreement test (`sdk/tests/agree_with_controller.rs`). Hook authors use `kmeta-hook`.
#[doc(hidden)]
pub mod wire;

pub(crate) use client::HookClient;
pub use client::{DEFAULT_MAX_RESPONSE_BYTES, HookOptions};
pub(crate) use error::HookError;
