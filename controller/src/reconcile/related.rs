//! The related objects of a parent, shared by every controller kind: the customize hook's rules
//! (cached per parent UID and generation), the shared watches they read, and the selection of
//! Metacontroller's rule combinations for hook versions v1 and v2. A kind describes its side in
//! a [`RelatedSource`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::api::HookVersion;
use crate::hook::HookClient;
use crate::hook::wire::{self, RelatedResourceRule};
use crate::object::meta_str;
use crate::reconcile::core::{Context, SyncError, Writer};
use crate::runtime::cache::{Change, Informer};
use crate::runtime::resources::Resolved;
use crate::runtime::selector::{self, SelectorError};

/// What a sync used that its owner must listen to: the related watches it subscribed to first,
/// with receivers that hold every change since.
#[derive(Default)]
pub struct Used {
    /// Newly used related resources and their change receivers.
    pub subscribed: Vec<(Resolved, broadcast::Receiver<Change>)>,
}

/// Cached customize answers: parent UID → (generation, rules, fetched at).
pub type CustomizeCache = HashMap<String, (i64, Vec<RelatedResourceRule>, Instant)>;

/// What the related-object code needs of a controller: its context, how it is sent to the
/// customize hook, its hooks' version, whether its parents are namespaced, and the state it
/// keeps (the customize cache, the related watches it listens to).
pub struct RelatedSource<'a> {
    /// Shared context.
    pub ctx: &'a Context,
    /// The controller object as sent in hook requests.
    pub controller: &'a Value,
    /// The customize hook, if declared.
    pub customize: Option<&'a HookClient>,
    /// The wire version of the related map (the sync hook's).
    pub version: HookVersion,
    /// Whether the parent (target) resource is namespaced.
    pub parent_namespaced: bool,
    /// Customize cache.
    pub cache: &'a std::sync::Mutex<CustomizeCache>,
    /// Related watches the controller listens to, by watch key.
    pub watches: &'a std::sync::Mutex<HashMap<String, Arc<Informer>>>,
    /// The identity the related objects are read as: a ServiceAccount must be allowed to
    /// `list` what the hook is given (the objects come from kmeta's shared watches).
    pub reader: &'a Writer,
}

/// The UIDs of the parents whose cached customize rules read resource `r`, as a set: callers
/// test every cached parent against it, once each.
pub fn parents_reading(cache: &std::sync::Mutex<CustomizeCache>, r: &Resolved) -> HashSet<String> {
    match cache.lock() {
        Ok(c) => c
            .iter()
            .filter(|(_, (_, rules, _))| {
                rules
                    .iter()
                    .any(|x| x.api_version == r.api.api_version && x.resource == r.api.plural)
            })
            .map(|(uid, _)| uid.clone())
            .collect(),
        Err(_) => HashSet::new(),
    }
}

/// The key of a parent in the hook clients' response caches: `kind/namespace/name`.
pub fn cache_key(parent: &Value) -> String {
    format!(
        "{}/{}/{}",
        parent
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        meta_str(parent, "namespace"),
        meta_str(parent, "name")
    )
}

