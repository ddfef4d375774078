//! Write Metacontroller/kmeta hooks in Rust.
//!
//! The hook requests and responses are [`kmeta_wire`]'s, the same types the kmeta controller
//! sends and decodes (Metacontroller's wire format, hook versions v1 and v2). This crate adds a
//! builder for desired children ([`child`]) and an axum adapter ([`Hooks`]):
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

#![warn(missing_docs)]

mod child;
mod server;

pub use child::{ChildBuilder, child};
pub use kmeta_wire::{
    CustomizeRequest, CustomizeResponse, DecoratorFinalizeRequest, DecoratorFinalizeResponse,
    DecoratorSyncRequest, DecoratorSyncResponse, FinalizeRequest, FinalizeResponse, ObjectMap,
    RelatedResourceRule, SyncRequest, SyncResponse, WireFields, group_key,
};
pub use server::{Hooks, router};

/// The wire format crate itself, for what this crate does not re-export by name.
pub use kmeta_wire as wire;
