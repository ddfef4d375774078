//! List rules read from an API server's OpenAPI v3 document for one group-version
//! (`/openapi/v3/apis/<group>/<version>`, as kube-apiserver serves it): the kind's schema is found
//! by its `x-kubernetes-group-version-kind` extension, and `$ref`s into `components.schemas` are
//! followed.

use serde_json::{Map, Value};

use crate::rules::{ListRule, ListRules, Node, list_type_marker, object_meta_rules};

/// Nesting limit of the walk (field levels plus `$ref`/`allOf` hops); the deepest built-in kind
/// (a CronJob's pod template) is far shallower.
const MAX_DEPTH: usize = 128;

impl ListRules {
    /// Rules for the kind `kind` of `api_version` (`group/version`, `v1` for the core group) from
    /// an OpenAPI v3 document of that group-version: every list whose schema says how it merges.
    /// `x-kubernetes-list-type` comes first (`atomic`, `set`, or `map` with
    /// `x-kubernetes-list-map-keys`; key defaults from the items' `default`s); a list without it
    /// follows `x-kubernetes-patch-strategy` (`merge` with `x-kubernetes-patch-merge-key` is a map
    /// by that key, `merge` alone a set, `replace` atomic). A list with neither follows the
    /// convention, as in [`ListRules::from_openapi_schema`]. `$ref`s to `#/components/schemas/…`
    /// are followed (a schema that refers to itself is walked once per path), as are
    /// `allOf`/`anyOf`/`oneOf`, `items` and `additionalProperties` (as `*`).
    /// `x-kubernetes-preserve-unknown-fields` subtrees outside lists are recorded as in
    /// [`crate::preserve_unknown_subtrees`]. The `ObjectMeta` rules of [`ListRules::builtin`] are
    /// the base where the schema says nothing about `metadata` (a CRD's schema).
    ///
    /// `None` when the document has no schema for the kind (not served by that group-version, or
    /// not a document at all).
    pub fn from_openapi_v3(doc: &Value, api_version: &str, kind: &str) -> Option<ListRules> {
        let schemas = doc.pointer("/components/schemas")?.as_object()?;
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let (name, root) = schemas
            .iter()
            .find(|(_, s)| has_gvk(s, group, version, kind))?;
        let mut walker = Walker {
            schemas,
            refs: vec![name.as_str()],
            path: Vec::new(),
            preserve: Vec::new(),
        };
        let mut walked = ListRules::new();
        walker.walk(root, &mut walked.root, 0, false);
        walked.root.prune();
        walked.preserve_unknown = walker.preserve;
        let mut rules = ListRules::new();
        object_meta_rules(&mut rules, "metadata");
        Some(rules.merge(walked))
    }
}

/// Whether `schema` carries `{group, version, kind}` in its `x-kubernetes-group-version-kind`.
fn has_gvk(schema: &Value, group: &str, version: &str, kind: &str) -> bool {
    let Some(list) = schema
        .get("x-kubernetes-group-version-kind")
        .and_then(Value::as_array)
    else {
        return false;
    };
    list.iter().any(|gvk| {
        let field = |f: &str| gvk.get(f).and_then(Value::as_str).unwrap_or_default();
        field("group") == group && field("version") == version && field("kind") == kind
    })
}

/// The name a `$ref` points at in `components.schemas`.
fn ref_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/components/schemas/")
}

struct Walker<'d> {
    schemas: &'d Map<String, Value>,
    /// The schemas being walked (to stop at a schema that contains itself).
    refs: Vec<&'d str>,
    /// The field path from the root, for the preserve-unknown subtrees.
    path: Vec<String>,
    preserve: Vec<Vec<String>>,
}