/// Step: related objects chosen by the customize hook (cached per parent UID + generation).
pub async fn call_customize(
    c: &RelatedSource<'_>,
    parent: &Value,
    used: &mut Used,
) -> Result<Map<String, Value>, SyncError> {
    let Some(hook) = c.customize else {
        return Ok(Map::new());
    };
    let uid = meta_str(parent, "uid").to_owned();
    let generation = parent
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let ttl = c.ctx.config.customize_cache_ttl;
    let cached = c.cache.lock().ok().and_then(|cache| {
        cache
            .get(&uid)
            .filter(|(g, _, at)| *g == generation && at.elapsed() < ttl)
            .map(|(_, r, _)| r.clone())
    });
    let rules = match cached {
        Some(r) => r,
        None => {
            let req = wire::customize_request(c.controller, parent);
            let rules = hook.customize(&cache_key(parent), &req).await?;
            if let Ok(mut cache) = c.cache.lock() {
                cache.insert(uid, (generation, rules.clone(), Instant::now()));
            }
            rules
        }
    };
    // Metacontroller selects by the customize hook's version and keys the map by the sync hook's.
    let version = hook.version();
    let mut objects = Vec::new();
    let mut groups = Vec::new();
    for rule in &rules {
        let r = c.ctx.resources.get(&rule.api_version, &rule.resource)?;
        groups.push(r.group_key());
        let inf = related_informer(c, &r, used)?;
        let ns_labels = if rule.namespace_selector.is_some() {
            let nsr = c.ctx.resources.get("v1", "namespaces")?;
            let nsi = related_informer(c, &nsr, used)?;
            nsi.list()
                .iter()
                .map(|n| (meta_str(n, "name").to_owned(), selector::labels_of(n)))
                .collect()
        } else {
            HashMap::new()
        };
        let selected = select_related(
            rule,
            parent,
            c.parent_namespaced,
            version,
            r.namespaced,
            &inf.list(),
            &ns_labels,
        )
        .map_err(|e| SyncError::Related(e.to_string()))?;
        may_read(c, &r, &selected).await?;
        objects.extend(selected);
    }
    Ok(wire::object_map(
        c.version,
        c.parent_namespaced,
        &groups,
        objects.iter(),
    ))
}

/// Under a ServiceAccount: `Ok` only when it may `list` resource `r` in every namespace (the
/// cluster scope for a cluster-scoped resource) an object of `selected` is in, as a
/// `SelfSubjectAccessReview` made as it answers (kept [`crate::reconcile::identity::READ_ACCESS_TTL`]). The related objects
/// come from kmeta's own watches; this keeps a hook from being handed what the controller's
/// ServiceAccount could not read itself.
async fn may_read(
    c: &RelatedSource<'_>,
    r: &Resolved,
    selected: &[Value],
) -> Result<(), SyncError> {
    let Some(sa) = &c.reader.identity else {
        return Ok(());
    };
    let namespaces: BTreeSet<&str> = selected.iter().map(|o| meta_str(o, "namespace")).collect();
    for ns in namespaces {
        let identities = &c.ctx.identities;
        let allowed = match identities.known_read_access(sa, &r.watch_key(), ns) {
            Some(a) => a,
            None => {
                let a = access_review(&c.reader.client, r, ns).await?;
                identities.remember_read_access(sa, &r.watch_key(), ns, a);
                a
            }
        };
        if !allowed {
            let resource = match r.api.group.as_str() {
                "" => r.api.plural.clone(),
                g => format!("{}.{g}", r.api.plural),
            };
            let scope = match ns {
                "" => "at the cluster scope".to_owned(),
                ns => format!("in namespace {ns}"),
            };
            return Err(SyncError::Related(format!(
                "relatedResources {}/{}: {sa} (the controller's ServiceAccount) may not list {resource} {scope}; grant it that (kmeta rbac --controller --related) or change the customize hook",
                r.api.api_version, r.api.plural
            )));
        }
    }
    Ok(())
}

