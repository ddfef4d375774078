//! Engine scenarios across operations: history, lists at past versions, generation, garbage
//! collection and namespace deletion.

use super::*;
use crate::hooks::Admission;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, Key, Obj, Packed};
use serde_json::{Value, json};
use std::sync::Arc;

fn req(inner: &Inner, group: &str, plural: &str, ns: Option<&str>, name: Option<&str>) -> Req {
    Req {
        def: inner.registry.lookup(group, "v1", plural).unwrap().clone(),
        version: "v1".into(),
        ns: ns.map(str::to_string),
        name: name.map(str::to_string),
        sub: None,
    }
}

fn opts() -> WriteOpts {
    WriteOpts {
        field_manager: "test".into(),
        ..Default::default()
    }
}

fn setup() -> (Inner, Admission) {
    let mut i = Inner::new(100, 1);
    let a = Admission::default();
    let r = req(&i, "", "namespaces", None, None);
    i.create(&a, &r, json!({"metadata": {"name": "ns"}}), &opts(), false)
        .unwrap();
    (i, a)
}

/// Every object of the given resources, in key order, as stored now.
fn everything(i: &Inner, res: &[Arc<str>]) -> Vec<(Key, Packed)> {
    res.iter()
        .flat_map(|r| i.store.range(r, None, None))
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect()
}

/// The same, as of `rv`, read from the retained history.
fn everything_at(i: &Inner, res: &[Arc<str>], rv: u64) -> Vec<(Key, Packed)> {
    let mut out = vec![];
    for r in res {
        let snap = i.store.snapshot(r, None, rv).unwrap();
        out.extend(snap.range(None).map(|(k, o)| (k.clone(), o.clone())));
    }
    out
}

