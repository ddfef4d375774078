//! RBAC as kube-apiserver evaluates it (`plugin/pkg/auth/authorizer/rbac` and
//! `pkg/registry/rbac/validation`): which rule allows which request, which bindings apply to a
//! user, what the user holds in a namespace, whether one set of rules covers another (the
//! escalation check), the ClusterRole aggregation, and the bootstrap policy. Pure decisions on
//! JSON objects; the HTTP layer asks them.

use crate::authn::UserInfo;
use crate::store::Storage;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The API group of RBAC.
pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The group whose members every authorizer allows everything (kube-apiserver's privileged
/// group authorizer, ahead of RBAC).
pub(crate) const SUPERUSER_GROUP: &str = "system:masters";

/// Errors resolving RBAC objects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RbacError {
    /// A binding names a role that does not exist (worded as the lister's NotFound error).
    #[error("{kind}.rbac.authorization.k8s.io \"{name}\" not found")]
    RoleNotFound {
        /// `role` or `clusterrole`.
        kind: &'static str,
        /// Role name.
        name: String,
    },
    /// A roleRef of an unknown kind.
    #[error("unsupported role reference kind: \"{0}\"")]
    UnknownRoleKind(String),
}

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct PolicyRule {
    /// Verbs (`*` for all).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups (`""` core, `*` all).
    #[serde(default, rename = "apiGroups", skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/status`, `*/finalizers`, `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Object names (empty: all).
    #[serde(
        default,
        rename = "resourceNames",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
    /// Non-resource URLs (`/healthz`, `/apis/*`, `*`).
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// A resource rule.
    pub(crate) fn resource(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Default::default()
        }
    }

    /// A non-resource rule.
    pub(crate) fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            non_resource_urls: v(urls),
            ..Default::default()
        }
    }

    /// The rule as `rbacv1helpers.CompactString` prints it:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
    pub(crate) fn compact_string(&self) -> String {
        let mut parts = vec![];
        for (label, xs) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !xs.is_empty() {
                parts.push(format!("{label}:{}", go_quote_list(xs)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// A list of strings as Go's `%q` prints a `[]string`: `["a" "b"]`.
pub(crate) fn go_quote_list(xs: &[String]) -> String {
    let q: Vec<String> = xs.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", q.join(" "))
}

/// What a request asks to do (`authorizer.Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    /// Verb: `get`, `list`, `watch`, `create`, …, or the lowercase HTTP method of a
    /// non-resource request.
    pub verb: String,
    /// A resource request (else a non-resource URL).
    pub resource_request: bool,
    /// API group.
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Namespace (empty: cluster scope).
    pub namespace: String,
    /// Object name (empty for collections).
    pub name: String,
    /// URL path (non-resource requests).
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub(crate) fn resource(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Self {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    /// A non-resource request.
    pub(crate) fn non_resource(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    /// The denial as kube-apiserver words it (`responsewriters.forbiddenMessage`).
    pub(crate) fn forbidden_message(&self, user: &str) -> String {
        if !self.resource_request {
            return format!("User {user:?} cannot {} path {:?}", self.verb, self.path);
        }
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        if self.namespace.is_empty() {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                self.verb, self.group
            )
        } else {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                self.verb, self.group, self.namespace
            )
        }
    }
}

fn has(xs: &[String], x: &str) -> bool {
    xs.iter().any(|s| s == x)
}

fn has_all(set: &[String], xs: &[String]) -> bool {
    xs.iter().all(|x| has(set, x))
}

/// Whether a rule allows a request (`rbac.RuleAllows`).
pub(crate) fn rule_allows(a: &Attributes, rule: &PolicyRule) -> bool {
    let verb = has(&rule.verbs, "*") || has(&rule.verbs, &a.verb);
    if !verb {
        return false;
    }
    if !a.resource_request {
        return rule
            .non_resource_urls
            .iter()
            .any(|u| u == "*" || *u == a.path || url_prefix_covers(u, &a.path));
    }
    let group = has(&rule.api_groups, "*") || has(&rule.api_groups, &a.group);
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource = rule.resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!a.subresource.is_empty()
                && r.strip_prefix("*/").is_some_and(|sub| sub == a.subresource))
    });
    let name = rule.resource_names.is_empty() || has(&rule.resource_names, &a.name);
    group && resource && name
}

fn url_prefix_covers(owner: &str, path: &str) -> bool {
    owner
        .strip_suffix('*')
        .is_some_and(|p| path.starts_with(p.trim_end_matches('*')))
}

/// A rule split into rules of one group, resource, verb and name, or one URL and verb
/// (`validation.BreakdownRule`).
pub(crate) fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |x: &String| vec![x.clone()];
    let mut out = vec![];
    for g in &rule.api_groups {
        for r in &rule.resources {
            for v in &rule.verbs {
                let base = PolicyRule {
                    verbs: one(v),
                    api_groups: one(g),
                    resources: one(r),
                    ..Default::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for n in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(n),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for u in &rule.non_resource_urls {
        for v in &rule.verbs {
            out.push(PolicyRule {
                verbs: one(v),
                non_resource_urls: one(u),
                ..Default::default()
            });
        }
    }
    out
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|w| {
        has(owner, w)
            || w.split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls = sub.non_resource_urls.iter().all(|p| {
        owner
            .non_resource_urls
            .iter()
            .any(|o| o == p || url_prefix_covers(o, p))
    });
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && urls && names
}

/// Whether `owner` covers every permission of `servant`; the missing ones, broken down
/// (`validation.Covers`).
pub(crate) fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    servant
        .iter()
        .flat_map(breakdown)
        .filter(|s| !owner.iter().any(|o| rule_covers(o, s)))
        .collect()
}

/// Rules of one group, one resource and at most one name merged into one rule with all their
/// verbs (`validation.CompactRules`).
pub(crate) fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out = vec![];
    let mut simple: BTreeMap<(String, String, Option<String>), PolicyRule> = BTreeMap::new();
    for r in rules {
        let is_simple = r.resource_names.len() <= 1
            && r.non_resource_urls.is_empty()
            && r.api_groups.len() == 1
            && r.resources.len() == 1;
        if !is_simple {
            out.push(r);
            continue;
        }
        let key = (
            r.api_groups[0].clone(),
            r.resources[0].clone(),
            r.resource_names.first().cloned(),
        );
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(r.verbs),
            None => {
                simple.insert(key, r);
            }
        }
    }
    out.extend(simple.into_values());
    out
}

/// The escalation denial (`validation.ConfirmNoEscalation`): `None` when `held` covers
/// `wanted`, else the message naming the missing permissions.
pub(crate) fn escalation(
    user: &UserInfo,
    held: &[PolicyRule],
    wanted: &[PolicyRule],
    resolution_errors: &[String],
) -> Option<String> {
    let missing = covers(held, wanted);
    if missing.is_empty() {
        return None;
    }
    let lines: BTreeSet<String> = compact(missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quote_list(&user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !resolution_errors.is_empty() {
        msg.push_str(&format!(
            "; resolution errors: [{}]",
            resolution_errors.join(" ")
        ));
    }
    Some(msg)
}

/// The rules granting everything (cluster-admin's).
pub(crate) fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resource(&["*"], &["*"], &["*"]),
        PolicyRule::urls(&["*"], &["*"]),
    ]
}

/// A binding's subject.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
struct Subject {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

impl Subject {
    /// Whether the subject names the user (`appliesToUser`); `binding_ns` is the namespace of
    /// a RoleBinding (the default of a ServiceAccount subject's namespace), `""` for a
    /// ClusterRoleBinding.
    fn applies_to(&self, user: &UserInfo, binding_ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    /// As `describeSubject` prints it in an allowing reason.
    fn describe(&self, binding_ns: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() {
                binding_ns
            } else {
                &self.namespace
            };
            format!("{} {:?}", self.kind, format!("{}/{ns}", self.name))
        } else {
            format!("{} {:?}", self.kind, self.name)
        }
    }
}

/// A roleRef.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub(crate) struct RoleRef {
    /// `Role` or `ClusterRole`.
    #[serde(default)]
    pub kind: String,
    /// Role name.
    #[serde(default)]
    pub name: String,
}

impl RoleRef {
    /// The resource plural of the referenced kind (for the `bind` check).
    pub(crate) fn plural(&self) -> &'static str {
        if self.kind == "Role" {
            "roles"
        } else {
            "clusterroles"
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct BindingBody {
    #[serde(default, rename = "roleRef")]
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Vec<Subject>,
}

#[derive(Debug, Clone)]
struct Binding {
    name: String,
    namespace: String,
    body: BindingBody,
}

impl Binding {
    fn parse(obj: &Value) -> Option<Binding> {
        let body: BindingBody = serde_json::from_value(obj.clone()).ok()?;
        let meta = |f: &str| {
            obj.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Some(Binding {
            name: meta("name"),
            namespace: meta("namespace"),
            body,
        })
    }

    fn subject_for(&self, user: &UserInfo) -> Option<&Subject> {
        self.body
            .subjects
            .iter()
            .find(|s| s.applies_to(user, &self.namespace))
    }

    fn describe(&self, subject: &Subject) -> String {
        let r = &self.body.role_ref;
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                self.name,
                r.kind,
                r.name,
                subject.describe("")
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", self.name, self.namespace),
                r.kind,
                r.name,
                subject.describe(&self.namespace)
            )
        }
    }
}

/// The rules of a Role or ClusterRole object (unparsable rules are skipped, as they could not
/// have been stored by kube-apiserver).
pub(crate) fn rules_of(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| serde_json::from_value(r.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The outcome of authorizing a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// `RBAC: allowed by …`, or when denied the errors met resolving roles (`RBAC: …`), or
    /// `""`.
    pub reason: String,
}

/// The RBAC objects of the cluster at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    cluster_role_bindings: Vec<Binding>,
    role_bindings: Vec<Binding>,
}

fn storage_key(plural: &str) -> Arc<str> {
    Arc::from(format!("{RBAC_GROUP}/{plural}").as_str())
}

fn name_and_ns(obj: &Value) -> (String, String) {
    let meta = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (meta("namespace"), meta("name"))
}

impl Policy {
    /// The policy stored now.
    pub(crate) fn from_store(store: &Storage) -> Policy {
        let all = |plural: &str| {
            store
                .range(&storage_key(plural), None, None)
                .map(|(_, o)| o.value())
                .collect::<Vec<_>>()
        };
        Policy::from_objects(
            &all("roles"),
            &all("clusterroles"),
            &all("rolebindings"),
            &all("clusterrolebindings"),
        )
    }

    /// A policy of these objects.
    pub(crate) fn from_objects(
        roles: &[Arc<Value>],
        cluster_roles: &[Arc<Value>],
        role_bindings: &[Arc<Value>],
        cluster_role_bindings: &[Arc<Value>],
    ) -> Policy {
        Policy {
            roles: roles
                .iter()
                .map(|r| (name_and_ns(r), rules_of(r)))
                .collect(),
            cluster_roles: cluster_roles
                .iter()
                .map(|r| (name_and_ns(r).1, rules_of(r)))
                .collect(),
            role_bindings: role_bindings
                .iter()
                .filter_map(|b| Binding::parse(b))
                .collect(),
            cluster_role_bindings: cluster_role_bindings
                .iter()
                .filter_map(|b| Binding::parse(b))
                .collect(),
        }
    }

    /// The rules a roleRef grants in a namespace (`GetRoleReferenceRules`).
    pub(crate) fn role_ref_rules(
        &self,
        role_ref: &RoleRef,
        ns: &str,
    ) -> Result<&[PolicyRule], RbacError> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(ns.to_string(), role_ref.name.clone()))
                .map(Vec::as_slice)
                .ok_or_else(|| RbacError::RoleNotFound {
                    kind: "role",
                    name: role_ref.name.clone(),
                }),
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(Vec::as_slice)
                .ok_or_else(|| RbacError::RoleNotFound {
                    kind: "clusterrole",
                    name: role_ref.name.clone(),
                }),
            other => Err(RbacError::UnknownRoleKind(other.to_string())),
        }
    }

    /// Every binding applying to the user in `ns` (cluster bindings first), with the subject
    /// that matched.
    fn bindings_for<'a>(
        &'a self,
        user: &'a UserInfo,
        ns: &'a str,
    ) -> impl Iterator<Item = (&'a Binding, &'a Subject)> + 'a {
        let namespaced = self
            .role_bindings
            .iter()
            .filter(move |b| !ns.is_empty() && b.namespace == ns);
        self.cluster_role_bindings
            .iter()
            .chain(namespaced)
            .filter_map(move |b| b.subject_for(user).map(|s| (b, s)))
    }

    /// Authorize a request (the RBAC authorizer; `system:masters` is allowed by the privileged
    /// group authorizer before it, with no reason).
    pub(crate) fn authorize(&self, user: &UserInfo, a: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == SUPERUSER_GROUP) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut errors = vec![];
        for (b, s) in self.bindings_for(user, &a.namespace) {
            match self.role_ref_rules(&b.body.role_ref, &b.namespace) {
                Ok(rules) => {
                    if rules.iter().any(|r| rule_allows(a, r)) {
                        return Decision {
                            allowed: true,
                            reason: format!("RBAC: allowed by {}", b.describe(s)),
                        };
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let reason = match errors.as_slice() {
            [] => String::new(),
            [one] => format!("RBAC: {one}"),
            many => format!("RBAC: [{}]", many.join(", ")),
        };
        Decision {
            allowed: false,
            reason,
        }
    }

    /// Every rule the user holds in `ns` (`""`: cluster-wide only), and the errors resolving
    /// roles (`RulesFor`). Members of `system:masters` hold everything.
    pub(crate) fn rules_for(&self, user: &UserInfo, ns: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = vec![];
        let mut errors = vec![];
        if user.groups.iter().any(|g| g == SUPERUSER_GROUP) {
            rules.extend(full_authority());
        }
        for (b, _) in self.bindings_for(user, ns) {
            match self.role_ref_rules(&b.body.role_ref, &b.namespace) {
                Ok(r) => rules.extend(r.iter().cloned()),
                Err(e) => errors.push(e.to_string()),
            }
        }
        (rules, errors)
    }
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects the labels.
fn selects(selector: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_exprs = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|es| {
            es.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => label(key).is_some(),
                    Some("DoesNotExist") => label(key).is_none(),
                    _ => false,
                }
            })
        });
    by_labels && by_exprs
}

