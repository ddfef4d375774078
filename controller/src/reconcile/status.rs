//! Writes to the object a controller reconciles, shared by every controller kind: its
//! finalizer, its status (the hook's status plus `observedGeneration`) and the `Synced=False`
//! condition after a failure. Every write is UID-guarded and resourceVersion-checked.

use serde_json::Value;

use crate::object::{describe, meta_str};
use crate::reconcile::core::{Context, SyncError, api_err};
use crate::reconcile::decide;
use crate::runtime::kapi;
use crate::runtime::resources::Resolved;

/// Adds (`add`) or removes the finalizer `fin`; returns the object as written, `None` when it is
/// gone.
pub async fn set_finalizer(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    fin: &str,
    add: bool,
) -> Result<Option<Value>, SyncError> {
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let name = meta_str(parent, "name");
    kapi::atomic_update(&api, name, meta_str(parent, "uid"), false, |o| {
        o.get_mut("metadata")
            .and_then(Value::as_object_mut)
            .is_some_and(|m| edit_finalizers(m, fin, add))
    })
    .await
    .map(kapi::Updated::object)
    .map_err(api_err(format!(
        "updating finalizer {fin} on {}",
        describe(parent)
    )))
}

/// Adds finalizer `fin` and `labels` to `parent` in one write (optimistic concurrency, the UID
/// checked), when either is missing: kro's finalizer and instance labels on an RGD's instance.
pub async fn add_finalizer_and_labels(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    fin: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<Option<Value>, SyncError> {
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let name = meta_str(parent, "name");
    kapi::atomic_update(&api, name, meta_str(parent, "uid"), false, |o| {
        let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            return false;
        };
        let labelled = crate::reconcile::decide::set_labels(m, labels);
        edit_finalizers(m, fin, true) || labelled
    })
    .await
    .map(kapi::Updated::object)
    .map_err(api_err(format!(
        "adding finalizer {fin} to {}",
        describe(parent)
    )))
}

/// Adds (`add`) or removes finalizer `fin` in an object's `metadata`; whether the list changed.
/// A `finalizers` that is not a list is replaced by one.
fn edit_finalizers(m: &mut serde_json::Map<String, Value>, fin: &str, add: bool) -> bool {
    let list = m
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let Some(a) = list.as_array_mut() else {
        return false;
    };
    let present = a.iter().any(|v| v.as_str() == Some(fin));
    match (add, present) {
        (true, false) => a.push(Value::String(fin.to_owned())),
        (false, true) => a.retain(|v| v.as_str() != Some(fin)),
        _ => return false,
    }
    true
}

fn resource_version(obj: &Value) -> String {
    meta_str(obj, "resourceVersion").to_owned()
}

/// `parent` with `status` in place of its own, encoded as the parent with its `status` field
/// replaced (or added last) would be, byte for byte, without copying the parent (a parent with
/// its sync record is a few KB of JSON, copied once per status write before).
struct WithStatus<'a> {
    parent: &'a Value,
    status: &'a Value,
}

impl serde::Serialize for WithStatus<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.parent.as_object() else {
            return self.parent.serialize(s);
        };
        let had = fields.contains_key("status");
        let mut map = s.serialize_map(Some(fields.len() + usize::from(!had)))?;
        for (k, v) in fields {
            match k.as_str() {
                "status" => map.serialize_entry(k, self.status)?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        if !had {
            map.serialize_entry("status", self.status)?;
        }
        map.end()
    }
}

