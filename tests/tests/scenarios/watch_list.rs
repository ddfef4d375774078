//! A watch's initial state comes from a watch-list (`sendInitialEvents`) where the API server
//! offers it, and from a list then a watch where it does not (docs/design/initial-list.md):
//! either way the controller syncs every parent with every child in view.

use kmeta_tests::*;
use serde_json::{Value, json};

const CHILDREN: usize = 3;

fn three_children(_hook: &str, req: &Value) -> Reply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let children: Vec<Value> = (0..CHILDREN)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-{i}")}}))
        .collect();
    Reply::Json(json!({"status": {"observed": observed_configmaps(req)}, "children": children}))
}

/// kmeta-apiserver offers the watch-list: the child watch never lists. Then it refuses it, as
/// kube-apiserver with its `WatchList` feature gate off (422): a restarted controller falls
/// back to list-then-watch and every sync after the restart sees every child, also the one of
/// a parent created after it.
#[tokio::test]
async fn a_server_without_the_watch_list_is_listed_then_watched() -> anyhow::Result<()> {
    let mut s = Scenario::new("no-watch-list")
        .crd("Thing", "things")
        .hook(three_children)
        .controller(Cc::new("things-cc"))
        .parent("p", json!({}))
        .start()
        .await?;
    s.wait_parent("p", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    if s.real_cluster() {
        // a real cluster's API server cannot be switched: the default path ran above
        eprintln!("the fallback needs kmeta-apiserver's watch-list switch: checked there");
        return s.finish().await;
    }
    assert_eq!(
        s.server().unwrap().counters().count("list", "configmaps"),
        0,
        "the child watch listed although the server offers the watch-list"
    );
    s.stop_controller().await?;
    s.server().unwrap().set_watch_list(false);
    let before = s.server().unwrap().counters();
    let calls_before = s.hooks().count("sync");
    s.start_controller();
    s.parent("q", json!({})).await?;
    s.wait_parent("q", "all children observed", |p| {
        p["status"]["observed"] == CHILDREN
    })
    .await?;
    until("a sync of p after the restart", || {
        s.hooks().calls("sync")[calls_before..]
            .iter()
            .any(|c| c["parent"]["metadata"]["name"] == "p")
    })
    .await?;
    for call in &s.hooks().calls("sync")[calls_before..] {
        let parent = &call["parent"]["metadata"]["name"];
        let seen = observed_configmaps(call);
        assert!(
            seen == CHILDREN || (parent == "q" && seen == 0),
            "{parent} observed {seen} children after the restart"
        );
    }
    let server = s.server().unwrap();
    let d = server.counters().since(&before);
    assert!(d.get("watch", "configmaps", 422) >= 1, "{d:?}");
    assert!(d.count("list", "configmaps") >= 1, "{d:?}");
    assert_eq!(d.get("create", "configmaps", 409), 0, "{d:?}");
    server.set_watch_list(true);
    s.finish().await
}