impl<'d> Walker<'d> {
    fn walk(&mut self, schema: &'d Value, node: &mut Node, depth: usize, in_list: bool) {
        let Some(obj) = schema.as_object() else {
            return;
        };
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(target) = obj.get("$ref").and_then(Value::as_str).and_then(ref_name) {
            self.follow(target, node, depth, in_list);
        }
        if let Some(rule) = list_rule(obj) {
            if let ListRule::Map(keys) = &rule {
                node.key_defaults = self.key_defaults(obj.get("items"), keys);
            }
            node.rule = Some(rule);
        }
        if !in_list && obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            self.preserve.push(self.path.clone());
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                self.path.push(name.clone());
                self.walk(sub, node.child_mut(name), depth + 1, in_list);
                self.path.pop();
            }
        }
        if let Some(add @ Value::Object(_)) = obj.get("additionalProperties") {
            self.walk(add, node.child_mut("*"), depth + 1, true);
        }
        if let Some(items) = obj.get("items") {
            self.walk(items, node, depth + 1, true);
        }
        for combinator in ["allOf", "anyOf", "oneOf"] {
            if let Some(subs) = obj.get(combinator).and_then(Value::as_array) {
                for sub in subs {
                    self.walk(sub, node, depth + 1, in_list);
                }
            }
        }
    }

    fn follow(&mut self, target: &'d str, node: &mut Node, depth: usize, in_list: bool) {
        if self.refs.contains(&target) {
            return;
        }
        let Some(schema) = self.schemas.get(target) else {
            return;
        };
        self.refs.push(target);
        self.walk(schema, node, depth + 1, in_list);
        self.refs.pop();
    }

    /// The defaults the list items' schema gives the key fields (`protocol: TCP`).
    fn key_defaults(&self, items: Option<&'d Value>, keys: &[String]) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for key in keys {
            let default = items
                .and_then(|items| self.property(items, key, 0))
                .and_then(|p| p.get("default"));
            if let Some(default) = default {
                out.push((key.clone(), default.clone()));
            }
        }
        out
    }

    /// The schema of property `name` of `schema`, through `$ref`s and `allOf`.
    fn property(&self, schema: &'d Value, name: &str, depth: usize) -> Option<&'d Value> {
        if depth > 8 {
            return None;
        }
        if let Some(p) = schema.pointer("/properties").and_then(|p| p.get(name)) {
            return Some(p);
        }
        let through_ref = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(ref_name)
            .and_then(|target| self.schemas.get(target))
            .and_then(|s| self.property(s, name, depth + 1));
        if through_ref.is_some() {
            return through_ref;
        }
        schema
            .get("allOf")
            .and_then(Value::as_array)?
            .iter()
            .find_map(|s| self.property(s, name, depth + 1))
    }
}

