//! Authentication, impersonation and RBAC authorization of a request when the server has them
//! on ([`crate::ServerConfig::auth`]), as kube-apiserver's filter chain does before any handler;
//! the APIs they bring (`SelfSubjectAccessReview`, `SubjectAccessReview`,
//! `SelfSubjectRulesReview`, the ServiceAccount `token` subresource); the checks of a write that
//! depend on the written object (RBAC escalation, OwnerReferencesPermissionEnforcement); and the
//! ClusterRole aggregation controller, run after every ClusterRole write.

use super::params::verb_of;
use super::route::Route;
use crate::authn::{Credential, Impersonation, UserInfo};
use crate::engine::{Req, WriteCheck, WriteOpts};
use crate::error::{ApiError, ApiResult, Target};
use crate::rbac::{self, Attributes, Policy, PolicyRule, RBAC_GROUP, RoleRef};
use crate::registry::Registry;
use crate::state::ServerState;
use crate::store::{Key, Storage};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode, header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

const AUTHZ_GROUP: &str = "authorization.k8s.io";

/// The attributes of a request (`RequestInfoFactory` and `GetAuthorizerAttributes`).
pub(super) fn attributes(
    route: &Route,
    method: &Method,
    q: &HashMap<String, String>,
    path: &str,
) -> Attributes {
    match route {
        Route::Resource {
            group,
            ns,
            plural,
            name,
            sub,
            ..
        } => {
            // a namespace is its own namespace
            let ns = match (group.as_str(), plural.as_str(), name) {
                ("", "namespaces", Some(n)) => n.clone(),
                _ => ns.clone().unwrap_or_default(),
            };
            let verb = verb_of(method, route, q);
            // a list or watch pinned to one name by `fieldSelector=metadata.name=x` is
            // authorized as a request for that name (so `resourceNames` can allow it)
            let pinned = match (verb, name, q.get("fieldSelector")) {
                ("list" | "watch", None, Some(f)) => crate::selector::FieldSelector::parse(f)
                    .ok()
                    .and_then(|s| s.exact_name().map(str::to_string)),
                _ => None,
            };
            let name = name.clone().or(pinned).unwrap_or_default();
            let mut a = Attributes::resource(verb, group, plural, &ns, &name);
            a.subresource = sub.clone().unwrap_or_default();
            a
        }
        _ => Attributes::non_resource(&method.as_str().to_ascii_lowercase(), path),
    }
}

/// The 403 of a denied request: `NewForbidden` of the attributes' resource and name with
/// `forbiddenMessage`, and the authorizer's reason after a colon when it gave one.
fn denied(a: &Attributes, user: &UserInfo, reason: &str) -> ApiError {
    let mut why = a.forbidden_message(&user.name);
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let (plural, name) = if a.resource_request {
        (a.resource.as_str(), a.name.as_str())
    } else {
        ("", "")
    };
    ApiError::forbidden_on(
        Target {
            group: &a.group,
            plural,
            name,
        },
        &why,
    )
}

/// The user a request's credentials name, or 401.
fn authenticate(state: &ServerState, request: &Request) -> ApiResult<UserInfo> {
    let Some(authn) = &state.authn else {
        return Ok(UserInfo::default());
    };
    // the x509 authenticator comes first in kube-apiserver's chain
    if let Some(crate::authn::ClientCertUser(u)) = request.extensions().get() {
        return Ok(u.clone().authenticated());
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match authn.credential(authorization) {
        Credential::User(u) => Ok(u),
        Credential::Anonymous => Ok(UserInfo::anonymous()),
        Credential::Unauthorized => Err(ApiError::unauthorized()),
        Credential::ServiceAccount(t) => {
            let key = Key {
                res: Arc::from("/serviceaccounts"),
                ns: t.ns.clone(),
                name: t.name.clone(),
            };
            let uid = state
                .lock()
                .store
                .get(&key)
                .and_then(|sa| crate::store::uid_of(&sa).map(str::to_string));
            // a token outlives neither its ServiceAccount nor a recreated one's
            match uid {
                Some(uid) if uid == t.uid => {
                    let mut u = UserInfo::service_account(&t.ns, &t.name);
                    u.uid = uid;
                    Ok(u.authenticated())
                }
                _ => Err(ApiError::unauthorized()),
            }
        }
    }
}

/// The identity after `Impersonate-*` headers, each asked for checked against the
/// `impersonate` verb (`filters.WithImpersonation`).
fn impersonate(policy: &Policy, acting: UserInfo, request: &Request) -> ApiResult<UserInfo> {
    let asked = Impersonation::from_headers(request.headers())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Some(asked) = asked else {
        return Ok(acting);
    };
    let mut checks = vec![];
    match UserInfo::service_account_of(&asked.user) {
        Some((ns, name)) => checks.push(Attributes::resource(
            "impersonate",
            "",
            "serviceaccounts",
            ns,
            name,
        )),
        None => checks.push(Attributes::resource(
            "impersonate",
            "",
            "users",
            "",
            &asked.user,
        )),
    }
    for g in &asked.groups {
        checks.push(Attributes::resource("impersonate", "", "groups", "", g));
    }
    if let Some(uid) = &asked.uid {
        checks.push(Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            uid,
        ));
    }
    for a in &checks {
        let d = policy.authorize(&acting, a);
        if !d.allowed {
            return Err(denied(a, &acting, &d.reason));
        }
    }
    Ok(asked.user_info())
}

