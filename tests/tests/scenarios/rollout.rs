//! Rolling updates (`RollingInPlace`, `RollingRecreate`) through ControllerRevisions: a
//! catset-style parent with two Cat children; the test plays the Cats' controller by writing
//! their status. A spec change moves one Cat at a time, each only once the Cat before it is
//! observed, up to date and Ready; the parent's `Updated` condition says where the rollout is,
//! and revisions no child needs any more are pruned.

use kmeta_tests::*;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// A CatSet makes Cats `<name>-0` and `<name>-1` with the CatSet's `spec.color`.
fn catset_hook(_hook: &str, req: &Value) -> Reply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let av = parent["apiVersion"].clone();
    let children: Vec<Value> = (0..2)
        .map(|i| {
            json!({"apiVersion": av, "kind": "Cat",
                   "metadata": {"name": format!("{name}-{i}")},
                   "spec": {"color": parent["spec"]["color"]}})
        })
        .collect();
    Reply::Json(json!({"status": {"cats": 2}, "children": children}))
}

/// Starts a CatSet controller whose Cats use `method`, gated on `Ready=True`.
async fn start(name: &str, method: &str) -> anyhow::Result<Running> {
    let mut s = Scenario::new(name)
        .crd("CatSet", "catsets")
        .crd("Cat", "cats")
        .hook(catset_hook)
        .prepare()
        .await?;
    let cats = json!([{"apiVersion": s.av, "resource": "cats",
        "updateStrategy": {"method": method,
            "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}}]);
    s.controller(Cc::new(&format!("{name}-cc")).patch(json!({"childResources": cats})))
        .await?;
    s.start_controller();
    Ok(s)
}

fn cats(s: &Running) -> Api<DynamicObject> {
    s.resource("Cat", "cats")
}

fn revisions(s: &Running) -> Api<DynamicObject> {
    s.api(
        "metacontroller.k8s.io/v1alpha1",
        "ControllerRevision",
        "controllerrevisions",
        Some(&s.ns),
    )
}

async fn list_revisions(s: &Running) -> anyhow::Result<Vec<Value>> {
    let list = revisions(s).list(&ListParams::default()).await?;
    list.items
        .into_iter()
        .map(|r| Ok(serde_json::to_value(r)?))
        .collect()
}

/// The Cat names a revision claims.
fn claimed(revision: &Value) -> Vec<String> {
    revision["children"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["names"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

/// The parent's `Updated` condition as (status, reason, message).
fn updated(parent: &Value) -> (String, String, String) {
    let cond = parent["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Updated"))
        .cloned()
        .unwrap_or_default();
    let f = |k: &str| cond[k].as_str().unwrap_or_default().to_owned();
    (f("status"), f("reason"), f("message"))
}

/// Plays the Cats' controller: Cat `name` reports its current generation as observed and
/// `Ready=<ready>`.
async fn report(s: &Running, name: &str, ready: &str) -> anyhow::Result<()> {
    let cat = s
        .wait_for(&cats(s), name, "the cat exists", |_| true)
        .await?;
    let status = json!({"status": {"observedGeneration": cat["metadata"]["generation"],
                                   "conditions": [{"type": "Ready", "status": ready}]}});
    cats(s)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

async fn color(s: &Running, name: &str) -> anyhow::Result<Value> {
    Ok(s.get(&cats(s), name).await?.unwrap_or_default()["spec"]["color"].clone())
}

/// Waits until the parent's `Updated` condition has `reason` and a message containing `text`.
async fn wait_updated(
    s: &Running,
    reason: &str,
    text: &str,
) -> anyhow::Result<(String, String, String)> {
    let what = format!("Updated condition {reason} ({text})");
    let p = s
        .wait_parent("cs", &what, |p| {
            let (_, r, m) = updated(p);
            r == reason && m.contains(text)
        })
        .await?;
    Ok(updated(&p))
}

/// The first revision of CatSet `cs` (spec black): its name, patch, claims, labels and owner.
fn assert_first_revision(s: &Running, rev: &Value) {
    let name = rev["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with(&format!("catsets.{}-", s.group)), "{name}");
    assert_eq!(rev["parentPatch"], json!({"spec": {"color": "black"}}));
    assert_eq!(claimed(rev), ["cs-0", "cs-1"]);
    assert_eq!(rev["children"][0]["apiGroup"], json!(s.group));
    assert_eq!(rev["children"][0]["kind"], "Cat");
    let labels = &rev["metadata"]["labels"];
    assert_eq!(labels["metacontroller.k8s.io/apiGroup"], json!(s.group));
    assert_eq!(labels["metacontroller.k8s.io/resource"], "catsets");
    assert!(labels["controller-uid"].is_string());
    let owner = &rev["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"], &owner["controller"]),
        (&json!("CatSet"), &json!("cs"), &json!(true))
    );
}

#[tokio::test]
async fn rolling_in_place_moves_one_child_at_a_time_and_rolls_back_to_its_revision()
-> anyhow::Result<()> {
    let mut s = start("roll-inplace", "RollingInPlace").await?;
    s.parent("cs", json!({"color": "black"})).await?;
    // first sync: every child is new, so all start on the first revision
    let (status, _, message) = wait_updated(
        &s,
        "OnLatestRevision",
        "latest ControllerRevision: catsets.",
    )
    .await?;
    assert_eq!(status, "True");
    let black = list_revisions(&s).await?;
    assert_eq!(black.len(), 1);
    let black = black[0].clone();
    let black_name = black["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(message, format!("latest ControllerRevision: {black_name}"));
    assert_first_revision(&s, &black);
    for cat in ["cs-0", "cs-1"] {
        report(&s, cat, "True").await?;
    }

    // a new spec: the first Cat moves, the second waits for it
    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "white"}}))
        .await?;
    wait_updated(
        &s,
        "RolloutWaiting",
        "child Cat cs-0 with RollingInPlace update strategy hasn't observed latest spec",
    )
    .await?;
    assert_eq!(color(&s, "cs-0").await?, "white");
    assert_eq!(color(&s, "cs-1").await?, "black", "only one child moved");
    let revs = list_revisions(&s).await?;
    assert_eq!(revs.len(), 2);
    let white = revs
        .iter()
        .find(|r| r["metadata"]["name"] != json!(black_name))
        .unwrap();
    assert_eq!(claimed(white), ["cs-0"]);
    // the hook is called once per live revision: the older one with its own spec (written over
    // the current parent) and, as in Metacontroller, every observed child
    let call = s
        .wait_call("sync", "a sync call for the black revision", |r| {
            r["parent"]["metadata"]["generation"] == 2 && r["parent"]["spec"]["color"] == "black"
        })
        .await?;
    let observed = call["children"][format!("Cat.{}", s.av)]
        .as_object()
        .map(|m| m.len());
    assert_eq!(observed, Some(2));
    // observed but not Ready: still waiting
    report(&s, "cs-0", "False").await?;
    wait_updated(&s, "RolloutWaiting", "child Cat cs-0 failed status check: \"Ready\" condition status is \"False\" (want \"True\")").await?;
    assert_eq!(color(&s, "cs-1").await?, "black", "only one child moved");

    // roll back while cs-1 is still on the black revision: the black revision is latest again
    // (the same object), and cs-0 moves back to it
    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "black"}}))
        .await?;
    // moving the last child ends the rollout: OnLatestRevision says every child is on the
    // latest revision (as in Metacontroller); whether it is Ready is for the hook's status
    let (_, _, message) = wait_updated(&s, "OnLatestRevision", "").await?;
    assert_eq!(message, format!("latest ControllerRevision: {black_name}"));
    assert_eq!(color(&s, "cs-0").await?, "black");
    let revs = list_revisions(&s).await?;
    assert_eq!(
        revs.len(),
        1,
        "the white revision is pruned once no child needs it"
    );
    assert_eq!(
        revs[0]["metadata"]["uid"], black["metadata"]["uid"],
        "no new ControllerRevision"
    );
    assert_eq!(claimed(&revs[0]), ["cs-1", "cs-0"]);
    assert_eq!(color(&s, "cs-1").await?, "black");
    s.finish().await
}

