//! Layer 3, calling hooks: the HTTP client with its transport, TLS, authentication and response
//! cache (`client`), and the wire format's decoding and object maps ([`wire`]).

pub(crate) mod client;
pub mod wire;

pub(crate) use client::{HookClient, HookError};
pub use client::{HookOptions, base64_encode};
