//! Pure decisions of a DecoratorController sync: which objects are targets, which children
//! are its attachments, the desired attachments, and the writes to the target (labels and
//! annotations merged with `null` removal, status replaced, finalizer removed). No I/O here.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

use crate::api::AnnotationSelector;
use crate::object::{controller_uid, has_finalizer, meta, meta_str};
use crate::reconcile::decide::{self, ChildType, DecideError};
use crate::runtime::selector::{self, SelectorError};

/// The annotation naming the DecoratorController an attachment belongs to (Metacontroller's).
pub const DECORATOR_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

/// The finalizer a DecoratorController `dc` with a finalize hook puts on its targets
/// (Metacontroller's name).
pub fn finalizer_name(dc: &str) -> String {
    format!("metacontroller.io/decoratorcontroller-{dc}")
}

/// The finalizer kmeta puts on a DecoratorController with a finalize hook, so that deleting it
/// gives kmeta the chance to remove [`finalizer_name`] from its targets (kmeta's; Metacontroller
/// leaves them stuck, its issue #1062).
pub const RELEASE_FINALIZER: &str = "kmeta.dev/release-decorator-targets";

/// `annotationSelector` as a label selector over annotations (Metacontroller converts it the
/// same way).
pub fn annotation_selector(sel: &AnnotationSelector) -> LabelSelector {
    LabelSelector {
        match_labels: sel.match_annotations.clone(),
        match_expressions: sel.match_expressions.clone(),
    }
}

/// An object's annotations as a map (values that are not strings are left out).
pub fn annotations_of(obj: &Value) -> BTreeMap<String, String> {
    meta(obj, "annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// How one `spec.resources[]` entry selects its targets: both selectors must match (an absent
/// one matches everything).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetSelector {
    /// `labelSelector`.
    pub labels: Option<LabelSelector>,
    /// `annotationSelector`, as a selector over annotations.
    pub annotations: Option<LabelSelector>,
}

impl TargetSelector {
    /// Does `obj` match both selectors?
    pub fn matches(&self, obj: &Value) -> Result<bool, SelectorError> {
        if let Some(sel) = &self.labels
            && !selector::matches(sel, &selector::labels_of(obj))?
        {
            return Ok(false);
        }
        match &self.annotations {
            Some(sel) => selector::matches(sel, &annotations_of(obj)),
            None => Ok(true),
        }
    }
}

/// Whether a sync looks at `obj` at all: it matches the selectors, or it still carries our
/// finalizer (it stopped matching, and the finalize hook has not finished). A selector that
/// cannot be evaluated counts as not matching here; the sync reports it.
pub fn is_target(sel: &TargetSelector, obj: &Value, finalizer: &str) -> bool {
    sel.matches(obj).unwrap_or(false) || has_finalizer(obj, finalizer)
}

/// Whether `child` is an attachment of the target with `target_uid` made by DecoratorController
/// `dc`: the target is its controller and its [`DECORATOR_ANNOTATION`] names `dc`. Objects the
/// target controls for another reason (another decorator, the target's own controller) are not.
pub fn is_attachment(child: &Value, target_uid: &str, dc: &str) -> bool {
    controller_uid(child) == Some(target_uid)
        && meta(child, "annotations")
            .and_then(|a| a.get(DECORATOR_ANNOTATION))
            .and_then(Value::as_str)
            == Some(dc)
}

/// The hook's attachments, checked and keyed like composite children (declared types, namespace
/// rules: defaulted to a namespaced target's namespace, required for a namespaced attachment of
/// a cluster-scoped target), each annotated with [`DECORATOR_ANNOTATION`] = `dc`.
pub fn desired_attachments(
    target: &Value,
    target_namespaced: bool,
    declared: &HashMap<String, ChildType>,
    dc: &str,
    attachments: Vec<Value>,
) -> Result<BTreeMap<String, Value>, DecideError> {
    let everything = LabelSelector::default();
    let mut desired = decide::validate_desired(
        target,
        target_namespaced,
        declared,
        &everything,
        false,
        attachments,
    )?;
    for attachment in desired.values_mut() {
        if let Some(m) = attachment
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            let annotations = m
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !annotations.is_object() {
                *annotations = Value::Object(Map::new());
            }
            if let Some(a) = annotations.as_object_mut() {
                a.insert(DECORATOR_ANNOTATION.into(), Value::String(dc.to_owned()));
            }
        }
    }
    Ok(desired)
}