/// How the list `obj` describes merges, if it says: `x-kubernetes-list-type` first, then the
/// strategic-merge-patch extensions.
fn list_rule(obj: &Map<String, Value>) -> Option<ListRule> {
    if let Some(rule) = list_type_marker(obj) {
        return Some(rule);
    }
    let text = |key: &str| obj.get(key).and_then(Value::as_str);
    // the patch extensions also mark some scalar fields (LabelSelectorRequirement's `key`)
    if text("type") != Some("array") && !obj.contains_key("items") {
        return None;
    }
    let strategy = text("x-kubernetes-patch-strategy")?;
    let strategies: Vec<&str> = strategy.split(',').map(str::trim).collect();
    if strategies.contains(&"merge") {
        return Some(match text("x-kubernetes-patch-merge-key") {
            Some(key) => ListRule::Map(vec![key.to_owned()]),
            None => ListRule::Set,
        });
    }
    if strategies.contains(&"replace") {
        return Some(ListRule::Atomic);
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(keys: &[&str]) -> ListRule {
        ListRule::Map(keys.iter().map(|k| (*k).to_owned()).collect())
    }

    /// A trimmed apps/v1 document in kube-apiserver's shape: `$ref`s wrapped in `allOf`, the
    /// kind marked with `x-kubernetes-group-version-kind`.
    fn apps_doc() -> Value {
        let r = |name: &str| json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}});
        json!({"components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "type": "object",
                "properties": {
                    "metadata": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                    "spec": r("io.k8s.api.apps.v1.DeploymentSpec")
                },
                "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {"properties": {
                "template": r("io.k8s.api.core.v1.PodTemplateSpec")
            }},
            "io.k8s.api.core.v1.PodTemplateSpec": {"properties": {
                "spec": r("io.k8s.api.core.v1.PodSpec")
            }},
            "io.k8s.api.core.v1.PodSpec": {"properties": {
                "containers": {
                    "type": "array",
                    "items": r("io.k8s.api.core.v1.Container"),
                    "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-patch-strategy": "merge"
                },
                "tolerations": {"type": "array", "items": r("io.k8s.api.core.v1.Toleration"),
                                "x-kubernetes-list-type": "atomic"},
                "imagePullSecrets": {"type": "array", "items": r("io.k8s.api.core.v1.LocalObjectReference"),
                    "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"}
            }},
            "io.k8s.api.core.v1.Container": {"properties": {
                "ports": {
                    "type": "array",
                    "items": r("io.k8s.api.core.v1.ContainerPort"),
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "containerPort",
                    "x-kubernetes-patch-strategy": "merge"
                },
                "args": {"type": "array", "items": {"type": "string", "default": ""},
                         "x-kubernetes-list-type": "atomic"}
            }},
            "io.k8s.api.core.v1.ContainerPort": {"properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "default": "TCP"}
            }},
            "io.k8s.api.core.v1.Toleration": {"properties": {"key": {"type": "string"}}},
            "io.k8s.api.core.v1.LocalObjectReference": {"properties": {"name": {"type": "string"}}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"properties": {
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
                "ownerReferences": {"type": "array",
                    "items": r("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"),
                    "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"}
            }},
            "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference": {"properties": {"uid": {"type": "string"}}}
        }}})
    }

    #[test]
    fn rules_follow_refs_list_types_and_patch_strategies() {
        let rules = ListRules::from_openapi_v3(&apps_doc(), "apps/v1", "Deployment").unwrap();
        let at = "spec.template.spec";
        assert_eq!(
            rules.get(&format!("{at}.containers")),
            Some(&map(&["name"]))
        );
        assert_eq!(
            rules.get(&format!("{at}.containers.ports")),
            Some(&map(&["containerPort", "protocol"]))
        );
        assert_eq!(
            rules.get(&format!("{at}.containers.args")),
            Some(&ListRule::Atomic)
        );
        assert_eq!(
            rules.get(&format!("{at}.tolerations")),
            Some(&ListRule::Atomic)
        );
        // no list type: the strategic merge patch key
        assert_eq!(
            rules.get(&format!("{at}.imagePullSecrets")),
            Some(&map(&["name"]))
        );
        assert_eq!(rules.get("metadata.finalizers"), Some(&ListRule::Set));
        assert_eq!(rules.get("metadata.ownerReferences"), Some(&map(&["uid"])));
        // the ObjectMeta base: the document does not mark managedFields
        assert_eq!(rules.get("metadata.managedFields"), Some(&ListRule::Atomic));
        // the key default, read through the items' $ref
        let mut node = rules.root().unwrap();
        for seg in ["spec", "template", "spec", "containers", "ports"] {
            node = node.child(seg).unwrap();
        }
        assert_eq!(
            node.key_defaults,
            vec![("protocol".to_owned(), json!("TCP"))]
        );
        assert!(rules.preserve_unknown_subtrees().is_empty());
    }

    #[test]
    fn no_schema_for_the_kind_is_none() {
        let doc = apps_doc();
        assert!(ListRules::from_openapi_v3(&doc, "apps/v1", "StatefulSet").is_none());
        assert!(ListRules::from_openapi_v3(&doc, "apps/v2", "Deployment").is_none());
        assert!(ListRules::from_openapi_v3(&doc, "v1", "Deployment").is_none());
        assert!(
            ListRules::from_openapi_v3(&json!({"paths": {}}), "apps/v1", "Deployment").is_none()
        );
        assert!(ListRules::from_openapi_v3(&json!("nope"), "apps/v1", "Deployment").is_none());
    }

    #[test]
    fn a_crd_schema_self_references_and_preserve_unknown() {
        let doc = json!({"components": {"schemas": {
            "com.example.v1.Thing": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {
                        "tags": {"type": "array", "x-kubernetes-list-type": "set"},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "items": {"type": "array", "items": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}},
                        "tree": {"$ref": "#/components/schemas/com.example.v1.Node"}
                    }}
                },
                "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Thing", "version": "v1"}]
            },
            "com.example.v1.Node": {"properties": {
                "children": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["id"],
                    "items": {"$ref": "#/components/schemas/com.example.v1.Node"}}
            }}
        }}});
        let rules = ListRules::from_openapi_v3(&doc, "example.com/v1", "Thing").unwrap();
        assert_eq!(rules.get("spec.tags"), Some(&ListRule::Set));
        assert_eq!(rules.get("spec.tree.children"), Some(&map(&["id"])));
        // walked once: the nested node's children are not expanded again
        assert_eq!(rules.get("spec.tree.children.children"), None);
        assert_eq!(
            rules.preserve_unknown_subtrees(),
            &[vec!["spec".to_owned(), "extra".to_owned()]]
        );
    }
}