/// Writes the hook's status plus `observedGeneration` (and, with `record`, kmeta's record of this
/// sync when it changed something: [`decide::with_sync_record`]) to `/status`, only when it
/// differs, with the resourceVersion of `parent` as read ([`SyncError::Stale`] on a conflict);
/// returns the resourceVersion written, if any (so the owner can tell its own write's watch
/// event from a change made by others).
pub async fn update_status(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    status: Option<&Value>,
    record: Option<&decide::SyncRecord>,
) -> Result<Option<String>, SyncError> {
    let generation = crate::object::meta(parent, "generation").and_then(Value::as_i64);
    let mut want = decide::desired_status(status, generation);
    if let Some(record) = record {
        want = decide::with_sync_record(want, parent, record);
    }
    if !decide::status_changed(parent, &want) {
        return Ok(None);
    }
    let api = kapi::api(&ctx.client, resource, meta_str(parent, "namespace"));
    let next = WithStatus {
        parent,
        status: &want,
    };
    // Written on the version the sync read: a 409 means someone changed the parent since
    // (a spec edit, or a newer leader's status), and this status, computed from the older
    // version, must not overwrite it. The sync runs again on the newer version instead.
    match kapi::replace_status_of::<_, kapi::Stored>(&api, meta_str(parent, "name"), &next).await {
        Ok(written) => Ok(Some(written.metadata.resource_version.unwrap_or_default())),
        Err(e) if kapi::is_not_found(&e) => Ok(None),
        Err(e) if kapi::is_conflict(&e) => Err(SyncError::Stale(describe(parent))),
        Err(e) => Err(api_err(format!("updating status of {}", describe(parent)))(
            e,
        )),
    }
}

/// After a failed sync: a `Synced=False` condition on the parent's status (only when it
/// differs from what is there; UID-guarded, resourceVersion-checked).
pub async fn report_failure(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    message: &str,
) -> Result<Option<String>, SyncError> {
    report_condition(
        ctx,
        resource,
        parent,
        decide::Condition::sync_failure(message),
    )
    .await
}

/// Now, to the second, as the API server writes times (RFC 3339): the time of a condition's
/// transition or of a sync record.
pub(crate) fn now_to_the_second() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// Sets `condition` on the parent's status (only when it differs from what is there;
/// UID-guarded, resourceVersion-checked); returns the resourceVersion written, if any. Decided
/// first on `parent` as cached: a parent whose condition is already there costs no request (a
/// failing parent's retries would otherwise read it once each, from the request budget its
/// healthy neighbours' writes wait for); a stale copy is answered 409 and read fresh.
pub async fn report_condition(
    ctx: &Context,
    resource: &Resolved,
    parent: &Value,
    condition: decide::Condition<'_>,
) -> Result<Option<String>, SyncError> {
    let api = kapi::api(ctx.report_client(), resource, meta_str(parent, "namespace"));
    let now = now_to_the_second();
    let handled = decide::reconcile_request(parent);
    kapi::atomic_update_from(
        &api,
        Some(parent.clone()),
        meta_str(parent, "name"),
        meta_str(parent, "uid"),
        true,
        |live| {
            let set = match decide::with_condition(live, condition, &now) {
                Some(next) => {
                    *live = next;
                    true
                }
                None => false,
            };
            // the request of the version this sync read is handled by it, failed or paused as
            // it is (live may carry a newer one, for the next sync)
            decide::mark_handled_request(live, handled) || set
        },
    )
    .await
    .map(|u| u.written().map(resource_version))
    .map_err(api_err(format!(
        "writing the {} condition of {}",
        condition.type_,
        describe(parent)
    )))
}