/// Deletions by GC (background and foreground), finalizer removal, namespace deletion and
/// deletecollection all record `prev`, so the state after every operation can be read back
/// from history.
#[test]
fn history_covers_gc_finalizer_namespace_and_collection_deletes() {
    let (mut i, a) = setup();
    let cm = req(&i, "", "configmaps", Some("ns"), None);
    let res: Vec<Arc<str>> = [("", "configmaps"), ("", "secrets"), ("", "namespaces")]
        .iter()
        .map(|(g, p)| req(&i, g, p, None, None).def.storage_key())
        .collect();
    let mut recorded = vec![(i.store.rv(), everything(&i, &res))];
    macro_rules! step {
        ($e:expr) => {{
            let out = $e;
            recorded.push((i.store.rv(), everything(&i, &res)));
            out
        }};
    }
    let owned = |name: &str, owner: &Obj, block: bool, fins: Value| {
        json!({"metadata": {"name": name, "finalizers": fins, "labels": {"k": "v"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": block}]}})
    };
    // background GC of a chain
    let p = step!(i.create(&a, &cm, json!({"metadata": {"name": "p"}}), &opts(), false)).unwrap();
    let c = step!(i.create(&a, &cm, owned("c", &p, false, json!([])), &opts(), false)).unwrap();
    step!(i.create(&a, &cm, owned("g", &c, false, json!([])), &opts(), false)).unwrap();
    let del = |p: Propagation| DeleteOpts {
        propagation: Some(p),
        ..Default::default()
    };
    let pr = req(&i, "", "configmaps", Some("ns"), Some("p"));
    step!(i.delete(&a, &pr, &del(Propagation::Background))).unwrap();
    // foreground deletion held by a finalizer, released by removing it
    let p2 = step!(i.create(&a, &cm, json!({"metadata": {"name": "p2"}}), &opts(), false)).unwrap();
    step!(i.create(
        &a,
        &cm,
        owned("c2", &p2, true, json!(["x/y"])),
        &opts(),
        false
    ))
    .unwrap();
    let p2r = req(&i, "", "configmaps", Some("ns"), Some("p2"));
    step!(i.delete(&a, &p2r, &del(Propagation::Foreground))).unwrap();
    let c2r = req(&i, "", "configmaps", Some("ns"), Some("c2"));
    let mut c2 = (*i.get(&c2r).unwrap()).clone();
    c2["metadata"]["finalizers"] = json!([]);
    step!(i.update(&a, &c2r, c2, &opts())).unwrap();
    assert!(i.get(&p2r).is_err(), "owner went with its last dependent");
    // deletecollection with a selector
    for n in ["d1", "d2", "keep"] {
        let labels = if n == "keep" {
            json!({})
        } else {
            json!({"k": "v"})
        };
        step!(i.create(
            &a,
            &cm,
            json!({"metadata": {"name": n, "labels": labels}}),
            &opts(),
            false
        ))
        .unwrap();
    }
    let sel = ListOpts {
        label: LabelSelector::parse("k=v").unwrap(),
        ..Default::default()
    };
    let gone = step!(i.delete_collection(&a, &cm, &sel, &DeleteOpts::default())).unwrap();
    assert_eq!(gone.len(), 2);
    // namespace deletion removes its contents and then the namespace
    let nr = req(&i, "", "namespaces", None, None);
    step!(i.create(
        &a,
        &nr,
        json!({"metadata": {"name": "ns2"}}),
        &opts(),
        false
    ))
    .unwrap();
    let cm2 = req(&i, "", "configmaps", Some("ns2"), None);
    step!(i.create(&a, &cm2, json!({"metadata": {"name": "x"}}), &opts(), false)).unwrap();
    let sec = req(&i, "", "secrets", Some("ns2"), None);
    step!(i.create(&a, &sec, json!({"metadata": {"name": "s"}}), &opts(), false)).unwrap();
    let n2 = req(&i, "", "namespaces", None, Some("ns2"));
    step!(i.delete(&a, &n2, &DeleteOpts::default())).unwrap();
    assert!(
        i.store
            .range(&res[2], None, None)
            .all(|(k, _)| k.name != "ns2")
    );

    let events = i.store.events_since(i.store.compacted()).unwrap();
    assert!(events.iter().any(|e| e.ty == EventType::Deleted));
    for e in &events {
        if e.ty != EventType::Added {
            assert!(
                e.had_prev(),
                "{:?} {:?} at {} without prev",
                e.ty,
                e.key,
                e.rv
            );
        }
    }
    assert!(recorded.len() > 15);
    for (rv, want) in &recorded {
        assert_eq!(&everything_at(&i, &res, *rv), want, "state at rv {rv}");
    }
}

fn item_names(l: &ListResult) -> Vec<String> {
    l.items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn at(rv: u64, m: Option<&str>) -> ListOpts {
    ListOpts {
        resource_version: Some(rv.to_string()),
        resource_version_match: m.map(str::to_string),
        ..Default::default()
    }
}

#[test]
fn list_reads_past_resource_versions() {
    let (mut i, a) = setup();
    let cm = req(&i, "", "configmaps", Some("ns"), None);
    for n in ["a", "b", "c"] {
        i.create(
            &a,
            &cm,
            json!({"metadata": {"name": n}, "data": {"v": "1"}}),
            &opts(),
            false,
        )
        .unwrap();
    }
    let rv1 = i.store.rv();
    let ar = req(&i, "", "configmaps", Some("ns"), Some("a"));
    let mut av = (*i.get(&ar).unwrap()).clone();
    av["data"]["v"] = json!("2");
    i.update(&a, &ar, av, &opts()).unwrap();
    let br = req(&i, "", "configmaps", Some("ns"), Some("b"));
    i.delete(&a, &br, &DeleteOpts::default()).unwrap();
    i.create(&a, &cm, json!({"metadata": {"name": "d"}}), &opts(), false)
        .unwrap();
    let now = i.store.rv();

    // Exact: the old state, stamped with the old rv
    let old = i.list(&cm, &at(rv1, Some("Exact"))).unwrap();
    assert_eq!(item_names(&old), ["a", "b", "c"]);
    assert_eq!(old.items[0]["data"]["v"], "1");
    assert_eq!(old.rv, rv1);
    // the same through the all-namespaces and metadata.name paths
    let all = req(&i, "", "configmaps", None, None);
    assert_eq!(
        item_names(&i.list(&all, &at(rv1, Some("Exact"))).unwrap()),
        ["a", "b", "c"]
    );
    let mut by_name = at(rv1, Some("Exact"));
    by_name.field = FieldSelector::parse("metadata.name=b").unwrap();
    assert_eq!(item_names(&i.list(&cm, &by_name).unwrap()), ["b"]);
    // legacy: limit with resourceVersion=N and no match is exact too
    let mut legacy = at(rv1, None);
    legacy.limit = 10;
    assert_eq!(item_names(&i.list(&cm, &legacy).unwrap()), ["a", "b", "c"]);
    // NotOlderThan (or no match, no limit) an old rv: the current state
    for m in [Some("NotOlderThan"), None] {
        let l = i.list(&cm, &at(rv1, m)).unwrap();
        assert_eq!(item_names(&l), ["a", "c", "d"]);
        assert_eq!(l.rv, now);
    }
    assert_eq!(
        item_names(&i.list(&cm, &at(0, None)).unwrap()),
        ["a", "c", "d"]
    );

    // pagination reads every page from the first page's snapshot
    let first = i
        .list(
            &cm,
            &ListOpts {
                limit: 2,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(item_names(&first), ["a", "c"]);
    assert_eq!(first.remaining, Some(1));
    let cr = req(&i, "", "configmaps", Some("ns"), Some("d"));
    i.delete(&a, &cr, &DeleteOpts::default()).unwrap();
    i.create(&a, &cm, json!({"metadata": {"name": "e"}}), &opts(), false)
        .unwrap();
    let next = ListOpts {
        limit: 2,
        continue_token: first.continue_token.clone(),
        ..Default::default()
    };
    let second = i.list(&cm, &next).unwrap();
    assert_eq!(item_names(&second), ["d"]);
    assert_eq!(second.rv, now);
    assert!(second.continue_token.is_none());

    // too new: 504 at once for exact reads, with a retry hint for not-older-than
    let e = i
        .list(&cm, &at(i.store.rv() + 5, Some("Exact")))
        .unwrap_err();
    assert_eq!(
        (e.code, e.reason.as_str(), e.retry_after),
        (504, "Timeout", None)
    );
    assert_eq!(
        e.message,
        format!(
            "Timeout: Too large resource version: {}, current: {}",
            i.store.rv() + 5,
            i.store.rv()
        )
    );
    assert_eq!(
        e.to_status()["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    let e = i
        .list(&cm, &at(i.store.rv() + 1, Some("NotOlderThan")))
        .unwrap_err();
    assert_eq!((e.code, e.retry_after), (504, Some(1)));

    // invalid combinations
    for (o, code) in [
        (at(0, Some("Exact")), 422),
        (
            ListOpts {
                resource_version_match: Some("Exact".into()),
                ..Default::default()
            },
            422,
        ),
        (at(rv1, Some("Newest")), 422),
        (
            ListOpts {
                continue_token: first.continue_token.clone(),
                ..at(rv1, Some("Exact"))
            },
            422,
        ),
        (
            ListOpts {
                continue_token: first.continue_token.clone(),
                ..at(rv1, None)
            },
            400,
        ),
        (
            ListOpts {
                resource_version: Some("x".into()),
                ..Default::default()
            },
            400,
        ),
    ] {
        assert_eq!(i.list(&cm, &o).unwrap_err().code, code, "{o:?}");
    }
    let e = i.list(&cm, &at(0, Some("Exact"))).unwrap_err();
    assert_eq!(
        e.message,
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
    );

    // compacted history: 410
    i.store.compact_all();
    let e = i.list(&cm, &at(rv1, Some("Exact"))).unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    assert_eq!(
        e.message,
        "The resourceVersion for the provided list is too old."
    );
    let e = i.list(&cm, &next).unwrap_err();
    assert_eq!(e.code, 410);
    assert!(
        e.message
            .starts_with("The provided continue parameter is too old")
    );
    let l = i.list(&cm, &at(i.store.rv(), Some("Exact"))).unwrap();
    assert_eq!(item_names(&l), ["a", "c", "e"]);
}

#[test]
fn secret_string_data_is_folded() {
    let (mut i, a) = setup();
    let r = req(&i, "", "secrets", Some("ns"), None);
    let s = i
        .create(
            &a,
            &r,
            json!({"metadata": {"name": "s"}, "stringData": {"p": "hello"}}),
            &opts(),
            false,
        )
        .unwrap();
    assert_eq!(s["data"]["p"], "aGVsbG8=");
    assert!(s.get("stringData").is_none());
}

#[test]
fn patches_that_break_the_object_are_rejected() {
    let (mut i, a) = setup();
    let r = req(&i, "", "configmaps", Some("ns"), None);
    i.create(&a, &r, json!({"metadata": {"name": "c"}}), &opts(), false)
        .unwrap();
    let r = req(&i, "", "configmaps", Some("ns"), Some("c"));
    let root = br#"[{"op": "replace", "path": "", "value": [1]}]"#;
    let e = i
        .patch(&a, &r, "application/json-patch+json", root, &opts())
        .unwrap_err();
    assert_eq!(e.code, 422);
    let e = i
        .patch(
            &a,
            &r,
            "application/merge-patch+json",
            br#"{"metadata": 5}"#,
            &opts(),
        )
        .unwrap_err();
    assert_eq!(e.code, 422);
    let e = i
        .patch(&a, &r, "application/merge-patch+json", b"not json", &opts())
        .unwrap_err();
    assert_eq!(e.code, 400);
    let e = i.patch(&a, &r, "text/plain", b"{}", &opts()).unwrap_err();
    assert_eq!(e.code, 415);
}

#[test]
fn create_update_generation_and_noop() {
    let (mut i, a) = setup();
    let r = req(&i, "apps", "deployments", Some("ns"), None);
    let d = i
        .create(
            &a,
            &r,
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"x": 1}}),
            &opts(),
            false,
        )
        .unwrap();
    assert_eq!(d["metadata"]["generation"], 1);
    assert!(d.get("status").is_none());
    let r = req(&i, "apps", "deployments", Some("ns"), Some("d"));
    let same = i.update(&a, &r, (*d).clone(), &opts()).unwrap();
    assert_eq!(
        same["metadata"]["resourceVersion"],
        d["metadata"]["resourceVersion"]
    );
    let mut changed = (*d).clone();
    changed["spec"]["replicas"] = json!(2);
    let u = i.update(&a, &r, changed.clone(), &opts()).unwrap();
    assert_eq!(u["metadata"]["generation"], 2);
    // stale rv
    let e = i.update(&a, &r, changed, &opts()).unwrap_err();
    assert_eq!(e.code, 409);
    // label change does not bump generation
    let mut l = (*u).clone();
    l["metadata"]["labels"] = json!({"a": "b"});
    let u2 = i.update(&a, &r, l, &opts()).unwrap();
    assert_eq!(u2["metadata"]["generation"], 2);
}

#[test]
fn gc_background_foreground_orphan() {
    let (mut i, a) = setup();
    let cm = req(&i, "", "configmaps", Some("ns"), None);
    let mk = |i: &mut Inner, name: &str, owner: Option<&Obj>, block: bool| {
        let mut body = json!({"metadata": {"name": name}});
        if let Some(o) = owner {
            body["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
                "name": o["metadata"]["name"], "uid": o["metadata"]["uid"], "blockOwnerDeletion": block}]);
        }
        i.create(&a, &cm, body, &opts(), false).unwrap()
    };
    let p = mk(&mut i, "p", None, false);
    let c = mk(&mut i, "c", Some(&p), false);
    mk(&mut i, "gc", Some(&c), false);
    let del = |i: &mut Inner, name: &str, p: Propagation| {
        let r = req(i, "", "configmaps", Some("ns"), Some(name));
        i.delete(
            &a,
            &r,
            &DeleteOpts {
                propagation: Some(p),
                ..Default::default()
            },
        )
        .unwrap()
    };
    del(&mut i, "p", Propagation::Background);
    assert_eq!(i.store.len(), 1, "only the namespace remains");
    let p = mk(&mut i, "p", None, false);
    mk(&mut i, "c", Some(&p), false);
    del(&mut i, "p", Propagation::Orphan);
    let c = i
        .get(&req(&i, "", "configmaps", Some("ns"), Some("c")))
        .unwrap();
    assert!(c["metadata"].get("ownerReferences").is_none());
    // foreground waits on a blocking dependent that has a finalizer
    let p = mk(&mut i, "p2", None, false);
    let mut body = json!({"metadata": {"name": "c2", "finalizers": ["x/y"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "p2", "uid": p["metadata"]["uid"], "blockOwnerDeletion": true}]}});
    body["data"] = json!({});
    i.create(&a, &cm, body, &opts(), false).unwrap();
    let out = del(&mut i, "p2", Propagation::Foreground);
    assert!(matches!(out, Deleted::Pending(_)));
    let c2r = req(&i, "", "configmaps", Some("ns"), Some("c2"));
    let c2 = i.get(&c2r).unwrap();
    assert!(c2["metadata"]["deletionTimestamp"].is_string());
    let mut c2v = (*c2).clone();
    c2v["metadata"]["finalizers"] = json!([]);
    i.update(&a, &c2r, c2v, &opts()).unwrap();
    assert!(
        i.get(&req(&i, "", "configmaps", Some("ns"), Some("p2")))
            .is_err()
    );
}

#[test]
fn namespace_deletion_removes_contents() {
    let (mut i, a) = setup();
    let cm = req(&i, "", "configmaps", Some("ns"), None);
    i.create(&a, &cm, json!({"metadata": {"name": "x"}}), &opts(), false)
        .unwrap();
    let n = req(&i, "", "namespaces", None, Some("ns"));
    i.delete(&a, &n, &DeleteOpts::default()).unwrap();
    assert!(i.store.is_empty());
}