/// Merges `updates` into the string map at `metadata.<field>` of `obj`: a value sets the key, a
/// `None` (JSON `null`) removes it. Returns whether anything changed (an absent map is created
/// only when a key is set).
pub fn merge_string_map(
    obj: &mut Value,
    field: &str,
    updates: &BTreeMap<String, Option<String>>,
) -> bool {
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    for (k, v) in updates {
        match v {
            None => {
                if let Some(map) = m.get_mut(field).and_then(Value::as_object_mut) {
                    changed |= map.remove(k).is_some();
                }
            }
            Some(v) => {
                let map = m.entry(field).or_insert_with(|| Value::Object(Map::new()));
                if !map.is_object() {
                    *map = Value::Object(Map::new());
                }
                if let Some(map) = map.as_object_mut()
                    && map.get(k).and_then(Value::as_str) != Some(v.as_str())
                {
                    map.insert(k.clone(), Value::String(v.clone()));
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Replaces `obj`'s status with `status` (None: left unchanged); returns whether it changed
/// (numbers compared by value).
pub fn replace_status(obj: &mut Value, status: Option<&Value>) -> bool {
    let Some(want) = status else {
        return false;
    };
    if !decide::status_changed(obj, want) {
        return false;
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), want.clone());
        return true;
    }
    false
}

/// What the hook asks of the target itself.
#[derive(Debug, Clone, Copy)]
pub struct TargetChanges<'a> {
    /// Labels to set (`None`: remove).
    pub labels: &'a BTreeMap<String, Option<String>>,
    /// Annotations to set (`None`: remove).
    pub annotations: &'a BTreeMap<String, Option<String>>,
    /// The status, when it goes in the main object (no status subresource).
    pub status: Option<&'a Value>,
    /// Our finalizer, when the finalize hook said `finalized`.
    pub remove_finalizer: Option<&'a str>,
}

/// Applies `changes` to the main object `obj` (everything but a status kept behind `/status`);
/// returns whether anything changed, so an unchanged target is not written.
pub fn decorate(obj: &mut Value, changes: TargetChanges<'_>) -> bool {
    let mut changed = merge_string_map(obj, "labels", changes.labels);
    changed |= merge_string_map(obj, "annotations", changes.annotations);
    changed |= replace_status(obj, changes.status);
    if let Some(fin) = changes.remove_finalizer
        && let Some(list) = obj
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
    {
        let before = list.len();
        list.retain(|f| f.as_str() != Some(fin));
        changed |= list.len() != before;
    }
    changed
}

/// The namespace a target's attachments are looked for in: its own when namespaced, every
/// namespace when cluster-scoped.
pub fn attachment_namespace(target: &Value) -> Option<&str> {
    Some(meta_str(target, "namespace")).filter(|ns| !ns.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::ChildUpdateMethod;
    use serde_json::json;

    fn sel(v: Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    fn sts(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                            "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn targets_match_both_selectors() {
        // service-per-pod's annotationSelector, pod-name-label's labelSelector
        let s = TargetSelector {
            labels: Some(sel(
                json!({"matchExpressions": [{"key": "pod-name", "operator": "DoesNotExist"}]}),
            )),
            annotations: Some(annotation_selector(
                &serde_json::from_value(json!({"matchExpressions": [
                    {"key": "service-per-pod-label", "operator": "Exists"}],
                    "matchAnnotations": {"team": "a"}}))
                .unwrap(),
            )),
        };
        let ok = sts(
            json!({}),
            json!({"service-per-pod-label": "x", "team": "a"}),
        );
        assert!(s.matches(&ok).unwrap());
        let labelled = sts(
            json!({"pod-name": "p"}),
            ok["metadata"]["annotations"].clone(),
        );
        assert!(!s.matches(&labelled).unwrap());
        let other_team = sts(
            json!({}),
            json!({"service-per-pod-label": "x", "team": "b"}),
        );
        assert!(!s.matches(&other_team).unwrap());
        let no_annotation = sts(json!({}), json!({"team": "a"}));
        assert!(!s.matches(&no_annotation).unwrap());
        assert!(TargetSelector::default().matches(&no_annotation).unwrap());
        // a label with the annotation's key does not satisfy the annotation selector
        let as_label = sts(
            json!({"service-per-pod-label": "x", "team": "a"}),
            json!({}),
        );
        assert!(!s.matches(&as_label).unwrap());
    }

    #[test]
    fn an_unmatched_object_with_our_finalizer_is_still_a_target() {
        let s = TargetSelector {
            labels: Some(sel(json!({"matchLabels": {"on": "yes"}}))),
            annotations: None,
        };
        let fin = finalizer_name("dc");
        assert_eq!(fin, "metacontroller.io/decoratorcontroller-dc");
        let mut o = sts(json!({"on": "no"}), json!({}));
        assert!(!is_target(&s, &o, &fin));
        o["metadata"]["finalizers"] = json!([fin]);
        assert!(is_target(&s, &o, &fin));
        o["metadata"]["finalizers"] = json!(["metacontroller.io/decoratorcontroller-other"]);
        assert!(!is_target(&s, &o, &fin));
    }

    #[test]
    fn finalizer_decisions_for_targets() {
        use crate::reconcile::decide::{
            FinalizerAction, HookChoice, choose_hook, finalizer_after_hook, finalizer_before_hook,
        };
        // with a finalize hook: a matching live target gets the finalizer and is synced
        assert_eq!(
            finalizer_before_hook(true, false, false),
            FinalizerAction::Add
        );
        assert_eq!(choose_hook(true, false, true, true), HookChoice::Sync);
        // it stops matching, or is deleted: finalize while our finalizer is on it
        assert_eq!(choose_hook(true, false, false, true), HookChoice::Finalize);
        assert_eq!(choose_hook(true, true, true, true), HookChoice::Finalize);
        assert_eq!(
            finalizer_after_hook(true, true, true),
            FinalizerAction::Remove
        );
        assert_eq!(
            finalizer_after_hook(true, false, true),
            FinalizerAction::Keep
        );
        // without a finalize hook: no finalizer (one left from before is removed), an unmatched
        // target is left alone, and a deleted one is still synced (its attachments are not
        // managed: `may_manage_children`), as Metacontroller's `syncParentObject`
        assert_eq!(
            finalizer_before_hook(false, false, false),
            FinalizerAction::Keep
        );
        assert_eq!(
            finalizer_before_hook(false, false, true),
            FinalizerAction::Remove
        );
        assert_eq!(choose_hook(false, false, false, false), HookChoice::Skip);
        assert_eq!(choose_hook(false, true, true, false), HookChoice::Sync);
    }

    #[test]
    fn attachments_need_our_controller_ref_and_annotation() {
        let child = |uid: &str, controller: bool, dc: Option<&str>| {
            let mut c = json!({"metadata": {"name": "c", "ownerReferences": [
                {"uid": uid, "controller": controller}]}});
            if let Some(dc) = dc {
                c["metadata"]["annotations"] = json!({DECORATOR_ANNOTATION: dc});
            }
            c
        };
        assert!(is_attachment(&child("u1", true, Some("dc")), "u1", "dc"));
        assert!(!is_attachment(
            &child("u1", true, Some("other")),
            "u1",
            "dc"
        ));
        assert!(!is_attachment(&child("u1", true, None), "u1", "dc"));
        assert!(!is_attachment(&child("u2", true, Some("dc")), "u1", "dc"));
        assert!(!is_attachment(&child("u1", false, Some("dc")), "u1", "dc"));
    }

    fn declared(namespaced: bool) -> HashMap<String, ChildType> {
        let method = ChildUpdateMethod::OnDelete;
        HashMap::from([
            ("Service.v1".to_owned(), ChildType { namespaced, method }),
            (
                "ClusterRole.rbac.authorization.k8s.io/v1".to_owned(),
                ChildType {
                    namespaced: false,
                    method,
                },
            ),
        ])
    }

    #[test]
    fn desired_attachments_are_annotated_and_placed() {
        let target = sts(json!({}), json!({}));
        let svc = json!({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "web-0", "annotations": {"keep": "me"}}});
        let d = desired_attachments(&target, true, &declared(true), "dc", vec![svc]).unwrap();
        let got = d.get("Service.v1 ns/web-0").unwrap();
        assert_eq!(
            got["metadata"]["annotations"],
            json!({"keep": "me", DECORATOR_ANNOTATION: "dc"})
        );
        // an undeclared kind, and a cluster-scoped attachment of a namespaced target, are errors
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(desired_attachments(&target, true, &declared(true), "dc", vec![pod]).is_err());
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                          "metadata": {"name": "r"}});
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1",
                         "kind": "CustomResourceDefinition", "metadata": {"name": "c", "uid": "u"}});
        assert!(
            desired_attachments(&target, true, &declared(true), "dc", vec![role.clone()]).is_err()
        );
        // a cluster-scoped target (a CRD) may have cluster-scoped attachments
        let d = desired_attachments(&crd, false, &declared(true), "dc", vec![role]).unwrap();
        assert!(d.contains_key("ClusterRole.rbac.authorization.k8s.io/v1 /r"));
        // and namespaced ones only with a namespace
        let bare = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
        assert!(desired_attachments(&crd, false, &declared(true), "dc", vec![bare]).is_err());
    }

    #[test]
    fn merge_sets_replaces_and_removes_with_null() {
        let mut o = sts(json!({"a": "1", "b": "2"}), Value::Null);
        let updates = BTreeMap::from([
            ("a".to_owned(), Some("1".to_owned())),
            ("b".to_owned(), None),
            ("c".to_owned(), Some("3".to_owned())),
        ]);
        assert!(merge_string_map(&mut o, "labels", &updates));
        assert_eq!(o["metadata"]["labels"], json!({"a": "1", "c": "3"}));
        assert!(!merge_string_map(&mut o, "labels", &updates), "idempotent");
        // removing from an absent map changes nothing and creates nothing
        let remove = BTreeMap::from([("x".to_owned(), None)]);
        assert!(!merge_string_map(&mut o, "annotations", &remove));
        assert_eq!(o["metadata"]["annotations"], Value::Null);
    }

    #[test]
    fn decorate_writes_only_changes() {
        let fin = finalizer_name("dc");
        let mut o = sts(json!({"a": "1"}), json!({}));
        o["metadata"]["finalizers"] = json!([fin, "other"]);
        o["status"] = json!({"n": 1});
        let none = BTreeMap::new();
        let same = json!({"n": 1.0});
        let unchanged = TargetChanges {
            labels: &none,
            annotations: &none,
            status: Some(&same),
            remove_finalizer: None,
        };
        assert!(!decorate(&mut o.clone(), unchanged));
        let status = json!({"n": 2});
        let changes = TargetChanges {
            status: Some(&status),
            remove_finalizer: Some(&fin),
            ..unchanged
        };
        assert!(decorate(&mut o, changes));
        assert_eq!(o["status"], json!({"n": 2}));
        assert_eq!(o["metadata"]["finalizers"], json!(["other"]));
        assert!(!decorate(&mut o, changes));
        // a null status (None) leaves the status alone
        assert!(!replace_status(&mut o, None));
    }
}