/// What the ClusterRole aggregation controller writes: for each ClusterRole with an
/// `aggregationRule` whose `rules` differ from the union of the rules of the ClusterRoles its
/// selectors select (by name, duplicates dropped), its name and the new `rules`.
pub(crate) fn aggregate(cluster_roles: &[Arc<Value>]) -> Vec<(String, Value)> {
    let mut by_name: Vec<&Value> = cluster_roles.iter().map(|r| &**r).collect();
    by_name.sort_by_key(|r| name_and_ns(r).1);
    let mut out = vec![];
    for role in &by_name {
        let Some(selectors) = role
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let own = name_and_ns(role).1;
        let mut rules: Vec<Value> = vec![];
        for other in &by_name {
            let name = name_and_ns(other).1;
            let empty = serde_json::Map::new();
            let labels = other
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            if name == own || !selectors.iter().any(|s| selects(s, labels)) {
                continue;
            }
            for r in other
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !rules.contains(r) {
                    rules.push(r.clone());
                }
            }
        }
        let current = role.get("rules").cloned().unwrap_or(json!([]));
        let new = Value::Array(rules);
        let same = current == new || (current.is_null() && new == json!([]));
        if !same {
            out.push((own, new));
        }
    }
    out
}

/// The ClusterRoles and ClusterRoleBindings kube-apiserver bootstraps that a client needs:
/// `cluster-admin` (bound to `system:masters`), `system:discovery`, `system:basic-user` (self
/// reviews) and `system:public-info-viewer`.
pub(crate) fn bootstrap_policy() -> Vec<(&'static str, Value)> {
    let meta = |name: &str| {
        json!({
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        })
    };
    let role = |name: &str, rules: Vec<PolicyRule>| json!({"metadata": meta(name), "rules": rules});
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"kind": "Group", "apiGroup": RBAC_GROUP, "name": g}))
            .collect();
        json!({
            "metadata": meta(name),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        })
    };
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery = vec![
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
    ];
    discovery.extend(health);
    vec![
        ("clusterroles", role("cluster-admin", full_authority())),
        (
            "clusterroles",
            role(
                "system:discovery",
                vec![PolicyRule::urls(&["get"], &discovery)],
            ),
        ),
        (
            "clusterroles",
            role(
                "system:basic-user",
                vec![PolicyRule::resource(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                )],
            ),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                vec![PolicyRule::urls(&["get"], &health)],
            ),
        ),
        (
            "clusterrolebindings",
            binding("cluster-admin", &["system:masters"]),
        ),
        (
            "clusterrolebindings",
            binding("system:discovery", &["system:authenticated"]),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", &["system:authenticated"]),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn obj(v: Value) -> Arc<Value> {
        Arc::new(v)
    }

    /// The documentation's `pod-reader` Role in `default`, bound to user `jane`, and the
    /// `secret-reader` ClusterRole bound to group `manager` cluster-wide and to `dave` in
    /// `development`.
    fn docs_policy() -> Policy {
        Policy::from_objects(
            &[obj(json!({
                "metadata": {"namespace": "default", "name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}]
            }))],
            &[obj(json!({
                "metadata": {"name": "secret-reader"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "watch", "list"]}]
            }))],
            &[
                obj(json!({
                    "metadata": {"namespace": "default", "name": "read-pods"},
                    "subjects": [{"kind": "User", "name": "jane", "apiGroup": RBAC_GROUP}],
                    "roleRef": {"kind": "Role", "name": "pod-reader", "apiGroup": RBAC_GROUP}
                })),
                obj(json!({
                    "metadata": {"namespace": "development", "name": "read-secrets"},
                    "subjects": [{"kind": "User", "name": "dave", "apiGroup": RBAC_GROUP}],
                    "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": RBAC_GROUP}
                })),
                obj(json!({
                    "metadata": {"namespace": "default", "name": "dangling"},
                    "subjects": [{"kind": "User", "name": "eve"}],
                    "roleRef": {"kind": "Role", "name": "gone"}
                })),
            ],
            &[obj(json!({
                "metadata": {"name": "read-secrets-global"},
                "subjects": [{"kind": "Group", "name": "manager", "apiGroup": RBAC_GROUP}],
                "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": RBAC_GROUP}
            }))],
        )
    }

    #[test]
    fn a_role_grants_only_in_its_namespace_and_only_its_verbs() {
        let p = docs_policy();
        let jane = user("jane", &["system:authenticated"]);
        let get = Attributes::resource("get", "", "pods", "default", "web");
        let d = p.authorize(&jane, &get);
        assert!(d.allowed);
        assert_eq!(
            d.reason,
            r#"RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane""#
        );
        for denied in [
            Attributes::resource("delete", "", "pods", "default", "web"),
            Attributes::resource("get", "", "pods", "kube-system", "web"),
            Attributes::resource("list", "", "pods", "", ""),
            Attributes::resource("get", "", "pods/log", "default", "web"),
            Attributes::resource("get", "apps", "pods", "default", "web"),
        ] {
            assert!(!p.authorize(&jane, &denied).allowed, "{denied:?}");
        }
    }

    #[test]
    fn a_cluster_role_grants_through_both_kinds_of_binding() {
        let p = docs_policy();
        let dave = user("dave", &[]);
        assert!(
            p.authorize(
                &dave,
                &Attributes::resource("get", "", "secrets", "development", "x")
            )
            .allowed
        );
        assert!(
            !p.authorize(
                &dave,
                &Attributes::resource("get", "", "secrets", "default", "x")
            )
            .allowed
        );
        let manager = user("bob", &["manager"]);
        let all = Attributes::resource("list", "", "secrets", "", "");
        let d = p.authorize(&manager, &all);
        assert_eq!(
            d.reason,
            r#"RBAC: allowed by ClusterRoleBinding "read-secrets-global" of ClusterRole "secret-reader" to Group "manager""#
        );
    }

    #[test]
    fn a_binding_to_a_missing_role_is_the_denials_reason() {
        let p = docs_policy();
        let d = p.authorize(
            &user("eve", &[]),
            &Attributes::resource("get", "", "pods", "default", "x"),
        );
        assert!(!d.allowed);
        assert_eq!(
            d.reason,
            r#"RBAC: role.rbac.authorization.k8s.io "gone" not found"#
        );
    }

    #[test]
    fn service_account_subjects_default_to_the_bindings_namespace() {
        let p = Policy::from_objects(
            &[],
            &[obj(
                json!({"metadata": {"name": "view"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}]}),
            )],
            &[obj(json!({
                "metadata": {"namespace": "ns1", "name": "b"},
                "subjects": [{"kind": "ServiceAccount", "name": "robot"}],
                "roleRef": {"kind": "ClusterRole", "name": "view"}
            }))],
            &[obj(json!({
                "metadata": {"name": "cb"},
                "subjects": [{"kind": "ServiceAccount", "name": "robot"}],
                "roleRef": {"kind": "ClusterRole", "name": "view"}
            }))],
        );
        let sa = user("system:serviceaccount:ns1:robot", &[]);
        let a = Attributes::resource("get", "apps", "deployments", "ns1", "d");
        let d = p.authorize(&sa, &a);
        assert_eq!(
            d.reason,
            r#"RBAC: allowed by RoleBinding "b/ns1" of ClusterRole "view" to ServiceAccount "robot/ns1""#
        );
        // a ClusterRoleBinding's ServiceAccount subject without namespace names nobody
        let elsewhere = Attributes::resource("get", "apps", "deployments", "ns2", "d");
        assert!(!p.authorize(&sa, &elsewhere).allowed);
    }

    #[test]
    fn rules_match_subresources_names_wildcards_and_urls() {
        let rule = |v: Value| serde_json::from_value::<PolicyRule>(v).unwrap();
        let status =
            rule(json!({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]}));
        assert!(rule_allows(
            &Attributes::resource("update", "", "pods/status", "a", "p"),
            &status
        ));
        assert!(!rule_allows(
            &Attributes::resource("update", "", "pods", "a", "p"),
            &status
        ));
        let finalizers = rule(
            json!({"apiGroups": ["x.io"], "resources": ["*/finalizers"], "verbs": ["update"]}),
        );
        assert!(rule_allows(
            &Attributes::resource("update", "x.io", "things/finalizers", "a", "t"),
            &finalizers
        ));
        assert!(!rule_allows(
            &Attributes::resource("update", "x.io", "things", "a", "t"),
            &finalizers
        ));
        let named = rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["my-config"], "verbs": ["get"]}),
        );
        assert!(rule_allows(
            &Attributes::resource("get", "", "configmaps", "a", "my-config"),
            &named
        ));
        assert!(!rule_allows(
            &Attributes::resource("get", "", "configmaps", "a", "other"),
            &named
        ));
        // a rule with resourceNames never allows a collection
        assert!(!rule_allows(
            &Attributes::resource("list", "", "configmaps", "a", ""),
            &named
        ));
        let star = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert!(rule_allows(
            &Attributes::resource("escalate", "rbac.authorization.k8s.io", "roles", "a", "r"),
            &star
        ));
        assert!(!rule_allows(
            &Attributes::non_resource("get", "/healthz"),
            &star
        ));
        let urls = rule(json!({"nonResourceURLs": ["/healthz", "/healthz/*"], "verbs": ["get"]}));
        assert!(rule_allows(
            &Attributes::non_resource("get", "/healthz"),
            &urls
        ));
        assert!(rule_allows(
            &Attributes::non_resource("get", "/healthz/etcd"),
            &urls
        ));
        assert!(!rule_allows(
            &Attributes::non_resource("post", "/healthz"),
            &urls
        ));
        assert!(!rule_allows(
            &Attributes::non_resource("get", "/metrics"),
            &urls
        ));
    }

    #[test]
    fn forbidden_messages_are_worded_as_kube_apiservers() {
        assert_eq!(
            Attributes::resource("list", "", "pods", "default", "").forbidden_message("bob"),
            r#"User "bob" cannot list resource "pods" in API group "" in the namespace "default""#
        );
        assert_eq!(
            Attributes::resource("update", "apps", "deployments/status", "", "")
                .forbidden_message("bob"),
            r#"User "bob" cannot update resource "deployments/status" in API group "apps" at the cluster scope"#
        );
        assert_eq!(
            Attributes::non_resource("get", "/metrics").forbidden_message("bob"),
            r#"User "bob" cannot get path "/metrics""#
        );
    }

    #[test]
    fn covering_breaks_rules_down_and_names_what_is_missing() {
        let held = vec![
            PolicyRule::resource(&["get", "list"], &[""], &["pods"]),
            PolicyRule::resource(&["update"], &["x.io"], &["*/finalizers"]),
        ];
        assert!(covers(&held, &[PolicyRule::resource(&["get"], &[""], &["pods"])]).is_empty());
        assert!(
            covers(
                &held,
                &[PolicyRule::resource(
                    &["update"],
                    &["x.io"],
                    &["things/finalizers"]
                )]
            )
            .is_empty()
        );
        let wanted = vec![PolicyRule::resource(
            &["get", "delete", "create"],
            &["", "apps"],
            &["pods"],
        )];
        let me = user("bob", &["dev", "system:authenticated"]);
        let msg = escalation(&me, &held, &wanted, &[]).unwrap();
        assert_eq!(
            msg,
            "user \"bob\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"create\"]}\n\
             {APIGroups:[\"apps\"], Resources:[\"pods\"], Verbs:[\"get\" \"delete\" \"create\"]}"
        );
        // a holder limited to names does not cover the whole resource
        let named = PolicyRule {
            resource_names: vec!["a".into()],
            ..PolicyRule::resource(&["get"], &[""], &["pods"])
        };
        assert_eq!(
            covers(
                &[named],
                &[PolicyRule::resource(&["get"], &[""], &["pods"])]
            )
            .len(),
            1
        );
        assert!(covers(&full_authority(), &wanted).is_empty());
    }

    #[test]
    fn superusers_are_allowed_everything_and_hold_full_authority() {
        let p = Policy::default();
        let admin = user("admin", &[SUPERUSER_GROUP]);
        let d = p.authorize(&admin, &Attributes::non_resource("delete", "/anything"));
        assert_eq!((d.allowed, d.reason.as_str()), (true, ""));
        assert_eq!(p.rules_for(&admin, "x").0, full_authority());
        assert!(
            !p.authorize(
                &user("nobody", &[]),
                &Attributes::resource("get", "", "pods", "a", "b")
            )
            .allowed
        );
    }

    #[test]
    fn aggregation_collects_the_selected_roles_rules() {
        // the documentation's `monitoring` ClusterRole and a role labelled for it
        let monitoring = obj(json!({
            "metadata": {"name": "monitoring"},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}
            ]},
            "rules": []
        }));
        let endpoints = obj(json!({
            "metadata": {"name": "monitoring-endpoints",
                         "labels": {"rbac.example.com/aggregate-to-monitoring": "true"}},
            "rules": [{"apiGroups": [""], "resources": ["services", "endpointslices", "pods"], "verbs": ["get", "list", "watch"]}]
        }));
        let other = obj(
            json!({"metadata": {"name": "other"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]}),
        );
        let out = aggregate(&[monitoring.clone(), endpoints.clone(), other]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "monitoring");
        assert_eq!(out[0].1, endpoints["rules"]);
        // an aggregated role already up to date is not written
        let mut done = (*monitoring).clone();
        done["rules"] = endpoints["rules"].clone();
        assert!(aggregate(&[obj(done), endpoints]).is_empty());
    }

    #[test]
    fn match_expressions_select_like_label_selectors() {
        let labels = json!({"a": "1", "b": "2"});
        let labels = labels.as_object().unwrap();
        let sel = |v: Value| selects(&v, labels);
        assert!(sel(
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]})
        ));
        assert!(!sel(
            json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]})
        ));
        assert!(sel(
            json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]})
        ));
        assert!(!sel(
            json!({"matchExpressions": [{"key": "c", "operator": "Exists"}]})
        ));
        assert!(sel(json!({})));
    }
}