/// Whether the client's user may `list` `r` in `ns` (`""`: the cluster scope): a
/// `SelfSubjectAccessReview` (every authenticated user may make one).
async fn access_review(client: &kube::Client, r: &Resolved, ns: &str) -> Result<bool, SyncError> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("list".into()),
                group: Some(r.api.group.clone()),
                resource: Some(r.api.plural.clone()),
                namespace: Some(ns.to_owned()).filter(|n| !n.is_empty()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api
        .create(&kube::api::PostParams::default(), &review)
        .await
        .map_err(crate::reconcile::core::api_err(format!(
            "checking access to related {}",
            r.watch_key()
        )))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The shared watch for a related resource. The first use subscribes to its changes and hands
/// the receiver to the owner in `used` (no change after this point is lost). Fails with
/// [`SyncError::RelatedNotSynced`] until the watch's first list completed.
fn related_informer(
    c: &RelatedSource<'_>,
    r: &Resolved,
    used: &mut Used,
) -> Result<Arc<Informer>, SyncError> {
    let key = r.watch_key();
    let inf = {
        let mut map = c
            .watches
            .lock()
            .map_err(|_| SyncError::Related("related watch table poisoned".into()))?;
        match map.get(&key) {
            Some(i) => i.clone(),
            None => {
                let i = c.ctx.informers.get(r);
                used.subscribed.push((r.clone(), i.subscribe()));
                map.insert(key.clone(), i.clone());
                i
            }
        }
    };
    if inf.is_synced() {
        Ok(inf)
    } else {
        Err(SyncError::RelatedNotSynced(key))
    }
}

/// Where a related rule looks for objects of a namespaced resource.
enum Scope<'a> {
    /// Every namespace.
    All,
    /// One namespace.
    Namespace(&'a str),
    /// The namespaces whose labels match a selector.
    Namespaces(LabelSelector),
}

/// Why a related-resource rule cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// `names` with a selector.
    #[error("names cannot be combined with labelSelector or namespaceSelector")]
    NamesWithSelector,
    /// `namespace` with `namespaceSelector`.
    #[error("namespace cannot be combined with namespaceSelector")]
    NamespaceWithSelector,
    /// `namespaceSelector` for a cluster-scoped resource.
    #[error("namespaceSelector needs a namespaced resource")]
    SelectorOnClusterScoped,
    /// `namespaceSelector` for a namespaced parent under hook v1.
    #[error("namespaceSelector with a namespaced parent needs hook version v2")]
    SelectorNeedsV2,
    /// A v1 hook of a namespaced parent asks for another namespace.
    #[error("a namespaced parent with hook v1 can only read namespace {parent:?}, not {asked:?}")]
    OtherNamespace {
        /// The parent's namespace.
        parent: String,
        /// The namespace the rule names.
        asked: String,
    },
    /// A selector of the rule is invalid.
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

/// A related-resource rule that cannot be followed, with the rule named.
#[derive(Debug, thiserror::Error)]
#[error("relatedResources {api_version}/{resource}: {error}")]
pub struct RelatedRuleError {
    /// The rule's `apiVersion`.
    pub api_version: String,
    /// The rule's `resource`.
    pub resource: String,
    /// What is wrong.
    pub error: RuleError,
}

/// Metacontroller's `determineSelectionType` and the namespace rules of `GetRelatedObjects`:
/// where a rule looks. A v1 hook with a namespaced parent and a namespaced related resource only
/// sees the parent's namespace; everything else (v2, a cluster-scoped parent, a cluster-scoped
/// related resource) may look everywhere, or in the `namespace` or namespaces the rule names.
/// (Metacontroller lists every namespace for a v1 `names` rule without `namespace` but only
/// resyncs on changes in the parent's namespace; kmeta keeps that rule to the parent's
/// namespace, as Metacontroller's documentation says.)
fn related_scope<'a>(
    rule: &'a RelatedResourceRule,
    parent_ns: &'a str,
    parent_namespaced: bool,
    version: HookVersion,
    related_namespaced: bool,
) -> Result<Scope<'a>, RuleError> {
    let names = rule.names.as_deref().is_some_and(|n| !n.is_empty());
    let ns_rule = rule.namespace.as_deref().filter(|n| !n.is_empty());
    if names && (rule.label_selector.is_some() || rule.namespace_selector.is_some()) {
        return Err(RuleError::NamesWithSelector);
    }
    if ns_rule.is_some() && rule.namespace_selector.is_some() {
        return Err(RuleError::NamespaceWithSelector);
    }
    let v1_local = version == HookVersion::V1 && parent_namespaced && related_namespaced;
    if let Some(v) = &rule.namespace_selector {
        if !related_namespaced {
            return Err(RuleError::SelectorOnClusterScoped);
        }
        if v1_local {
            return Err(RuleError::SelectorNeedsV2);
        }
        let sel = selector::decode(v, "namespaceSelector")?;
        return Ok(Scope::Namespaces(sel));
    }
    if !related_namespaced {
        return Ok(Scope::All);
    }
    match ns_rule {
        Some(n) if v1_local && n != parent_ns => Err(RuleError::OtherNamespace {
            parent: parent_ns.to_owned(),
            asked: n.to_owned(),
        }),
        Some(n) => Ok(Scope::Namespace(n)),
        None if v1_local => Ok(Scope::Namespace(parent_ns)),
        None => Ok(Scope::All),
    }
}

