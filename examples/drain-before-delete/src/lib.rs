//! The drain-before-delete hooks. Each `Queue` owns one ConfigMap `<queue>-queue` holding the
//! queue's settings; the workers that use the queue report `data.pending` (the number of
//! messages not yet processed) in it.
//!
//! - `sync` asks for the ConfigMap with the settings only; `data.pending` belongs to the
//!   workers, and kmeta's apply leaves fields it never set alone.
//! - `finalize` (the Queue is being deleted) keeps the ConfigMap and answers `finalized: false`
//!   while messages are pending, so the Queue stays (with its finalizer) until it is drained;
//!   then it drops the child and answers `finalized: true`.

use std::convert::Infallible;

use kmeta_hook::{SyncRequest, SyncResponse, child};
use serde_json::{Value, json};

/// The data key the workers keep up to date.
pub const PENDING: &str = "pending";

/// The child ConfigMap's name for a queue.
pub fn child_name(queue: &str) -> String {
    format!("{queue}-queue")
}

fn desired(req: &SyncRequest) -> Value {
    let queue = req.parent_name();
    let capacity = req
        .parent_field("/spec/capacity")
        .and_then(Value::as_i64)
        .unwrap_or(100);
    child("v1", "ConfigMap", &child_name(queue))
        .label("queues.examples.kmeta.dev/name", queue)
        .field(
            "data",
            json!({"queue": queue, "capacity": capacity.to_string()}),
        )
        .build()
}

/// Messages still pending according to the observed child: None when no worker reported yet.
pub fn pending(req: &SyncRequest) -> Option<u64> {
    req.children
        .get(
            "ConfigMap",
            "v1",
            req.parent_namespace(),
            &child_name(req.parent_name()),
        )?
        .pointer(&format!("/data/{PENDING}"))?
        .as_str()?
        .trim()
        .parse()
        .ok()
}

/// The sync hook.
pub fn sync(req: SyncRequest) -> Result<SyncResponse, Infallible> {
    // no worker has reported yet: no `pending` at all, rather than `pending: null`
    let mut status = json!({"phase": "Active"});
    if let Some(n) = pending(&req) {
        status["pending"] = json!(n);
    }
    Ok(SyncResponse::new().child(desired(&req)).status(status))
}

/// The finalize hook.
pub fn finalize(req: SyncRequest) -> Result<SyncResponse, Infallible> {
    match pending(&req) {
        // drained (or no worker ever used it): drop the child, release the Queue
        Some(0) | None => Ok(SyncResponse::new()
            .status(json!({"phase": "Deleting", "pending": 0}))
            .finalized(true)),
        Some(n) => Ok(SyncResponse::new()
            .child(desired(&req))
            .status(json!({"phase": "Draining", "pending": n}))
            .finalized(false)),
    }
}

/// The hook server's routes (`POST /sync`, `POST /finalize`).
pub fn hooks() -> kmeta_hook::Hooks {
    kmeta_hook::router().sync(sync).finalize(finalize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pending: Option<&str>, finalizing: bool) -> SyncRequest {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders-queue", "namespace": "ns"},
            "data": {"queue": "orders", "capacity": "5"}});
        if let Some(p) = pending {
            cm["data"][PENDING] = json!(p);
        }
        serde_json::from_value(json!({
            "controller": {},
            "parent": {"apiVersion": "examples.kmeta.dev/v1alpha1", "kind": "Queue",
                       "metadata": {"name": "orders", "namespace": "ns"},
                       "spec": {"capacity": 5}},
            "children": {"ConfigMap.v1": {"orders-queue": cm}},
            "related": {},
            "finalizing": finalizing
        }))
        .expect("request")
    }

    #[test]
    fn sync_owns_settings_only() {
        let resp = sync(request(Some("7"), false)).expect("sync");
        assert_eq!(
            resp.children[0]["data"],
            json!({"queue": "orders", "capacity": "5"})
        );
        assert_eq!(resp.status.expect("status")["pending"], 7);
        assert!(!resp.finalized);
        let first = sync(request(None, false)).expect("sync");
        assert_eq!(first.status.expect("status"), json!({"phase": "Active"}));
    }

    #[test]
    fn finalize_waits_for_the_drain() {
        let resp = finalize(request(Some("3"), true)).expect("finalize");
        assert!(!resp.finalized);
        assert_eq!(resp.children.len(), 1, "the queue is kept while draining");
        let resp = finalize(request(Some("0"), true)).expect("finalize");
        assert!(resp.finalized);
        assert!(resp.children.is_empty());
        let resp = finalize(request(None, true)).expect("finalize");
        assert!(resp.finalized);
    }
}
