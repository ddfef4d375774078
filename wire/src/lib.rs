//! Metacontroller's hook wire format, as serde types: the one definition shared by the kmeta
//! controller (which sends requests and decodes responses) and the `kmeta-hook` SDK (which
//! decodes requests and sends responses).
//!
//! | Hook | Request | Response |
//! |---|---|---|
//! | CompositeController sync / finalize | [`SyncRequest`] | [`SyncResponse`] |
//! | DecoratorController sync / finalize | [`DecoratorSyncRequest`] | [`DecoratorSyncResponse`] |
//! | customize (both controllers) | [`CustomizeRequest`] | [`CustomizeResponse`] of [`RelatedResourceRule`]s |
//!
//! A sync or finalize response may also ask kmeta to publish Events on the object ([`HookEvent`],
//! a kmeta extension Metacontroller ignores).
//!
//! Observed objects (`children`, `attachments`, `related`) travel as an [`ObjectMap`]: keyed by
//! [`group_key`] (`<Kind>.<apiVersion>`), then by object key — `name` or `namespace/name` in hook
//! v1, always `namespace/name` for namespaced objects in hook v2.
//!
//! Field names, optionality and order are Metacontroller's (v4.17.2). Decoding is lenient about
//! `null` wherever Metacontroller's Go decoder is (a `null` list, map, number or boolean means
//! its zero value); rejecting unknown fields (`responseUnMarshallMode: strict`) is left to the
//! decoder, which finds every type's field names in [`WireFields::FIELDS`].
//!
//! ```
//! use kmeta_wire::{SyncRequest, SyncResponse};
//!
//! let req: SyncRequest = serde_json::from_str(r#"{
//!     "controller": {"kind": "CompositeController"},
//!     "parent": {"apiVersion": "example.com/v1", "kind": "Hello",
//!                "metadata": {"name": "world", "namespace": "default"}},
//!     "children": {"Pod.v1": {"world": {"apiVersion": "v1", "kind": "Pod",
//!                                       "metadata": {"name": "world"}}}},
//!     "related": {},
//!     "finalizing": false
//! }"#).unwrap();
//! assert_eq!(req.children.of_kind("Pod", "v1").count(), 1);
//!
//! let resp = SyncResponse::new().status(serde_json::json!({"pods": 1}));
//! assert_eq!(serde_json::to_string(&resp).unwrap(), r#"{"status":{"pods":1},"children":[]}"#);
//! ```

#![warn(missing_docs)]

mod composite;
mod customize;
mod decorator;
mod events;
mod fields;
pub mod go_json;
mod object_map;

pub use composite::{FinalizeRequest, FinalizeResponse, SyncRequest, SyncResponse};
pub use customize::{CustomizeRequest, CustomizeResponse, RelatedResourceRule};
pub use decorator::{
    DecoratorFinalizeRequest, DecoratorFinalizeResponse, DecoratorSyncRequest,
    DecoratorSyncResponse,
};
pub use events::{HookEvent, HookEventType};
pub use fields::WireFields;
pub use object_map::{ObjectMap, group_key};
