//! Write Metacontroller/kmeta hooks in Rust.
//!
//! Typed hook requests and responses in Metacontroller's wire format (hook versions v1 and v2),
//! helpers to read observed children and build desired ones, and an axum adapter:
//!
//! ```no_run
//! use kmeta_hook::{SyncRequest, SyncResponse, child};
//!
//! fn sync(req: SyncRequest) -> Result<SyncResponse, String> {
//!     let name = req.parent_name();
//!     let cm = child("v1", "ConfigMap", name)
//!         .field("data", serde_json::json!({"greeting": "hello"}))
//!         .build();
//!     let ready = req.children.of_kind("ConfigMap", "v1").count();
//!     Ok(SyncResponse::new()
//!         .child(cm)
//!         .status(serde_json::json!({"configMaps": ready})))
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! kmeta_hook::router().sync(sync).serve("127.0.0.1:8080").await
//! # }
//! ```

mod server;
mod types;

pub use server::{Hooks, router};
pub use types::*;