fn uid(o: &Value) -> Value {
    o["metadata"]["uid"].clone()
}

#[tokio::test]
async fn rolling_recreate_recreates_one_child_at_a_time() -> anyhow::Result<()> {
    let mut s = start("roll-recreate", "RollingRecreate").await?;
    s.parent("cs", json!({"color": "black"})).await?;
    wait_updated(&s, "OnLatestRevision", "").await?;
    let black_name = list_revisions(&s).await?[0]["metadata"]["name"].clone();
    let cs1 = s.wait_for(&cats(&s), "cs-1", "cs-1", |_| true).await?;
    for cat in ["cs-0", "cs-1"] {
        report(&s, cat, "True").await?;
    }

    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "white"}}))
        .await?;
    // cs-0 is deleted and recreated from the new revision; the new Cat is not Ready yet
    let missing = "child Cat cs-0 failed status check: required condition type missing: \"Ready\"";
    wait_updated(&s, "RolloutWaiting", missing).await?;
    let cs0 = s
        .wait_for(&cats(&s), "cs-0", "cs-0 white", |c| {
            c["spec"]["color"] == "white"
        })
        .await?;
    let now = s.get(&cats(&s), "cs-1").await?.unwrap();
    assert_eq!(
        (uid(&now), &now["spec"]["color"]),
        (uid(&cs1), &json!("black")),
        "only one child moved"
    );

    // cs-0 Ready: cs-1, the last child, moves (recreated), which ends the rollout
    report(&s, "cs-0", "True").await?;
    let now = s
        .wait_for(&cats(&s), "cs-1", "cs-1 white", |c| {
            c["spec"]["color"] == "white"
        })
        .await?;
    assert_ne!(uid(&now), uid(&cs1), "cs-1 was recreated");
    let still = s.get(&cats(&s), "cs-0").await?.unwrap();
    assert_eq!(uid(&still), uid(&cs0), "cs-0 was not touched again");

    let (status, _, message) = wait_updated(&s, "OnLatestRevision", "").await?;
    assert_eq!(status, "True");
    let revs = list_revisions(&s).await?;
    assert_eq!(revs.len(), 1, "the black revision is pruned");
    assert_eq!(
        message,
        format!(
            "latest ControllerRevision: {}",
            revs[0]["metadata"]["name"].as_str().unwrap()
        )
    );
    assert_ne!(revs[0]["metadata"]["name"], black_name);

    // back to black: the revision of that spec has the same name as before
    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "black"}}))
        .await?;
    wait_updated(&s, "RolloutWaiting", "child Cat cs-0").await?;
    let names: Vec<Value> = list_revisions(&s)
        .await?
        .iter()
        .map(|r| r["metadata"]["name"].clone())
        .collect();
    assert!(names.contains(&black_name), "{names:?} lacks {black_name}");
    assert_eq!(color(&s, "cs-1").await?, "white", "only one child moved");
    s.finish().await
}

