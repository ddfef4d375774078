//! Write Metacontroller/kmeta hooks in Rust.
//!
//! The hook requests and responses are [`kmeta_wire`]'s, the same types the kmeta controller
//! sends and decodes (Metacontroller's wire format, hook versions v1 and v2). This crate adds a
//! builder for desired children ([`child`]) and an axum adapter ([`Hooks`]):
//!
//! ```
//! use kmeta_hook::{SyncRequest, SyncResponse, child};
//! use serde_json::json;
//!
//! fn sync(req: SyncRequest) -> Result<SyncResponse, String> {
//!     let name = req.parent_name();
//!     let cm = child("v1", "ConfigMap", name)
//!         .field("data", json!({"greeting": "hello"}))
//!         .build();
//!     let ready = req.children.of_kind("ConfigMap", "v1").count();
//!     Ok(SyncResponse::new()
//!         .child(cm)
//!         .status(json!({"configMaps": ready})))
//! }
//!
//! // a hook is a plain function: test it without a server
//! let req: SyncRequest = serde_json::from_value(json!({
//!     "parent": {"metadata": {"name": "hello", "namespace": "default"}},
//!     "children": {"ConfigMap.v1": {}}
//! })).map_err(|e| e.to_string())?;
//! let resp = sync(req)?;
//! assert_eq!(resp.children[0]["metadata"]["name"], "hello");
//! assert_eq!(resp.status, Some(json!({"configMaps": 0})));
//! # Ok::<(), String>(())
//! ```
//!
//! Serve it as a webhook:
//!
//! ```no_run
//! # fn sync(_: kmeta_hook::SyncRequest) -> Result<kmeta_hook::SyncResponse, String> {
//! #     Ok(kmeta_hook::SyncResponse::new())
//! # }
//! # async fn run() -> std::io::Result<()> {
//! kmeta_hook::router().sync(sync).serve("127.0.0.1:8080").await
//! # }
//! ```
//!
//! or, unchanged, as an in-process hook of a CompositeController run by the `kmeta` crate
//! (`kmeta::embed::Composite::builder(client, name)…sync(sync).run(stop)`).

#![warn(missing_docs)]

mod child;
mod server;

pub use child::{ChildBuilder, child};
pub use kmeta_wire::{
    CustomizeRequest, CustomizeResponse, DecoratorFinalizeRequest, DecoratorFinalizeResponse,
    DecoratorSyncRequest, DecoratorSyncResponse, FinalizeRequest, FinalizeResponse, HookEvent,
    HookEventType, ObjectMap, RelatedResourceRule, SyncRequest, SyncResponse, WireFields,
    group_key,
};
pub use server::{Hooks, router};

/// The wire format crate itself, for what this crate does not re-export by name.
pub use kmeta_wire as wire;
