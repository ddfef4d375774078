//! A ServiceAccount per controller (`spec.serviceAccountName`, `--default-service-account`):
//! children written as the controller's ServiceAccount through impersonation, refused where it
//! may not write them, while kmeta's own identity would have written them. Authorization is on
//! in every scenario here, whatever `KMETA_TEST_RBAC` says.

use kmeta::ManagerConfig;
use kmeta::rbac::{Controller, cluster_role, controller_grants, service_account_binding};
use kmeta_tests::scenario::{Cc, Dc, Running, Scenario};
use kmeta_tests::{Authz, Reply};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// The sync hook of every controller here: each parent wants a ClusterRoleBinding
/// `<parent>-admin` granting cluster-admin to the user `admin-of-<parent>`.
fn cluster_admin_for_every_parent(hook: &str, body: &Value) -> Reply {
    if hook != "sync" {
        return Reply::Json(json!({}));
    }
    let name = body["parent"]["metadata"]["name"].as_str().unwrap_or("x");
    Reply::Json(json!({"children": [{
        "apiVersion": RBAC, "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{name}-admin")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": format!("admin-of-{name}")}],
    }]}))
}

/// A CompositeController of cluster-scoped `teams` (those labelled `ctl=<name>`) whose
/// children are ClusterRoleBindings (never updated: `OnDelete`).
fn team_controller(name: &str) -> Cc {
    Cc::new(name)
        .parent("teams")
        .selector(json!({"matchLabels": {"ctl": name}}))
        .patch(json!({"childResources": [{"apiVersion": RBAC, "resource": "clusterrolebindings"}]}))
}

/// The ServiceAccount `writer` in the scenario's namespace, bound (ClusterRoleBinding) to the
/// ClusterRole `kmeta rbac --controller` prints for `cc`, a CompositeController or (with
/// `kind` set) a DecoratorController.
async fn writer_for(s: &mut Running, cc: &Value) -> anyhow::Result<()> {
    let ns = s.ns.clone();
    s.create(
        "serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "writer", "namespace": ns}}),
    )
    .await?;
    let spec = cc["spec"].clone();
    let controller = match cc["kind"].as_str() {
        Some("DecoratorController") => {
            Controller::Decorator(Box::new(serde_json::from_value(spec)?))
        }
        _ => Controller::Composite(Box::new(serde_json::from_value(spec)?)),
    };
    let role_name = format!("{}-writer", s.id);
    let grants = controller_grants(&controller, &[]);
    s.create("clusterroles", cluster_role(&role_name, &grants))
        .await?;
    s.create(
        "clusterrolebindings",
        service_account_binding(&role_name, &ns, "writer"),
    )
    .await?;
    Ok(())
}

/// A cluster-scoped parent `name` labelled `ctl=<controller>`.
async fn team(s: &mut Running, name: &str, controller: &str) -> anyhow::Result<Value> {
    let av = s.av.clone();
    s.create(
        "teams",
        json!({"apiVersion": av, "kind": "Team",
               "metadata": {"name": name, "labels": {"ctl": controller}}}),
    )
    .await
}

fn bindings(s: &Running) -> Api<DynamicObject> {
    s.api(RBAC, "ClusterRoleBinding", "clusterrolebindings", None)
}

/// The `Synced` condition's message on team `name`, once it is `False` and `ok` holds for it.
async fn refusal_on(
    s: &Running,
    name: &str,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    let teams = s.api(&s.av, "Team", "teams", None);
    let team = s
        .wait_for(&teams, name, what, |t| {
            t["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "Synced"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(&ok)
                })
            })
        })
        .await?;
    let message = team["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    Ok(message)
}