#[tokio::test]
async fn in_place_children_update_together_without_revisions() -> anyhow::Result<()> {
    let mut s = start("roll-none", "InPlace").await?;
    s.parent("cs", json!({"color": "black"})).await?;
    s.wait_for(&cats(&s), "cs-1", "cs-1", |_| true).await?;
    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "white"}}))
        .await?;
    for cat in ["cs-0", "cs-1"] {
        // neither Ready nor observed: InPlace does not wait
        s.wait_for(&cats(&s), cat, "white", |c| c["spec"]["color"] == "white")
            .await?;
    }
    let parent = s.get(&s.parents(), "cs").await?.unwrap();
    assert_eq!(updated(&parent), Default::default(), "no Updated condition");
    assert!(
        list_revisions(&s).await?.is_empty(),
        "no ControllerRevision"
    );
    s.finish().await
}

/// `kmeta trace` names the ControllerRevision that claims each child while a rollout moves
/// them one at a time.
#[tokio::test]
async fn trace_names_the_revision_of_each_child() -> anyhow::Result<()> {
    use kmeta::{steer, trace};
    let mut s = start("roll-trace", "RollingInPlace").await?;
    s.parent("cs", json!({"color": "black"})).await?;
    wait_updated(
        &s,
        "OnLatestRevision",
        "latest ControllerRevision: catsets.",
    )
    .await?;
    for cat in ["cs-0", "cs-1"] {
        report(&s, cat, "True").await?;
    }
    s.merge_patch(&s.parents(), "cs", json!({"spec": {"color": "white"}}))
        .await?;
    wait_updated(&s, "RolloutWaiting", "hasn't observed latest spec").await?;
    let revs = list_revisions(&s).await?;
    let of = |cat: &str| {
        revs.iter()
            .find(|r| claimed(r).iter().any(|c| c == cat))
            .and_then(|r| r["metadata"]["name"].as_str())
            .map(str::to_owned)
    };
    let discovery = steer::discover(&s.client).await?;
    let cs = steer::resolve_in(&discovery, "catsets/cs", &s.ns)?;
    let t = trace::trace_parent(&s.client, &discovery, &cs).await?;
    let shown: Vec<(String, Option<String>)> = t
        .children
        .iter()
        .map(|c| {
            (
                c.name.rsplit('/').next().unwrap_or_default().to_owned(),
                c.revision.clone(),
            )
        })
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    for (cat, revision) in &shown {
        assert_eq!(revision, &of(cat), "{cat}");
    }
    assert_ne!(of("cs-0"), of("cs-1"), "one moved, one waits");
    assert!(trace::render_text(&t, false).contains("revision "));
    s.finish().await
}
