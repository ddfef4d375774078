//! Layer 3, calling hooks: the HTTP client with its transport, TLS, authentication and response
//! cache ([`client`]), and the wire format's decoding and object maps ([`wire`]).

pub mod client;
pub mod wire;

pub use client::{HookClient, HookError, HookOptions, base64_encode};