impl crate::FieldPath {
    /// Checks that the path names a field of `kind` of `api_version` in an OpenAPI v3 document
    /// of that group-version: every field exists (through `$ref`s and `allOf`/`anyOf`/`oneOf`;
    /// a map's keys through `additionalProperties`), every selector is on a list, and on a list
    /// whose schema names its keys (`x-kubernetes-list-map-keys`, `x-kubernetes-patch-merge-key`)
    /// it uses only those; a list the schema makes atomic or a set has no items to select.
    /// Anything below an `x-kubernetes-preserve-unknown-fields` node is accepted (a schemaless
    /// subtree, whose lists dynapply keys by convention). `Ok` when the document has no schema
    /// for the kind: nothing to check against.
    pub fn check_openapi_v3(
        &self,
        doc: &Value,
        api_version: &str,
        kind: &str,
    ) -> Result<(), crate::Error> {
        let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        else {
            return Ok(());
        };
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let Some((_, root)) = schemas
            .iter()
            .find(|(_, s)| has_gvk(s, group, version, kind))
        else {
            return Ok(());
        };
        if plain_metadata_map(schemas, root, self.segments()) {
            return Ok(());
        }
        let mut current = vec![root];
        for (i, seg) in self.segments().iter().enumerate() {
            let views = expand(schemas, &current);
            if views.iter().any(|v| {
                v.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
                    || v.get("additionalProperties") == Some(&Value::Bool(true))
            }) {
                return Ok(());
            }
            let at = || {
                let done = crate::FieldPath::from_segments(self.segments()[..i].to_vec());
                match i {
                    0 => format!("{kind} {api_version}"),
                    _ => format!("{done} of {kind} {api_version}"),
                }
            };
            current = step(&views, seg).map_err(|why| crate::Error::InvalidFieldPath {
                path: self.to_string(),
                message: format!("{why} at {}", at()),
            })?;
        }
        Ok(())
    }
}

/// Whether `segs` names a key of `metadata.labels` or `metadata.annotations` (or the map) of a
/// kind whose schema does not describe `metadata` (a CRD's schema says `type: object`, or
/// nothing; the API server gives every object ObjectMeta).
fn plain_metadata_map(
    schemas: &Map<String, Value>,
    root: &Value,
    segs: &[crate::FieldSeg],
) -> bool {
    use crate::FieldSeg::Field;
    let (Some(Field(first)), Some(Field(second))) = (segs.first(), segs.get(1)) else {
        return false;
    };
    if first != "metadata" || !matches!(second.as_str(), "labels" | "annotations") || segs.len() > 3
    {
        return false;
    }
    if segs.get(2).is_some_and(|s| !matches!(s, Field(_))) {
        return false;
    }
    let described = expand(schemas, &[root]).iter().any(|v| {
        v.pointer("/properties/metadata").is_some_and(|m| {
            expand(schemas, &[m])
                .iter()
                .any(|x| x.get("properties").is_some())
        })
    });
    !described
}

/// The schemas `current` stands for, with `$ref`s followed and the combinators' branches.
fn expand<'d>(schemas: &'d Map<String, Value>, current: &[&'d Value]) -> Vec<&'d Value> {
    let mut out = Vec::new();
    let mut todo: Vec<(&Value, usize)> = current.iter().map(|s| (*s, 0)).collect();
    while let Some((s, depth)) = todo.pop() {
        if depth > 16 || out.len() > 64 {
            continue;
        }
        out.push(s);
        if let Some(target) = s.get("$ref").and_then(Value::as_str).and_then(ref_name)
            && let Some(t) = schemas.get(target)
        {
            todo.push((t, depth + 1));
        }
        for combinator in ["allOf", "anyOf", "oneOf"] {
            for sub in s
                .get(combinator)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                todo.push((sub, depth + 1));
            }
        }
    }
    out
}