/// Authenticate, impersonate and authorize a request: the 401/403/400 to answer when it is
/// refused; else the user is put in the request's extensions for the handlers.
pub(super) fn guard(
    state: &ServerState,
    route: &Route,
    q: &HashMap<String, String>,
    request: &mut Request,
) -> Option<Response> {
    state.authn.as_ref()?;
    let refused = |e: ApiError| {
        if e.code == 403 {
            state.record_denial(&e.message);
        }
        Some(e.into_response())
    };
    let acting = match authenticate(state, request) {
        Ok(u) => u,
        Err(e) => return refused(e),
    };
    let policy = Policy::from_store(&state.lock().store);
    let user = match impersonate(&policy, acting, request) {
        Ok(u) => u,
        Err(e) => return refused(e),
    };
    let a = attributes(route, request.method(), q, request.uri().path());
    let d = policy.authorize(&user, &a);
    if !d.allowed {
        return refused(denied(&a, &user, &d.reason));
    }
    request.extensions_mut().insert(user);
    None
}

/// An API authorization brings.
pub(super) enum AuthApi {
    /// An access or rules review (the plural).
    Review(String),
    /// The ServiceAccount `token` subresource (namespace, name).
    Token(String, String),
}

/// The API authorization brings that a request is for: access and rules reviews, and the
/// ServiceAccount `token` subresource. `None` when it is for none of them (or authorization
/// is off).
pub(super) fn auth_api(state: &ServerState, route: &Route) -> Option<AuthApi> {
    state.authn.as_ref()?;
    let Route::Resource {
        group,
        ns,
        plural,
        name,
        sub,
        ..
    } = route
    else {
        return None;
    };
    let review = group == AUTHZ_GROUP
        && matches!(
            plural.as_str(),
            "selfsubjectaccessreviews"
                | "subjectaccessreviews"
                | "localsubjectaccessreviews"
                | "selfsubjectrulesreviews"
        );
    if review {
        return Some(AuthApi::Review(plural.clone()));
    }
    match (group.as_str(), plural.as_str(), sub.as_deref(), ns, name) {
        ("", "serviceaccounts", Some("token"), Some(ns), Some(name)) => {
            Some(AuthApi::Token(ns.clone(), name.clone()))
        }
        _ => None,
    }
}

