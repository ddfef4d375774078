//! [`Inner`], the mutable state every engine operation works on: storage, the served
//! resources, the seeded generator of uids and names, and the warnings of the current request.

use super::request::Req;
use crate::error::{ApiError, ApiResult};
use crate::hooks::SplitMix;
use crate::patch::{self, ListKind};
use crate::registry::{Registry, ResourceDef};
use crate::store::{Key, Obj, Storage};
use serde_json::{Value, json};
use std::sync::Arc;

/// Mutable server state.
pub(crate) struct Inner {
    /// Object storage.
    pub(crate) store: Storage,
    /// Served resources.
    pub(crate) registry: Registry,
    rng: SplitMix,
    /// `Warning` header texts produced by the current request (taken by the HTTP layer).
    pub(crate) warnings: Vec<String>,
}

impl Inner {
    /// The stored object an item request names, with its key; NotFound when there is none.
    pub(super) fn stored(&self, req: &Req) -> ApiResult<(Key, Obj)> {
        let key = req.key(req.name.as_deref().unwrap_or_default());
        match self.store.get(&key) {
            Some(obj) => Ok((key, obj.clone())),
            None => Err(ApiError::not_found(req.target())),
        }
    }

    /// New state.
    pub(crate) fn new(window: usize, seed: u64) -> Self {
        Inner {
            store: Storage::new(window),
            registry: Registry::with_builtins(),
            rng: SplitMix::new(seed),
            warnings: Vec::new(),
        }
    }

    pub(super) fn uid(&mut self) -> String {
        let a = self.rng.next_u64().to_be_bytes();
        let b = self.rng.next_u64().to_be_bytes();
        let mut x = [0u8; 16];
        x[..8].copy_from_slice(&a);
        x[8..].copy_from_slice(&b);
        x[6] = (x[6] & 0x0f) | 0x40;
        x[8] = (x[8] & 0x3f) | 0x80;
        let h: String = x.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    pub(super) fn name_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHA[(self.rng.next_u64() % ALPHA.len() as u64) as usize] as char)
            .collect()
    }

    /// The server-side apply [`patch::Shape`] of a resource's version.
    pub(super) fn shape_for(def: &ResourceDef, version: &str) -> patch::SchemaShape {
        patch::SchemaShape {
            schema: if def.is_builtin() {
                None
            } else {
                def.schemas.get(version).cloned()
            },
        }
    }

    pub(super) fn kinds_for(
        def: &ResourceDef,
        version: &str,
    ) -> impl Fn(&[String]) -> ListKind + use<> {
        let schema = if def.is_builtin() {
            None
        } else {
            def.schemas.get(version).cloned()
        };
        let builtin = def.is_builtin();
        move |p: &[String]| {
            if builtin {
                patch::builtin_list_kind(p)
            } else {
                patch::schema_list_kind(schema.as_ref(), p)
            }
        }
    }

    /// Convert a stored object to the requested version (CRDs: `None` conversion; Events
    /// between core `v1` and `events.k8s.io/v1`, see [`crate::convert`]).
    pub(crate) fn present(obj: &Obj, api_version: &str) -> Obj {
        if obj.get("apiVersion").and_then(Value::as_str) == Some(api_version) {
            obj.clone()
        } else if let Some(v) = crate::convert::present(obj, api_version) {
            Arc::new(v)
        } else {
            let mut v = (**obj).clone();
            v["apiVersion"] = json!(api_version);
            Arc::new(v)
        }
    }
}
