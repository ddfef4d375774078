//! Authentication, impersonation and RBAC authorization (`TestServerBuilder::rbac`,
//! `kmeta-apiserver --authorization-mode=RBAC`), checked with kube::Client against the examples
//! of the Kubernetes documentation ("Using RBAC Authorization") and with kubectl v1.32
//! (`auth can-i`, `--as`, a forbidden `get`, `create token`).
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kmeta_apiserver::{AuthConfig, TestServer};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

/// Users of the token file: jane and dave of the documentation, bob in group `manager`, and
/// `imp` who may impersonate jane.
const TOKENS: &str =
    "jane-token,jane,1\ndave-token,dave,2\nbob-token,bob,3,\"manager,staff\"\nimp-token,imp,4\n";

async fn server() -> TestServer {
    let auth = AuthConfig::default().with_token_file(TOKENS).unwrap();
    TestServer::builder().auth(auth).start().await.unwrap()
}

fn status(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other}"),
    }
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

/// The documentation's examples: Role `pod-reader` in `default` bound to jane, ClusterRole
/// `secret-reader` bound to dave in `development` and to group `manager` cluster-wide.
async fn docs_policy(s: &TestServer) {
    let admin = s.client();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    create(&ns, json!({"metadata": {"name": "development"}})).await;
    create(
        &Api::<Role>::namespaced(admin.clone(), "default"),
        json!({
            "metadata": {"namespace": "default", "name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}]
        }),
    )
    .await;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "default"),
        json!({
            "metadata": {"name": "read-pods", "namespace": "default"},
            "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": "rbac.authorization.k8s.io"}
        }),
    )
    .await;
    create(
        &Api::<ClusterRole>::all(admin.clone()),
        json!({
            "metadata": {"name": "secret-reader"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "watch", "list"]}]
        }),
    )
    .await;
    create(
        &Api::<RoleBinding>::namespaced(admin.clone(), "development"),
        json!({
            "metadata": {"name": "read-secrets", "namespace": "development"},
            "subjects": [{"kind": "User", "name": "dave", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": "rbac.authorization.k8s.io"}
        }),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(admin),
        json!({
            "metadata": {"name": "read-secrets-global"},
            "subjects": [{"kind": "Group", "name": "manager", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": "rbac.authorization.k8s.io"}
        }),
    )
    .await;
}

#[tokio::test]
async fn roles_and_bindings_grant_what_the_documentation_says_and_nothing_more() {
    let s = server().await;
    docs_policy(&s).await;
    let jane = s.client_with_token("jane-token").unwrap();
    let pods: Api<Pod> = Api::namespaced(jane.clone(), "default");
    pods.list(&ListParams::default()).await.unwrap();
    // not in another namespace, and not other verbs
    let e = status(
        Api::<Pod>::namespaced(jane.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert_eq!(
        e.message,
        r#"pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "kube-system""#
    );
    let e = status(
        pods.delete("web", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"pods "web" is forbidden: User "jane" cannot delete resource "pods" in API group "" in the namespace "default""#
    );
    let e = status(
        Api::<Pod>::all(jane.clone())
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"pods is forbidden: User "jane" cannot list resource "pods" in API group "" at the cluster scope"#
    );
    // a ClusterRole through a RoleBinding: only in the binding's namespace
    let dave = s.client_with_token("dave-token").unwrap();
    Api::<Secret>::namespaced(dave.clone(), "development")
        .list(&ListParams::default())
        .await
        .unwrap();
    let e = status(
        Api::<Secret>::namespaced(dave, "default")
            .get("x")
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"secrets "x" is forbidden: User "dave" cannot get resource "secrets" in API group "" in the namespace "default""#
    );
    // through a ClusterRoleBinding to a group: everywhere
    let bob = s.client_with_token("bob-token").unwrap();
    Api::<Secret>::all(bob)
        .list(&ListParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn requests_without_valid_credentials_are_401_or_anonymous() {
    let s = server().await;
    let wrong = s.client_with_token("not-a-token").unwrap();
    let e = status(
        Api::<ConfigMap>::default_namespaced(wrong)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );
    // no credentials: system:anonymous, which system:public-info-viewer lets read /version only
    let anonymous = kube::Client::try_from(kube::Config::new(s.url().parse().unwrap())).unwrap();
    anonymous.apiserver_version().await.unwrap();
    let e = status(
        Api::<ConfigMap>::default_namespaced(anonymous.clone())
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"configmaps is forbidden: User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "default""#
    );
    let req = http::Request::get("/apis").body(vec![]).unwrap();
    let e = status(anonymous.request_text(req).await.unwrap_err());
    assert_eq!(
        e.message,
        r#"forbidden: User "system:anonymous" cannot get path "/apis""#
    );
    // with anonymous requests refused, 401
    let closed = TestServer::builder()
        .auth(AuthConfig {
            anonymous: false,
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let none = kube::Client::try_from(kube::Config::new(closed.url().parse().unwrap())).unwrap();
    assert_eq!(
        status(none.apiserver_version().await.unwrap_err()).code,
        401
    );
}

#[tokio::test]
async fn a_client_certificate_authenticates_its_common_name_and_organizations() {
    let auth = AuthConfig::default().with_token_file(TOKENS).unwrap();
    let s = TestServer::builder()
        .auth(auth)
        .tls(true)
        .start()
        .await
        .unwrap();
    assert!(s.url().starts_with("https://127.0.0.1:"));
    docs_policy(&s).await;
    // CN carol, O manager: the group's ClusterRoleBinding applies
    let carol = s.client_with_certificate("carol", Some("manager")).unwrap();
    Api::<Secret>::all(carol.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let e = status(
        Api::<Pod>::all(carol)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"pods is forbidden: User "carol" cannot list resource "pods" in API group "" at the cluster scope"#
    );
    // a certificate of system:masters is a superuser, as on a real cluster
    let root = s
        .client_with_certificate("root", Some("system:masters"))
        .unwrap();
    Api::<Pod>::all(root)
        .list(&ListParams::default())
        .await
        .unwrap();
    // without a certificate the same TLS server still takes tokens
    let jane = s.client_with_token("jane-token").unwrap();
    Api::<Pod>::default_namespaced(jane)
        .list(&ListParams::default())
        .await
        .unwrap();
    // a certificate of another CA does not complete the handshake
    let other = TestServer::builder()
        .rbac(true)
        .tls(true)
        .start()
        .await
        .unwrap();
    let (cert, key) = other
        .client_certificate("mallory", Some("system:masters"))
        .unwrap();
    let mut config = kube::Config::new(s.url().parse().unwrap());
    config.root_cert = Some(vec![rustls_pemfile_der(&s.ca_pem().unwrap())]);
    use base64::Engine as _;
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    config.auth_info.client_certificate_data = Some(b64(&cert));
    config.auth_info.client_key_data = Some(b64(&key).into());
    let mallory = kube::Client::try_from(config).unwrap();
    let err = Api::<Pod>::all(mallory)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "refused in the handshake: {err}"
    );
}

/// The DER of a one-certificate PEM.
fn rustls_pemfile_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

#[tokio::test]
async fn a_service_account_token_authenticates_while_the_service_account_exists() {
    let s = server().await;
    let admin = s.client();
    let sas: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    create(&sas, json!({"metadata": {"name": "robot"}})).await;
    // the ServiceAccount groups: a binding to system:serviceaccounts:default grants it
    create(
        &Api::<RoleBinding>::default_namespaced(admin.clone()),
        json!({
            "metadata": {"name": "sa-view"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts:default", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": "rbac.authorization.k8s.io"}
        }),
    )
    .await;
    create(
        &Api::<ClusterRole>::all(admin.clone()),
        json!({"metadata": {"name": "secret-reader"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}),
    )
    .await;
    // a TokenRequest, as `kubectl create token` sends it
    let req = http::Request::post("/api/v1/namespaces/default/serviceaccounts/robot/token")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).unwrap())
        .unwrap();
    let answer: Value = admin.request(req).await.unwrap();
    let token = answer["status"]["token"].as_str().unwrap().to_string();
    let robot = s.client_with_token(&token).unwrap();
    Api::<Secret>::default_namespaced(robot.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let e = status(
        Api::<Secret>::namespaced(robot.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"secrets is forbidden: User "system:serviceaccount:default:robot" cannot list resource "secrets" in API group "" in the namespace "kube-system""#
    );
    // the other way to a token, and the end of both with their ServiceAccount
    let second = s.service_account_token("default", "robot").unwrap();
    sas.delete("robot", &DeleteParams::default()).await.unwrap();
    for t in [token, second] {
        let c = s.client_with_token(&t).unwrap();
        let e = status(
            Api::<Secret>::default_namespaced(c)
                .list(&ListParams::default())
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, 401);
    }
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_on_each_identity() {
    let s = server().await;
    docs_policy(&s).await;
    create(
        &Api::<ClusterRole>::all(s.client()),
        json!({"metadata": {"name": "impersonate-jane"},
               "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["jane"]}]}),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(s.client()),
        json!({"metadata": {"name": "imp"},
               "subjects": [{"kind": "User", "name": "imp", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "ClusterRole", "name": "impersonate-jane", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    let url: http::Uri = s.url().parse().unwrap();
    let as_user = |user: &str, groups: Option<Vec<String>>| {
        let mut c = kube::Config::new(url.clone());
        c.auth_info.token = Some("imp-token".to_string().into());
        c.auth_info.impersonate = Some(user.to_string());
        c.auth_info.impersonate_groups = groups;
        kube::Client::try_from(c).unwrap()
    };
    // as jane: jane's rights, not imp's
    let jane = as_user("jane", None);
    Api::<Pod>::default_namespaced(jane.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let e = status(
        Api::<Pod>::namespaced(jane, "kube-system")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert!(
        e.message.contains(r#"User "jane" cannot list"#),
        "{}",
        e.message
    );
    // not bob, and no group jane's rule does not name
    let e = status(
        Api::<Pod>::default_namespaced(as_user("bob", None))
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"users "bob" is forbidden: User "imp" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    let e = status(
        Api::<Pod>::default_namespaced(as_user("jane", Some(vec!["system:masters".into()])))
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"groups "system:masters" is forbidden: User "imp" cannot impersonate resource "groups" in API group "" at the cluster scope"#
    );
}

#[tokio::test]
async fn an_aggregated_cluster_role_collects_the_rules_of_the_roles_it_selects() {
    let s = server().await;
    let roles: Api<ClusterRole> = Api::all(s.client());
    // the documentation's aggregated ClusterRole `monitoring`
    create(
        &roles,
        json!({
            "metadata": {"name": "monitoring"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}]},
            "rules": []
        }),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(s.client()),
        json!({"metadata": {"name": "bob-monitors"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "ClusterRole", "name": "monitoring", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    let bob = s.client_with_token("bob-token").unwrap();
    let services: Api<Service> = Api::all(bob);
    assert_eq!(
        status(services.list(&ListParams::default()).await.unwrap_err()).code,
        403
    );
    create(
        &roles,
        json!({
            "metadata": {"name": "monitoring-endpoints", "labels": {"rbac.example.com/aggregate-to-monitoring": "true"}},
            "rules": [{"apiGroups": [""], "resources": ["services", "endpointslices", "pods"], "verbs": ["get", "list", "watch"]}]
        }),
    )
    .await;
    let monitoring = roles.get("monitoring").await.unwrap();
    let rules = monitoring.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0].resources.as_deref().unwrap(),
        ["services", "endpointslices", "pods"]
    );
    services.list(&ListParams::default()).await.unwrap();
    // a role losing its label leaves the aggregate
    roles
        .patch(
            "monitoring-endpoints",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"rbac.example.com/aggregate-to-monitoring": null}}}),
            ),
        )
        .await
        .unwrap();
    let rules = roles
        .get("monitoring")
        .await
        .unwrap()
        .rules
        .unwrap_or_default();
    assert!(rules.is_empty(), "{rules:?}");
    assert_eq!(
        status(services.list(&ListParams::default()).await.unwrap_err()).code,
        403
    );
}

/// bob may manage Roles and RoleBindings in `default` and read pods there.
async fn role_manager(s: &TestServer) {
    create(
        &Api::<Role>::default_namespaced(s.client()),
        json!({"metadata": {"name": "role-manager"}, "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
        ]}),
    )
    .await;
    create(
        &Api::<RoleBinding>::default_namespaced(s.client()),
        json!({"metadata": {"name": "bob-manages"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "role-manager", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
}

#[tokio::test]
async fn a_role_granting_more_than_its_author_holds_needs_the_escalate_verb() {
    let s = server().await;
    role_manager(&s).await;
    let bob_roles: Api<Role> = Api::default_namespaced(s.client_with_token("bob-token").unwrap());
    // what bob holds he may grant
    create(
        &bob_roles,
        json!({"metadata": {"name": "reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    )
    .await;
    // more is refused, naming what is missing
    let more: Role = serde_json::from_value(json!({"metadata": {"name": "deleter"}, "rules": [
        {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete"]}
    ]}))
    .unwrap();
    let e = status(
        bob_roles
            .create(&PostParams::default(), &more)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "roles.rbac.authorization.k8s.io \"deleter\" is forbidden: user \"bob\" (groups=[\"manager\" \"staff\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
    );
    // an update adding a permission is checked too
    let mut reader = bob_roles.get("reader").await.unwrap();
    reader.rules.as_mut().unwrap()[0]
        .verbs
        .push("delete".into());
    assert_eq!(
        status(
            bob_roles
                .replace("reader", &PostParams::default(), &reader)
                .await
                .unwrap_err()
        )
        .code,
        403
    );
    // with the escalate verb he may
    create(
        &Api::<Role>::default_namespaced(s.client()),
        json!({"metadata": {"name": "escalator"}, "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}]}),
    )
    .await;
    create(
        &Api::<RoleBinding>::default_namespaced(s.client()),
        json!({"metadata": {"name": "bob-escalates"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "escalator", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    bob_roles
        .create(&PostParams::default(), &more)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_binding_to_a_role_its_author_does_not_hold_needs_the_bind_verb() {
    let s = server().await;
    role_manager(&s).await;
    let bindings: Api<RoleBinding> =
        Api::default_namespaced(s.client_with_token("bob-token").unwrap());
    let to = |role: &str, name: &str| -> RoleBinding {
        serde_json::from_value(json!({"metadata": {"name": name},
            "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}],
            "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"}}))
        .unwrap()
    };
    create(
        &Api::<ClusterRole>::all(s.client()),
        json!({"metadata": {"name": "pod-lister"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
    )
    .await;
    // a role whose permissions bob holds in `default`
    bindings
        .create(&PostParams::default(), &to("pod-lister", "ok"))
        .await
        .unwrap();
    // cluster-admin he does not hold
    let e = status(
        bindings
            .create(&PostParams::default(), &to("cluster-admin", "admin"))
            .await
            .unwrap_err(),
    );
    assert!(
        e.message.starts_with(
            "rolebindings.rbac.authorization.k8s.io \"admin\" is forbidden: user \"bob\" (groups=[\"manager\" \"staff\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
        ),
        "{}",
        e.message
    );
    // the bind verb on that one ClusterRole lets him
    create(
        &Api::<Role>::default_namespaced(s.client()),
        json!({"metadata": {"name": "binder"}, "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]}),
    )
    .await;
    create(
        &Api::<RoleBinding>::default_namespaced(s.client()),
        json!({"metadata": {"name": "bob-binds"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "binder", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    bindings
        .create(&PostParams::default(), &to("cluster-admin", "admin"))
        .await
        .unwrap();
}

#[tokio::test]
async fn block_owner_deletion_needs_update_on_the_owners_finalizers() {
    let s = server().await;
    let admin_cms: Api<ConfigMap> = Api::default_namespaced(s.client());
    let owner = create(&admin_cms, json!({"metadata": {"name": "owner"}})).await;
    let uid = owner.metadata.uid.unwrap();
    create(
        &Api::<Role>::default_namespaced(s.client()),
        json!({"metadata": {"name": "cm-writer"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete", "get"]}]}),
    )
    .await;
    create(
        &Api::<RoleBinding>::default_namespaced(s.client()),
        json!({"metadata": {"name": "bob-writes"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "cm-writer", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::default_namespaced(s.client_with_token("bob-token").unwrap());
    let child = |name: &str, block: bool| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": true, "blockOwnerDeletion": block}
        ]}}))
        .unwrap()
    };
    cms.create(&PostParams::default(), &child("plain", false))
        .await
        .unwrap();
    let e = status(
        cms.create(&PostParams::default(), &child("blocking", true))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        r#"configmaps "blocking" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"#
    );
    create(
        &Api::<Role>::default_namespaced(s.client()),
        json!({"metadata": {"name": "cm-finalizers"}, "rules": [{"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"], "resourceNames": ["owner"]}]}),
    )
    .await;
    create(
        &Api::<RoleBinding>::default_namespaced(s.client()),
        json!({"metadata": {"name": "bob-finalizes"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "Role", "name": "cm-finalizers", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    cms.create(&PostParams::default(), &child("blocking", true))
        .await
        .unwrap();
    // off, the same write passes without the finalizers permission
    let off = TestServer::builder()
        .auth(AuthConfig {
            owner_references_permission_enforcement: false,
            ..AuthConfig::default().with_token_file(TOKENS).unwrap()
        })
        .start()
        .await
        .unwrap();
    let owner = create(
        &Api::<ConfigMap>::default_namespaced(off.client()),
        json!({"metadata": {"name": "owner"}}),
    )
    .await;
    create(
        &Api::<ClusterRole>::all(off.client()),
        json!({"metadata": {"name": "cm"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]}),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(off.client()),
        json!({"metadata": {"name": "bob-cm"},
               "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
               "roleRef": {"kind": "ClusterRole", "name": "cm", "apiGroup": "rbac.authorization.k8s.io"}}),
    )
    .await;
    let mut c = child("blocking", true);
    c.metadata.owner_references.as_mut().unwrap()[0].uid = owner.metadata.uid.unwrap();
    Api::<ConfigMap>::default_namespaced(off.client_with_token("bob-token").unwrap())
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
}

#[tokio::test]
async fn access_reviews_answer_for_the_caller_and_for_another_subject() {
    let s = server().await;
    docs_policy(&s).await;
    let post = |client: kube::Client, path: &'static str, body: Value| async move {
        let req = http::Request::post(path)
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        client.request::<Value>(req).await.unwrap()
    };
    let jane = s.client_with_token("jane-token").unwrap();
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}})
    };
    let yes = post(
        jane.clone(),
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        review("list", "default"),
    )
    .await;
    assert_eq!(yes["status"]["allowed"], true);
    assert_eq!(
        yes["status"]["reason"],
        r#"RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane""#
    );
    let no = post(
        jane.clone(),
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        review("delete", "default"),
    )
    .await;
    assert_eq!(no["status"]["allowed"], false);
    // a SubjectAccessReview needs create on subjectaccessreviews: jane may not, the admin may
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "dave", "resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "development"}}});
    let req = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&sar).unwrap())
        .unwrap();
    assert_eq!(
        status(jane.request::<Value>(req).await.unwrap_err()).code,
        403
    );
    let answer = post(
        s.client(),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        sar,
    )
    .await;
    assert_eq!(answer["status"]["allowed"], true);
    // the rules jane holds in default
    let rules = post(
        jane,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}}),
    )
    .await;
    let resource_rules = rules["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"] == json!(["pods"])
                && r["verbs"] == json!(["get", "watch", "list"])),
        "{rules}"
    );
}

/// `kubectl auth can-i <args>`: its answer, checked against its exit code (0 for yes, 1 for no).
fn can_i(kc: &std::path::Path, args: &[&str]) -> String {
    let all: Vec<&str> = ["auth", "can-i"].iter().chain(args).copied().collect();
    let (allowed, out, err) = common::kubectl(kc, &all, None);
    let answer = out.trim().to_owned();
    assert_eq!(
        allowed,
        answer == "yes",
        "can-i {args:?} answered {answer:?}: {err}"
    );
    answer
}

#[test]
fn kubectl_auth_can_i_and_a_forbidden_get_or_skips_without_kubectl() {
    use common::*;
    if !have_kubectl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let s = start_with(&[
        "--tls",
        "--authorization-mode=RBAC",
        "--token-auth-file",
        tokens.to_str().unwrap(),
    ]);
    let kc = s.kubeconfig.as_path();
    let policy = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {namespace: default, name: pod-reader}
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "watch", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read-pods, namespace: default}
subjects:
- kind: User
  name: jane
  apiGroup: rbac.authorization.k8s.io
roleRef:
  kind: Role
  name: pod-reader
  apiGroup: rbac.authorization.k8s.io
"#;
    ok(kc, &["apply", "-f", "-"], Some(policy));
    // the admin (system:masters) can do everything
    assert_eq!(can_i(kc, &["delete", "nodes"]), "yes");
    assert_eq!(can_i(kc, &["list", "pods", "--as", "jane"]), "yes");
    assert_eq!(
        can_i(kc, &["list", "pods", "--as", "jane", "-n", "kube-system"]),
        "no"
    );
    assert_eq!(can_i(kc, &["create", "pods", "--as", "jane"]), "no");
    // the forbidden get, as kubectl prints it
    let (success, _, err) = kubectl(
        kc,
        &["get", "pods", "-n", "kube-system", "--as", "jane"],
        None,
    );
    assert!(!success);
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "kube-system""#
    );
    // the same with jane's own token
    let (success, _, err) = kubectl(kc, &["get", "secrets", "--token", "jane-token"], None);
    assert!(!success);
    assert!(
        err.contains(r#"secrets is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "default""#),
        "{err}"
    );
    // what jane may do in default
    let list = ok(kc, &["auth", "can-i", "--list", "--as", "jane"], None);
    let pods = list
        .lines()
        .find(|l| l.starts_with("pods "))
        .unwrap_or_else(|| panic!("no pods line in:\n{list}"));
    assert!(pods.contains("[get watch list]"), "{pods}");
    // a ServiceAccount token from `kubectl create token`, used by kubectl
    ok(kc, &["create", "serviceaccount", "robot"], None);
    let token = ok(kc, &["create", "token", "robot"], None);
    let (success, _, err) = kubectl(kc, &["get", "pods", "--token", token.trim()], None);
    assert!(!success);
    assert!(
        err.contains(r#"User "system:serviceaccount:default:robot" cannot list resource "pods""#),
        "{err}"
    );
    assert_eq!(
        can_i(
            kc,
            &[
                "list",
                "pods",
                "--as",
                "system:serviceaccount:default:robot"
            ]
        ),
        "no"
    );
    // a RoleBinding to the ServiceAccount, and it may
    // the documentation's kubectl create commands (protobuf bodies)
    ok(
        kc,
        &[
            "create",
            "rolebinding",
            "robot-reads",
            "--role=pod-reader",
            "--serviceaccount=default:robot",
        ],
        None,
    );
    assert_eq!(
        can_i(
            kc,
            &[
                "list",
                "pods",
                "--as",
                "system:serviceaccount:default:robot"
            ]
        ),
        "yes"
    );
    ok(kc, &["get", "pods", "--token", token.trim()], None);
    ok(
        kc,
        &[
            "create",
            "clusterrole",
            "pod-reader",
            "--verb=get,list,watch",
            "--resource=pods",
        ],
        None,
    );
    ok(
        kc,
        &[
            "create",
            "clusterrolebinding",
            "root-cluster-admin-binding",
            "--clusterrole=cluster-admin",
            "--user=root",
        ],
        None,
    );
    assert_eq!(
        can_i(kc, &["delete", "secrets", "-A", "--as", "root"]),
        "yes"
    );
    ok(
        kc,
        &[
            "create",
            "role",
            "configmap-updater",
            "--verb=update",
            "--resource=configmaps",
            "--resource-name=my-configmap",
        ],
        None,
    );
    ok(
        kc,
        &[
            "create",
            "rolebinding",
            "dave-updates",
            "--role=configmap-updater",
            "--user=dave",
        ],
        None,
    );
    assert_eq!(
        can_i(kc, &["update", "configmaps/my-configmap", "--as", "dave"]),
        "yes"
    );
    assert_eq!(
        can_i(kc, &["update", "configmaps/other", "--as", "dave"]),
        "no"
    );
    // an aggregated ClusterRole from kubectl, filled from a labelled one
    ok(
        kc,
        &[
            "create",
            "clusterrole",
            "monitoring",
            "--aggregation-rule=rbac.example.com/aggregate-to-monitoring=true",
        ],
        None,
    );
    let endpoints = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: monitoring-endpoints\n  labels: {rbac.example.com/aggregate-to-monitoring: \"true\"}\nrules:\n- apiGroups: [\"\"]\n  resources: [\"services\", \"endpointslices\", \"pods\"]\n  verbs: [\"get\", \"list\", \"watch\"]\n";
    ok(kc, &["apply", "-f", "-"], Some(endpoints));
    let monitoring = get_json(kc, &["clusterrole", "monitoring"]);
    assert_eq!(
        monitoring["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.example.com/aggregate-to-monitoring"],
        "true"
    );
    assert_eq!(
        monitoring["rules"][0]["resources"],
        serde_json::json!(["services", "endpointslices", "pods"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_authenticates_with_a_client_certificate_or_skips_without_kubectl() {
    use base64::Engine as _;
    if !common::have_kubectl() {
        return;
    }
    let s = TestServer::builder()
        .rbac(true)
        .tls(true)
        .start()
        .await
        .unwrap();
    docs_policy(&s).await;
    let (cert, key) = s.client_certificate("jane", Some("dev")).unwrap();
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let kubeconfig = s.kubeconfig_yaml_for(None).replace(
        "  user: {}\n",
        &format!(
            "  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cert),
            b64(&key)
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, kubeconfig).unwrap();
    let run = |args: &'static [&'static str]| {
        let kc = kc.clone();
        tokio::task::spawn_blocking(move || common::kubectl(&kc, args, None))
    };
    let (ok, out, err) = run(&["get", "pods", "-n", "default"]).await.unwrap();
    assert!(ok, "{err}");
    assert!(
        err.contains("No resources found in default namespace."),
        "{out}{err}"
    );
    let (ok, _, err) = run(&["get", "pods", "-n", "kube-system"]).await.unwrap();
    assert!(!ok);
    assert_eq!(
        err.trim(),
        r#"Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "kube-system""#
    );
    let (_, out, _) = run(&["auth", "can-i", "watch", "pods"]).await.unwrap();
    assert_eq!(out.trim(), "yes");
}