/// Serve an API authorization brings (POST only; 201 with the object and its `status`).
pub(super) async fn serve_auth_api(
    state: &ServerState,
    api: AuthApi,
    url_ns: Option<String>,
    request: Request,
) -> ApiResult<Response> {
    let user = request
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_default();
    if request.method() != Method::POST {
        return Err(ApiError::method_not_allowed(request.method().as_str()));
    }
    let body = axum::body::to_bytes(request.into_body(), 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
    let body: Value = if body.starts_with(b"k8s\x00") {
        crate::proto::decode(&body)
            .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))?
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!("error decoding request body as JSON: {e}"))
        })?
    };
    let out = match api {
        AuthApi::Token(ns, name) => issue_token(state, &ns, &name, body)?,
        AuthApi::Review(plural) => review_response(state, &user, &plural, url_ns.as_deref(), body)?,
    };
    let mut resp = (StatusCode::CREATED, out.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// The review object with its `status` filled in.
fn review_response(
    state: &ServerState,
    user: &UserInfo,
    plural: &str,
    url_ns: Option<&str>,
    mut body: Value,
) -> ApiResult<Value> {
    let policy = Policy::from_store(&state.lock().store);
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let status = if plural == "selfsubjectrulesreviews" {
        let ns = s(&spec, "namespace");
        let (rules, errors) = policy.rules_for(user, &ns);
        rules_review_status(&rules, &errors)
    } else {
        let subject = match plural {
            "subjectaccessreviews" | "localsubjectaccessreviews" => UserInfo {
                name: s(&spec, "user"),
                uid: s(&spec, "uid"),
                groups: spec
                    .get("groups")
                    .and_then(Value::as_array)
                    .map(|gs| {
                        gs.iter()
                            .filter_map(|g| g.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            _ => user.clone(),
        };
        let a = if let Some(r) = spec.get("resourceAttributes") {
            let mut ns = s(r, "namespace");
            if plural == "localsubjectaccessreviews" {
                let url_ns = url_ns.unwrap_or("");
                if !ns.is_empty() && ns != url_ns {
                    return Err(ApiError::bad_request(format!(
                        "spec.resourceAttributes.namespace must match namespace: {url_ns}"
                    )));
                }
                ns = url_ns.to_string();
            }
            let mut a = Attributes::resource(
                &s(r, "verb"),
                &s(r, "group"),
                &s(r, "resource"),
                &ns,
                &s(r, "name"),
            );
            a.subresource = s(r, "subresource");
            a
        } else if let Some(n) = spec.get("nonResourceAttributes") {
            Attributes::non_resource(&s(n, "verb"), &s(n, "path"))
        } else {
            return Err(ApiError::bad_request(
                "spec: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        };
        let d = policy.authorize(&subject, &a);
        let mut status = json!({"allowed": d.allowed});
        if !d.reason.is_empty() {
            status["reason"] = json!(d.reason);
        }
        status
    };
    body["status"] = status;
    if body.get("metadata").is_none() {
        body["metadata"] = json!({});
    }
    Ok(body)
}

/// A `SelfSubjectRulesReview` status of the rules a user holds.
fn rules_review_status(rules: &[PolicyRule], errors: &[String]) -> Value {
    let mut resource_rules = vec![];
    let mut non_resource_rules = vec![];
    for r in rules {
        if r.non_resource_urls.is_empty() {
            resource_rules.push(json!({
                "verbs": r.verbs, "apiGroups": r.api_groups,
                "resources": r.resources, "resourceNames": r.resource_names,
            }));
        } else {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(format!("[{}]", errors.join(", ")));
    }
    status
}

/// A TokenRequest for a ServiceAccount: a new bearer token authenticating as it.
fn issue_token(state: &ServerState, ns: &str, name: &str, mut body: Value) -> ApiResult<Value> {
    let key = Key {
        res: Arc::from("/serviceaccounts"),
        ns: ns.into(),
        name: name.into(),
    };
    let uid = state
        .lock()
        .store
        .get(&key)
        .and_then(|sa| crate::store::uid_of(&sa).map(str::to_string));
    let Some(uid) = uid else {
        return Err(ApiError::not_found(Target {
            group: "",
            plural: "serviceaccounts",
            name,
        }));
    };
    let authn = state
        .authn
        .as_ref()
        .ok_or_else(|| ApiError::internal("token requested with authentication off"))?;
    let token = authn.issue(ns, name, &uid);
    let seconds = body
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["kind"] = json!("TokenRequest");
    body["metadata"] = json!({"name": name, "namespace": ns});
    body["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(body)
}

/// The checks of a write by `user` through `req` that need the written object: the RBAC
/// escalation check on Roles, ClusterRoles and bindings, and OwnerReferencesPermissionEnforcement.
pub(super) fn write_check(
    state: &ServerState,
    user: Option<&UserInfo>,
    req: &Req,
) -> Option<WriteCheck> {
    let authn = state.authn.as_ref()?;
    let user = user?.clone();
    let owner_refs = authn.config.owner_references_permission_enforcement;
    let group = req.def.group.clone();
    let plural = req.def.plural.clone();
    let sub = req.sub.clone().unwrap_or_default();
    let ns = req.ns.clone().unwrap_or_default();
    let check = move |store: &Storage, registry: &Registry, new: &Value, old: Option<&Value>| {
        let target = WriteTarget {
            group: &group,
            plural: &plural,
            sub: &sub,
            ns: &ns,
            name: new
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(""),
        };
        let policy = Policy::from_store(store);
        if group == RBAC_GROUP && sub.is_empty() {
            no_escalation(&policy, &user, &target, new, old)?;
        }
        if owner_refs {
            owner_references_permitted(&policy, registry, &user, &target, new, old)?;
        }
        Ok(())
    };
    Some(WriteCheck(Arc::new(check)))
}

/// What a write writes.
struct WriteTarget<'a> {
    group: &'a str,
    plural: &'a str,
    sub: &'a str,
    ns: &'a str,
    name: &'a str,
}

impl WriteTarget<'_> {
    fn forbidden(&self, why: &str) -> ApiError {
        ApiError::forbidden_on(
            Target {
                group: self.group,
                plural: self.plural,
                name: self.name,
            },
            why,
        )
    }
}

/// Everything of an object but its metadata (what the escalation check compares: a write
/// changing only metadata, as the garbage collector's, is not checked).
fn without_metadata(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
    }
    c
}

/// The escalation check (`rbac/role/policybased`, `rbac/rolebinding/policybased`, and the
/// ClusterRole ones): a Role or ClusterRole needs every permission it grants or the
/// `escalate` verb; an aggregationRule needs cluster-admin's; a binding needs the `bind` verb
/// on its role or every permission the role grants.
fn no_escalation(
    policy: &Policy,
    user: &UserInfo,
    t: &WriteTarget<'_>,
    new: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    if old.is_some_and(|o| without_metadata(o) == without_metadata(new)) {
        return Ok(());
    }
    let superuser = user.groups.iter().any(|g| g == rbac::SUPERUSER_GROUP);
    if superuser {
        return Ok(());
    }
    let (held, errors) = policy.rules_for(user, t.ns);
    match t.plural {
        "roles" | "clusterroles" => {
            let escalate = Attributes::resource("escalate", RBAC_GROUP, t.plural, t.ns, t.name);
            if policy.authorize(user, &escalate).allowed {
                return Ok(());
            }
            if let Some(msg) = rbac::escalation(user, &held, &rbac::rules_of(new), &errors) {
                return Err(t.forbidden(&msg));
            }
            if t.plural == "clusterroles"
                && new.get("aggregationRule").is_some_and(|r| !r.is_null())
                && rbac::escalation(user, &held, &rbac::full_authority(), &errors).is_some()
            {
                return Err(
                    t.forbidden("must have cluster-admin privileges to use the aggregationRule")
                );
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref: RoleRef = new
                .get("roleRef")
                .and_then(|r| serde_json::from_value(r.clone()).ok())
                .unwrap_or_default();
            let bind =
                Attributes::resource("bind", RBAC_GROUP, role_ref.plural(), t.ns, &role_ref.name);
            if policy.authorize(user, &bind).allowed {
                return Ok(());
            }
            let rules = policy.role_ref_rules(&role_ref, t.ns).map_err(|e| {
                ApiError::not_found(Target {
                    group: RBAC_GROUP,
                    plural: role_ref.plural(),
                    name: &match e {
                        rbac::RbacError::RoleNotFound { name, .. } => name,
                        other => other.to_string(),
                    },
                })
            })?;
            match rbac::escalation(user, &held, rules, &errors) {
                Some(msg) => Err(t.forbidden(&msg)),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

fn owner_refs(v: &Value) -> Vec<Value> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn blocks(r: &Value) -> bool {
    r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
}

/// The OwnerReferencesPermissionEnforcement admission plugin (`plugin/pkg/admission/gc`):
/// changing ownerReferences needs `delete` on the object; each ownerReference newly setting
/// `blockOwnerDeletion` needs `update` on the owner's `finalizers` subresource. `pods/status`
/// is exempt.
fn owner_references_permitted(
    policy: &Policy,
    registry: &Registry,
    user: &UserInfo,
    t: &WriteTarget<'_>,
    new: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    if t.group.is_empty() && t.plural == "pods" && t.sub == "status" {
        return Ok(());
    }
    let new_refs = owner_refs(new);
    let old_refs = old.map(owner_refs).unwrap_or_default();
    let changing = match old {
        None => !new_refs.is_empty(),
        Some(_) => new_refs != old_refs,
    };
    if !changing {
        return Ok(());
    }
    let mut delete = Attributes::resource("delete", t.group, t.plural, t.ns, t.name);
    delete.subresource = t.sub.to_string();
    let d = policy.authorize(user, &delete);
    if !d.allowed {
        return Err(t.forbidden(&format!(
            "cannot set an ownerRef on a resource you can't delete: {}, <nil>",
            d.reason
        )));
    }
    let old_blocking: HashMap<&str, bool> = old_refs
        .iter()
        .filter_map(|r| Some((r.get("uid")?.as_str()?, blocks(r))))
        .collect();
    for r in new_refs.iter().filter(|r| blocks(r)) {
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        if old_blocking.get(uid) == Some(&true) {
            continue;
        }
        let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("");
        let (api_version, kind, owner) = (s("apiVersion"), s("kind"), s("name"));
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let plurals: Vec<&str> = registry
            .all()
            .iter()
            .filter(|def| def.group == g && def.kind == kind)
            .map(|def| def.plural.as_str())
            .collect();
        if plurals.is_empty() {
            return Err(t.forbidden(&format!(
                "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: {}, no matches for kind {kind:?} in version {:?}",
                d.reason,
                format!("{g}/{v}").trim_start_matches('/')
            )));
        }
        for plural in plurals {
            let mut update = Attributes::resource("update", g, plural, t.ns, owner);
            update.subresource = "finalizers".into();
            let d = policy.authorize(user, &update);
            if !d.allowed {
                return Err(t.forbidden(&format!(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}, <nil>",
                    d.reason
                )));
            }
        }
    }
    Ok(())
}

/// The ClusterRole aggregation controller, run after a ClusterRole write: every ClusterRole
/// with an aggregationRule gets the rules of the ClusterRoles it selects (repeated while that
/// changes something, for aggregated roles that are themselves selected).
pub(super) fn aggregate_cluster_roles(state: &ServerState) {
    state.write(|i| {
        let Some(def) = i.registry.lookup(RBAC_GROUP, "v1", "clusterroles").cloned() else {
            return;
        };
        let opts = WriteOpts {
            field_manager: "clusterrole-aggregation-controller".into(),
            ..Default::default()
        };
        for _ in 0..8 {
            let roles: Vec<_> = i
                .store
                .range(&def.storage_key(), None, None)
                .map(|(_, o)| o.value())
                .collect();
            let changes = rbac::aggregate(&roles);
            if changes.is_empty() {
                return;
            }
            for (name, rules) in changes {
                let req = Req {
                    def: def.clone(),
                    version: "v1".into(),
                    ns: None,
                    name: Some(name.clone()),
                    sub: None,
                };
                let Ok(current) = i.get(&req) else { continue };
                let mut new = (*current).clone();
                new["rules"] = rules;
                if let Err(e) = i.update(&state.admission, &req, new, &opts) {
                    tracing::warn!("aggregating ClusterRole {name}: {e}");
                }
            }
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::http::route::parse_path;

    fn attrs(method: Method, path_and_query: &str) -> Attributes {
        let uri: http::Uri = path_and_query.parse().unwrap();
        let q = super::super::params::query_map(&uri);
        attributes(&parse_path(uri.path()), &method, &q, uri.path())
    }

    #[test]
    fn requests_become_the_attributes_rbac_sees() {
        let a = attrs(Method::GET, "/api/v1/namespaces/team/pods?watch=true");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.name.as_str()),
            ("watch", "team", "")
        );
        // a namespace is in itself
        let a = attrs(Method::GET, "/api/v1/namespaces/team");
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("team", "team"));
        let a = attrs(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d/status",
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.group.as_str(),
                a.resource.as_str(),
                a.subresource.as_str()
            ),
            ("update", "apps", "deployments", "status")
        );
        let a = attrs(Method::DELETE, "/api/v1/namespaces/a/configmaps");
        assert_eq!(a.verb, "deletecollection");
        // a list or watch of one name by field selector is a request for that name
        let a = attrs(
            Method::GET,
            "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dcreds&watch=true",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "creds"));
        let a = attrs(
            Method::GET,
            "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%21%3Dcreds",
        );
        assert_eq!(a.name, "");
        // discovery is a non-resource request
        let a = attrs(Method::GET, "/apis/apps/v1");
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
    }
}