#[tokio::test]
async fn a_cluster_role_binding_to_cluster_admin_is_refused_under_the_controllers_service_account()
-> anyhow::Result<()> {
    let mut s = Scenario::new("impersonate")
        .authz(Authz::Wildcard)
        .crd_with("Team", "teams", |crd| {
            crd["spec"]["scope"] = json!("Cluster")
        })
        .hook(cluster_admin_for_every_parent)
        .prepare()
        .await?;
    let ns = s.ns.clone();
    let open = s.controller(team_controller("open")).await?;
    let locked = team_controller("locked").patch(json!({
        "serviceAccountName": "writer", "serviceAccountNamespace": ns}));
    let locked = s.controller(locked).await?;
    writer_for(&mut s, &locked).await?;
    s.start_controller();
    let (open_1, locked_1) = (format!("{}-open-1", s.id), format!("{}-locked-1", s.id));
    team(&mut s, &open_1, "open").await?;
    team(&mut s, &locked_1, "locked").await?;

    // kmeta's own identity (deploy/rbac.yaml's wildcard role, Metacontroller's grant) may bind
    // cluster-admin: the controller naming no ServiceAccount gets its ClusterRoleBinding
    let open_binding = s
        .wait_for(
            &bindings(&s),
            &format!("{open_1}-admin"),
            "the open controller's binding",
            |_| true,
        )
        .await?;
    assert_eq!(open_binding["roleRef"]["name"], "cluster-admin");

    // the same hook under the locked controller's ServiceAccount, which holds what `kmeta rbac
    // --controller` grants it (create on clusterrolebindings, not cluster-admin's rights): refused
    // by the API server's escalation check, reported naming the verb, the resource and the
    // ServiceAccount, as an event and as the parent's condition
    let names_all = |text: &str| names_the_refusal(text, &ns);
    let event = s
        .wait_event("ChildWriteFailed naming the ServiceAccount", None, |e| {
            e["reason"] == "ChildWriteFailed"
                && e["regarding"]["name"] == locked_1.as_str()
                && e["note"].as_str().is_some_and(names_all)
        })
        .await?;
    assert_eq!(event["type"], "Warning");
    let message = refusal_on(
        &s,
        &locked_1,
        "Synced=False naming the ServiceAccount",
        names_all,
    )
    .await?;
    assert!(message.contains("forbidden"), "{message}");
    assert!(
        s.get(&bindings(&s), &format!("{locked_1}-admin"))
            .await?
            .is_none(),
        "no binding was written for the locked controller"
    );

    let open_name = open["metadata"]["name"].as_str().unwrap_or_default();
    under_the_lockdown(&mut s, open_name).await?;

    // no child of another parent or controller was touched by any of it
    let now = s
        .get(&bindings(&s), &format!("{open_1}-admin"))
        .await?
        .expect("the open controller's binding");
    assert_eq!(
        now["metadata"]["resourceVersion"], open_binding["metadata"]["resourceVersion"],
        "the first binding is as it was written"
    );
    s.finish().await
}

/// Whether a report of the refused binding names the verb, the resource and the ServiceAccount
/// `writer` of namespace `ns`.
fn names_the_refusal(text: &str, ns: &str) -> bool {
    text.contains("create clusterrolebindings.rbac.authorization.k8s.io")
        && text.contains(&format!("ServiceAccount {ns}/writer"))
}

/// `--default-service-account writer`: the controller `open`, naming no ServiceAccount, is
/// written as `writer` too. A cluster-scoped parent has no namespace to find it in, so without
/// spec.serviceAccountNamespace its new parent is refused (never written as kmeta itself); with
/// the namespace given, the binding is refused as the locked controller's was.
async fn under_the_lockdown(s: &mut Running, open_name: &str) -> anyhow::Result<()> {
    let ns = s.ns.clone();
    s.stop_controller().await?;
    s.start_controller_with(
        ManagerConfig::default().default_service_account(Some("writer".into())),
    );
    let open_2 = format!("{}-open-2", s.id);
    team(s, &open_2, "open").await?;
    let message = refusal_on(
        s,
        &open_2,
        "Synced=False: no namespace for the ServiceAccount",
        |m| m.contains("cluster-scoped") && m.contains("spec.serviceAccountNamespace"),
    )
    .await?;
    assert!(message.contains("--default-service-account"), "{message}");
    // with the namespace given, the lockdown's ServiceAccount is refused as the locked one was
    s.merge_patch(
        &s.controllers(),
        open_name,
        json!({"spec": {"serviceAccountNamespace": ns}}),
    )
    .await?;
    refusal_on(
        s,
        &open_2,
        "Synced=False naming the lockdown's ServiceAccount",
        |m| names_the_refusal(m, &ns),
    )
    .await?;
    assert!(
        s.get(&bindings(s), &format!("{open_2}-admin"))
            .await?
            .is_none()
    );
    Ok(())
}