#[cfg(all(test, feature = "embedded-apiserver"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::ManagerConfig;
    use kube::api::{ApiResource, Patch, PatchParams, PostParams};
    use kube::core::{DynamicObject, GroupVersionKind};
    use serde_json::json;

    /// The status write's body is the parent with its status replaced in place (or added last),
    /// byte for byte as the copied parent encoded.
    #[test]
    fn a_status_write_encodes_like_the_copied_parent() {
        let status = json!({"children": 10, "observedGeneration": 2});
        let parents = [
            json!({"apiVersion": "v1", "kind": "T", "metadata": {"name": "p"},
                "status": {"old": true}, "spec": {"x": [1, "a\"b"]}}),
            json!({"metadata": {"name": "p"}, "spec": {}}),
            json!({}),
            json!("not an object"),
        ];
        for parent in parents {
            let mut copied = parent.clone();
            if let Some(m) = copied.as_object_mut() {
                m.insert("status".into(), status.clone());
            }
            let next = WithStatus {
                parent: &parent,
                status: &status,
            };
            assert_eq!(
                serde_json::to_vec(&next).unwrap(),
                serde_json::to_vec(&copied).unwrap(),
                "{parent}"
            );
        }
    }

    #[test]
    fn finalizers_are_added_and_removed_once() {
        let mut m = serde_json::Map::new();
        assert!(edit_finalizers(&mut m, "a/f", true));
        assert!(!edit_finalizers(&mut m, "a/f", true), "present already");
        assert_eq!(m["finalizers"], json!(["a/f"]));
        assert!(edit_finalizers(&mut m, "a/f", false));
        assert!(!edit_finalizers(&mut m, "a/f", false), "gone already");
        m.insert("finalizers".into(), json!("not a list"));
        assert!(edit_finalizers(&mut m, "a/f", true));
        assert_eq!(m["finalizers"], json!(["a/f"]));
    }

    /// A namespaced kind `Thing` with a status subresource, served by an in-memory API server.
    async fn things() -> anyhow::Result<(kmeta_apiserver::TestServer, Resolved)> {
        let server = kmeta_apiserver::TestServer::start().await?;
        let crds: kube::Api<DynamicObject> = kube::Api::all_with(
            server.client(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
                "customresourcedefinitions",
            ),
        );
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.status.kmeta.test"},
            "spec": {"group": "status.kmeta.test", "scope": "Namespaced",
                "names": {"kind": "Thing", "plural": "things", "singular": "thing", "listKind": "ThingList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}});
        crds.create(&PostParams::default(), &serde_json::from_value(crd)?)
            .await?;
        let resolved = Resolved {
            api: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("status.kmeta.test", "v1", "Thing"),
                "things",
            ),
            namespaced: true,
            has_status: true,
        };
        Ok((server, resolved))
    }

    /// The parent `t` of kind Thing, created.
    async fn thing(ctx: &Context, things: &Resolved) -> anyhow::Result<Value> {
        let api = kapi::api(&ctx.client, things, "default");
        let thing = json!({"apiVersion": "status.kmeta.test/v1", "kind": "Thing",
                           "metadata": {"name": "t", "namespace": "default"}, "spec": {"n": 1}});
        // kmeta-apiserver serves a CRD as soon as its create returns
        let created = api
            .create(&PostParams::default(), &serde_json::from_value(thing)?)
            .await?;
        Ok(serde_json::to_value(created)?)
    }

    /// Another writer changes the spec of `t`; returns its resourceVersion.
    async fn other_writer(ctx: &Context, things: &Resolved) -> anyhow::Result<String> {
        let api = kapi::api(&ctx.client, things, "default");
        let other = api
            .patch(
                "t",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"n": 2}})),
            )
            .await?;
        Ok(other.metadata.resource_version.unwrap())
    }

    async fn live_rv(ctx: &Context, things: &Resolved) -> anyhow::Result<Option<String>> {
        let api = kapi::api(&ctx.client, things, "default");
        Ok(api.get("t").await?.metadata.resource_version)
    }

    /// The status computed from a version that is no longer current is never written over the
    /// newer one (no re-read-and-overwrite): the sync is told to run again.
    #[tokio::test]
    async fn status_computed_from_a_stale_read_is_abandoned() -> anyhow::Result<()> {
        let (server, things) = things().await?;
        let ctx = Context::new(server.client(), ManagerConfig::default());
        let stale = thing(&ctx, &things).await?;
        let other_rv = other_writer(&ctx, &things).await?;
        let status = json!({"ready": true});
        let r = update_status(&ctx, &things, &stale, Some(&status), None).await;
        assert!(matches!(r, Err(SyncError::Stale(_))), "{r:?}");
        assert_eq!(live_rv(&ctx, &things).await?, Some(other_rv));
        Ok(())
    }

    /// A failure condition that is already there is not written again, and the resourceVersion
    /// read is not claimed as this controller's write: it may be another writer's change, whose
    /// watch event the caller must not take for its own write and ignore.
    #[tokio::test]
    async fn failure_already_reported_claims_no_resource_version() -> anyhow::Result<()> {
        let (server, things) = things().await?;
        let ctx = Context::new(server.client(), ManagerConfig::default());
        let stale = thing(&ctx, &things).await?;
        let first = report_failure(&ctx, &things, &stale, "hook down").await?;
        assert!(first.is_some(), "the first report writes the condition");
        let other_rv = other_writer(&ctx, &things).await?;
        let again = report_failure(&ctx, &things, &stale, "hook down").await?;
        assert_eq!(again, None, "claimed the other writer's version {other_rv}");
        assert_eq!(live_rv(&ctx, &things).await?, Some(other_rv));
        Ok(())
    }
}