/// One step of a path through the schemas `views`: the schemas of the field, map value or list
/// item it names, or why it names none.
fn step<'d>(views: &[&'d Value], seg: &crate::FieldSeg) -> Result<Vec<&'d Value>, String> {
    match seg {
        crate::FieldSeg::Field(name) => {
            let found: Vec<&Value> = views
                .iter()
                .filter_map(|v| {
                    v.pointer("/properties")
                        .and_then(|p| p.get(name))
                        .or_else(|| v.get("additionalProperties").filter(|a| a.is_object()))
                })
                .collect();
            if found.is_empty() {
                return Err(format!("`{name}` is no field"));
            }
            Ok(found)
        }
        crate::FieldSeg::Select(keys) => {
            let list: Vec<&&Value> = views.iter().filter(|v| v.get("items").is_some()).collect();
            if list.is_empty() {
                return Err("a list selector on a field that is not a list".to_owned());
            }
            for v in &list {
                let Some(obj) = v.as_object() else { continue };
                match list_rule(obj) {
                    Some(ListRule::Map(map_keys)) => {
                        if let Some((k, _)) = keys.iter().find(|(k, _)| !map_keys.contains(k)) {
                            return Err(format!(
                                "`{k}` is not a key of the list (its keys: {})",
                                map_keys.join(", ")
                            ));
                        }
                    }
                    Some(ListRule::Atomic) => {
                        return Err("an atomic list (replaced whole) has no item to select; name the whole list".to_owned());
                    }
                    Some(ListRule::Set) => {
                        return Err("a set has no keyed items to select".to_owned());
                    }
                    None => {}
                }
            }
            Ok(list.iter().filter_map(|v| v.get("items")).collect())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod field_path_tests {
    use crate::FieldPath;
    use serde_json::{Value, json};

    /// The apps/v1 document kmeta-apiserver serves (generated from the Kubernetes API).
    fn apps_v1() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../apiserver/openapi/v3/apis__apps__v1_openapi.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn check(doc: &Value, path: &str) -> Result<(), String> {
        FieldPath::parse(path)
            .unwrap()
            .check_openapi_v3(doc, "apps/v1", "Deployment")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn paths_of_a_deployment() {
        let doc = apps_v1();
        for ok in [
            "spec.replicas",
            "spec.template.spec.containers[name=app].resources",
            "spec.template.spec.containers[name=app].resources.limits[cpu]",
            "spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]",
            "spec.template.spec.containers[name=app].ports[containerPort=80,protocol=TCP]",
        ] {
            assert_eq!(check(&doc, ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (
                "spec.replica",
                "`replica` is no field at spec of Deployment apps/v1",
            ),
            (
                "spec.template.spec.containers[image=x].resources",
                "`image` is not a key of the list (its keys: name)",
            ),
            ("spec.replicas[name=x]", "not a list"),
            (
                "spec.template.spec.containers[name=app].resource",
                "`resource` is no field at spec.template.spec.containers[name=app]",
            ),
            ("spec.template.spec.tolerations[key=x]", "atomic list"),
        ] {
            let err = check(&doc, bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn anything_below_preserve_unknown_fields_and_nothing_to_check_without_a_schema() {
        let doc = json!({"components": {"schemas": {"W": {
            "x-kubernetes-group-version-kind": [{"group": "x.io", "version": "v1", "kind": "W"}],
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
        }}}});
        let p = FieldPath::parse("spec.template.spec.containers[name=app].resources").unwrap();
        assert!(p.check_openapi_v3(&doc, "x.io/v1", "W").is_ok());
        // a CRD's schema does not describe metadata: its labels and annotations are there
        let ann = FieldPath::parse("metadata.annotations[example.com/owner]").unwrap();
        assert!(ann.check_openapi_v3(&doc, "x.io/v1", "W").is_ok());
        let other = FieldPath::parse("metadata.bogus").unwrap();
        assert!(other.check_openapi_v3(&doc, "x.io/v1", "W").is_err());
        let bad = FieldPath::parse("spec.templates").unwrap();
        assert!(bad.check_openapi_v3(&doc, "x.io/v1", "W").is_err());
        assert!(bad.check_openapi_v3(&doc, "x.io/v1", "Other").is_ok());
    }
}