/// Applies one related-resource rule to the cached objects of its resource (Metacontroller's
/// rule combinations and namespace visibility for v1/v2, see [`related_scope`]).
pub fn select_related(
    rule: &RelatedResourceRule,
    parent: &Value,
    parent_namespaced: bool,
    version: HookVersion,
    related_namespaced: bool,
    candidates: &[Arc<Value>],
    namespace_labels: &HashMap<String, BTreeMap<String, String>>,
) -> Result<Vec<Value>, RelatedRuleError> {
    let named = |error: RuleError| RelatedRuleError {
        api_version: rule.api_version.clone(),
        resource: rule.resource.clone(),
        error,
    };
    let scope = related_scope(
        rule,
        meta_str(parent, "namespace"),
        parent_namespaced,
        version,
        related_namespaced,
    )
    .map_err(named)?;
    let names = rule.names.as_deref().filter(|n| !n.is_empty());
    let label_sel = match &rule.label_selector {
        Some(v) => Some(selector::decode(v, "labelSelector").map_err(|e| named(e.into()))?),
        None => None,
    };
    let empty = BTreeMap::new();
    let mut out = Vec::new();
    for obj in candidates {
        let ons = meta_str(obj, "namespace");
        let ns_ok = match &scope {
            Scope::All => true,
            Scope::Namespace(n) => ons == *n,
            Scope::Namespaces(sel) => {
                selector::matches(sel, namespace_labels.get(ons).unwrap_or(&empty))
                    .map_err(|e| named(e.into()))?
            }
        };
        if !ns_ok {
            continue;
        }
        let ok = match (names, &label_sel) {
            (Some(n), _) => n.iter().any(|x| x == meta_str(obj, "name")),
            (None, Some(sel)) => {
                selector::matches(sel, &selector::labels_of(obj)).map_err(|e| named(e.into()))?
            }
            (None, None) => true,
        };
        if ok {
            out.push((**obj).clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(ns: &str, name: &str, labels: Value) -> Arc<Value> {
        Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels}}))
    }

    fn rule(v: Value) -> RelatedResourceRule {
        let mut base = json!({"apiVersion": "v1", "resource": "configmaps"});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn names(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|o| format!("{}/{}", meta_str(o, "namespace"), meta_str(o, "name")))
            .collect()
    }

    #[test]
    fn related_selection_by_labels_names_and_namespace() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [
            cm("a", "x", json!({"k": "1"})),
            cm("a", "y", json!({})),
            cm("b", "z", json!({"k": "1"})),
        ];
        let none = HashMap::new();
        let r = rule(json!({"labelSelector": {"matchLabels": {"k": "1"}}}));
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x"]);
        let r = rule(json!({"names": ["y", "z"]}));
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/y"]);
        // v2 may read other namespaces
        let r = rule(json!({"namespace": "b", "names": ["z"]}));
        assert!(select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).is_err());
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["b/z"]);
        // cluster-scoped parent sees every namespace
        let got = select_related(
            &rule(json!({"labelSelector": {"matchLabels": {"k": "1"}}})),
            &json!({"metadata": {"name": "c"}}),
            false,
            HookVersion::V1,
            true,
            &objs,
            &none,
        )
        .unwrap();
        assert_eq!(names(&got), ["a/x", "b/z"]);
    }

    #[test]
    fn related_namespace_selector_and_invalid_combinations() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [cm("a", "x", json!({})), cm("b", "z", json!({}))];
        let ns = HashMap::from([(
            "b".to_owned(),
            BTreeMap::from([("team".to_owned(), "t".to_owned())]),
        )]);
        let r = rule(json!({"namespaceSelector": {"matchLabels": {"team": "t"}}}));
        assert!(
            select_related(&r, &parent, true, HookVersion::V1, true, &objs, &ns)
                .unwrap_err()
                .to_string()
                .contains("needs hook version v2")
        );
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &ns).unwrap();
        assert_eq!(names(&got), ["b/z"]);
        let bad = rule(json!({"names": ["x"], "labelSelector": {}}));
        assert!(select_related(&bad, &parent, true, HookVersion::V2, true, &objs, &ns).is_err());
        let bad = rule(json!({"namespace": "a", "namespaceSelector": {}}));
        assert!(select_related(&bad, &parent, true, HookVersion::V2, true, &objs, &ns).is_err());
    }

    fn ns(name: &str) -> Arc<Value> {
        Arc::new(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"team": name}}}))
    }

    #[test]
    fn v2_label_selector_without_namespace_reads_every_namespace() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [
            cm("a", "x", json!({"k": "1"})),
            cm("b", "z", json!({"k": "1"})),
            cm("b", "y", json!({})),
        ];
        let none = HashMap::new();
        let r = rule(json!({"labelSelector": {"matchLabels": {"k": "1"}}}));
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x", "b/z"]);
        // names without namespace: every namespace in v2, the parent's in v1
        let r = rule(json!({"names": ["x", "z"]}));
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x", "b/z"]);
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x"]);
        // namespace + labelSelector: that namespace only, in both versions
        let r = rule(json!({"namespace": "b", "labelSelector": {}}));
        let got = select_related(&r, &parent, true, HookVersion::V2, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["b/z", "b/y"]);
        let r = rule(json!({"namespace": "a", "labelSelector": {}}));
        let got = select_related(&r, &parent, true, HookVersion::V1, true, &objs, &none).unwrap();
        assert_eq!(names(&got), ["a/x"]);
    }

    #[test]
    fn v1_namespaced_parent_reads_cluster_scoped_related() {
        let parent = json!({"metadata": {"namespace": "a", "name": "p"}});
        let objs = [ns("a"), ns("b")];
        let none = HashMap::new();
        let all = rule(json!({"resource": "namespaces", "labelSelector": {}}));
        let got =
            select_related(&all, &parent, true, HookVersion::V1, false, &objs, &none).unwrap();
        assert_eq!(names(&got), ["/a", "/b"]);
        let by_name = rule(json!({"resource": "namespaces", "names": ["b"]}));
        let got = select_related(
            &by_name,
            &parent,
            true,
            HookVersion::V1,
            false,
            &objs,
            &none,
        )
        .unwrap();
        assert_eq!(names(&got), ["/b"]);
        // `namespace` means nothing for a cluster-scoped resource: no v1 namespace error
        let other = rule(
            json!({"resource": "namespaces", "namespace": "b", "labelSelector":
            {"matchLabels": {"team": "a"}}}),
        );
        let got =
            select_related(&other, &parent, true, HookVersion::V1, false, &objs, &none).unwrap();
        assert_eq!(names(&got), ["/a"]);
        // but namespaceSelector still needs a namespaced resource
        let bad = rule(json!({"resource": "namespaces", "namespaceSelector": {}}));
        assert!(
            select_related(&bad, &parent, true, HookVersion::V2, false, &objs, &none)
                .unwrap_err()
                .to_string()
                .contains("needs a namespaced resource")
        );
    }
}