#[tokio::test]
async fn children_are_written_as_the_controllers_service_account_under_kmeta_rbacs_role()
-> anyhow::Result<()> {
    let mut s = Scenario::new("impersonate-rbac")
        .authz(Authz::KmetaRbac)
        .crd("Thing", "things")
        .hook(|hook, body| {
            let name = body["parent"]["metadata"]["name"].as_str().unwrap_or("x");
            Reply::Json(match hook {
                "sync" => json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-cm")}, "data": {"k": "v"}}]}),
                _ => json!({}),
            })
        })
        .prepare()
        .await?;
    let cc = s
        .controller(Cc::new("writes").patch(json!({"serviceAccountName": "writer"})))
        .await?;
    writer_for(&mut s, &cc).await?;
    s.start_controller();
    s.parent("p", json!({})).await?;
    // written, by the ServiceAccount (in the parent's namespace): kmeta's own ClusterRole, as
    // `kmeta rbac` makes it, only watches ConfigMaps and may impersonate `writer`; a 403 of
    // kmeta's own identity would fail the scenario when it ends
    s.wait_child_where("p-cm", "the child ConfigMap", |c| c["data"]["k"] == "v")
        .await?;
    let roles = s.api(RBAC, "ClusterRole", "clusterroles", None);
    let role = s.get(&roles, "kmeta").await?.expect("kmeta's ClusterRole");
    let rules = role["rules"].as_array().cloned().unwrap_or_default();
    let on = |resource: &str| {
        rules
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == resource))
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        on("configmaps"),
        [json!({"apiGroups": [""], "resources": ["configmaps"],
                "verbs": ["get", "list", "watch"]})],
        "{role}"
    );
    assert_eq!(
        on("serviceaccounts"),
        [json!({"apiGroups": [""], "resources": ["serviceaccounts"],
                "resourceNames": ["writer"], "verbs": ["impersonate"]})],
        "{role}"
    );
    s.finish().await
}

#[tokio::test]
async fn related_objects_the_service_account_may_not_list_are_not_given_to_the_hook()
-> anyhow::Result<()> {
    let mut s = Scenario::new("impersonate-related")
        .authz(Authz::Wildcard)
        .crd("Thing", "things")
        .hook(|hook, body| match hook {
            "customize" => Reply::Json(json!({"relatedResources": [{
                "apiVersion": "v1", "resource": "secrets",
                "labelSelector": {"matchLabels": {"share": "yes"}}}]})),
            _ => {
                let seen: Vec<String> = body["related"]["Secret.v1"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                Reply::Json(json!({"status": {"secrets": seen}, "children": []}))
            }
        })
        .object(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "token", "labels": {"share": "yes"}},
                   "data": {"token": "c2VjcmV0"}}),
        )
        .prepare()
        .await?;
    let open = Cc::new("open")
        .hook("customize")
        .selector(json!({"matchLabels": {"ctl": "open"}}));
    s.controller(open).await?;
    let locked = Cc::new("locked")
        .hook("customize")
        .selector(json!({"matchLabels": {"ctl": "locked"}}))
        .patch(json!({"serviceAccountName": "writer"}));
    let locked = s.controller(locked).await?;
    // the ServiceAccount holds what `kmeta rbac --controller` grants without --related
    writer_for(&mut s, &locked).await?;
    s.start_controller();
    s.parent_labeled("open-p", json!({"ctl": "open"}), json!({}))
        .await?;
    s.parent_labeled("locked-p", json!({"ctl": "locked"}), json!({}))
        .await?;
    // kmeta's own identity reads the Secret (from its watch) and gives it to the hook
    s.wait_parent("open-p", "the Secret given to the hook", |p| {
        p["status"]["secrets"] == json!(["token"])
    })
    .await?;
    // under the ServiceAccount, which may not list Secrets, the sync stops before the hook and
    // says what to grant to whom
    let sa = format!("ServiceAccount {}/writer", s.ns);
    let p = s
        .wait_parent(
            "locked-p",
            "Synced=False: the ServiceAccount may not list secrets",
            |p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Synced"
                            && c["message"].as_str().is_some_and(|m| {
                                m.contains(&sa) && m.contains("may not list secrets")
                            })
                    })
                })
            },
        )
        .await?;
    assert!(p["status"].get("secrets").is_none(), "{p}");
    assert!(
        s.hooks()
            .calls("sync")
            .iter()
            .all(|c| c["parent"]["metadata"]["name"] != "locked-p"),
        "the sync hook of the locked controller was never called"
    );
    s.finish().await
}

#[tokio::test]
async fn a_decorator_controllers_attachments_are_written_as_its_service_account()
-> anyhow::Result<()> {
    let mut s = Scenario::new("impersonate-dc")
        .authz(Authz::KmetaRbac)
        .crd("Thing", "things")
        .hook(|_, body| {
            let name = body["object"]["metadata"]["name"].as_str().unwrap_or("x");
            Reply::Json(
                json!({"attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-att")}, "data": {"k": "v"}}]}),
            )
        })
        .prepare()
        .await?;
    let dc = s
        .decorator(Dc::new("decorates").patch(json!({"serviceAccountName": "writer"})))
        .await?;
    writer_for(&mut s, &dc).await?;
    s.start_controller();
    s.parent("t", json!({})).await?;
    // kmeta's own role (kmeta rbac) only watches ConfigMaps: the ServiceAccount wrote it, and a
    // 403 of kmeta's own identity would fail the scenario when it ends
    s.wait_child_where("t-att", "the attachment", |c| c["data"]["k"] == "v")
        .await?;
    s.finish().await
}
