//! Explicit list rules ("schema hints"): per field path, how a list is merged.
//!
//! Precedence during a merge: an explicit rule for the list's path > the merge-key convention >
//! atomic. Rules are stored as a trie of field names so the merge looks them up while it walks,
//! one string comparison per object level and no allocation.

use serde_json::Value;

/// How one list field is merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListRule {
    /// The list is one value: desired replaces live (kubectl's default for lists).
    Atomic,
    /// The list is an ordered set of values (items compared as exact JSON, numbers by value),
    /// like `metadata.finalizers`: items added by others are kept, items dropped from desired
    /// since last-applied are removed.
    Set,
    /// The list is a map keyed by the named fields of its (object) items, e.g.
    /// `["containerPort", "protocol"]`. Missing key fields take the default registered with
    /// [`ListRules::set_key_default`] (e.g. `protocol` = `"TCP"`), else compare as "unset".
    /// If an item is not an object, or two items of one list share a key, the list is merged
    /// atomically instead.
    Map(Vec<String>),
}

/// Per-field-path list rules. Cheap to clone for the sizes involved (a few dozen paths).
///
/// Path syntax (for [`ListRules::set`]): field names separated by `.`, starting at the top of the
/// object, e.g. `spec.template.spec.containers`. List items are traversed implicitly, so the
/// ports of every container are `spec.template.spec.containers.ports`. `*` matches any one field
/// name (map values, e.g. `spec.pools.*.containers`); an exact name wins over `*` at the same
/// level. A literal `.` inside a field name is written `\.`. A trailing `[]` or `[*]` on a
/// segment is accepted and ignored (`containers[].ports`).
#[derive(Clone, Default, Debug)]
pub struct ListRules {
    pub(crate) root: Node,
    /// The schema's `x-kubernetes-preserve-unknown-fields` subtrees (see
    /// [`crate::preserve_unknown_subtrees`]).
    pub(crate) preserve_unknown: Vec<Vec<String>>,
}

#[derive(Clone, Default, Debug)]
pub(crate) struct Node {
    pub(crate) rule: Option<ListRule>,
    pub(crate) key_defaults: Vec<(String, Value)>,
    children: Vec<(String, Node)>,
    wildcard: Option<Box<Node>>,
}

impl Node {
    /// The rule node for field `name` below this one.
    #[inline]
    pub(crate) fn child(&self, name: &str) -> Option<&Node> {
        for (n, node) in &self.children {
            if n == name {
                return Some(node);
            }
        }
        self.wildcard.as_deref()
    }

    pub(crate) fn child_mut(&mut self, name: &str) -> &mut Node {
        if name == "*" {
            return self.wildcard.get_or_insert_with(Box::default);
        }
        let pos = match self.children.iter().position(|(n, _)| n == name) {
            Some(pos) => pos,
            None => {
                self.children.push((name.to_owned(), Node::default()));
                self.children.len() - 1
            }
        };
        &mut self.children[pos].1
    }

    fn is_empty(&self) -> bool {
        self.rule.is_none()
            && self.key_defaults.is_empty()
            && self.children.is_empty()
            && self.wildcard.is_none()
    }

    pub(crate) fn prune(&mut self) {
        for (_, child) in &mut self.children {
            child.prune();
        }
        self.children.retain(|(_, c)| !c.is_empty());
        if let Some(w) = &mut self.wildcard {
            w.prune();
            if w.is_empty() {
                self.wildcard = None;
            }
        }
    }

    fn merge_from(&mut self, other: Node) {
        if other.rule.is_some() {
            self.rule = other.rule;
        }
        for (field, value) in other.key_defaults {
            match self.key_defaults.iter_mut().find(|(f, _)| *f == field) {
                Some(slot) => slot.1 = value,
                None => self.key_defaults.push((field, value)),
            }
        }
        for (name, child) in other.children {
            self.child_mut(&name).merge_from(child);
        }
        if let Some(w) = other.wildcard {
            self.wildcard
                .get_or_insert_with(Box::default)
                .merge_from(*w);
        }
    }

    fn drop_atomic(&mut self) {
        if self.rule == Some(ListRule::Atomic) {
            self.rule = None;
        }
        for (_, child) in &mut self.children {
            child.drop_atomic();
        }
        if let Some(w) = &mut self.wildcard {
            w.drop_atomic();
        }
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<(String, ListRule)>) {
        if let Some(rule) = &self.rule {
            out.push((prefix.join("."), rule.clone()));
        }
        for (name, child) in &self.children {
            prefix.push(name.replace('.', "\\."));
            child.collect(prefix, out);
            prefix.pop();
        }
        if let Some(w) = &self.wildcard {
            prefix.push("*".to_owned());
            w.collect(prefix, out);
            prefix.pop();
        }
    }
}

/// Splits a rule path into segments (see [`ListRules`] for the syntax).
fn split_path(path: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut cur = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                cur.push('.');
                chars.next();
            }
            '.' => segs.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    segs.push(cur);
    segs.into_iter()
        .map(|s| {
            let s = s.strip_suffix("[*]").unwrap_or(&s);
            let s = s.strip_suffix("[]").unwrap_or(s);
            s.to_owned()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

impl ListRules {
    /// No rules: every list follows the convention (see the crate docs).
    pub fn new() -> ListRules {
        ListRules::default()
    }

    /// True when no rule is registered.
    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }

    pub(crate) fn root(&self) -> Option<&Node> {
        if self.root.is_empty() {
            None
        } else {
            Some(&self.root)
        }
    }

    fn node_mut(&mut self, path: &str) -> &mut Node {
        let mut node = &mut self.root;
        for seg in split_path(path) {
            node = node.child_mut(&seg);
        }
        node
    }

    /// Registers (or replaces) the rule for the list at `path`.
    pub fn set(&mut self, path: &str, rule: ListRule) {
        self.node_mut(path).rule = Some(rule);
    }

    /// Registers a default for a key field of the list-map at `path`, used when an item lacks
    /// the field (Kubernetes defaults `protocol` to `"TCP"` on the server, so a desired port
    /// without `protocol` must match the live port that has it).
    pub fn set_key_default(&mut self, path: &str, field: &str, value: Value) {
        let node = self.node_mut(path);
        match node.key_defaults.iter_mut().find(|(f, _)| f == field) {
            Some(slot) => slot.1 = value,
            None => node.key_defaults.push((field.to_owned(), value)),
        }
    }

    /// The rule registered for `path`, if any (exact path match; `*` segments match literally
    /// registered wildcards and any name).
    pub fn get(&self, path: &str) -> Option<&ListRule> {
        let mut node = &self.root;
        for seg in split_path(path) {
            node = node.child(&seg)?;
        }
        node.rule.as_ref()
    }

    /// All registered rules as `(path, rule)`, depth first, in registration order.
    pub fn entries(&self) -> Vec<(String, ListRule)> {
        let mut out = Vec::new();
        self.root.collect(&mut Vec::new(), &mut out);
        out
    }

    /// Combines two rule sets; where both have a rule for the same path, `other`'s wins.
    pub fn merge(mut self, other: ListRules) -> ListRules {
        self.root.merge_from(other.root);
        for p in other.preserve_unknown {
            if !self.preserve_unknown.contains(&p) {
                self.preserve_unknown.push(p);
            }
        }
        self
    }

    /// These rules without their [`ListRule::Atomic`] entries: those lists follow the merge-key
    /// convention again (merged by `name`, `port`, … when their items carry such a key, else
    /// replaced whole). For rules read from an API server's schema where `atomic` is not to
    /// override the convention Metacontroller merges by (other actors' items are kept); the
    /// rules' maps, sets, key defaults and preserve-unknown subtrees stay.
    pub fn without_atomic(mut self) -> ListRules {
        self.root.drop_atomic();
        self.root.prune();
        self
    }

    /// The field paths of the `x-kubernetes-preserve-unknown-fields` subtrees of the schema these
    /// rules were read from (empty for built-in kinds), for [`crate::server_side_apply_body`].
    pub fn preserve_unknown_subtrees(&self) -> &[Vec<String>] {
        &self.preserve_unknown
    }

    /// Rules for a built-in Kubernetes kind, from the Kubernetes API's `patchMergeKey` /
    /// `x-kubernetes-list-map-keys` facts. `api_version` is `group/version` (`v1` for the core
    /// group); the version is ignored. Every kind, including unknown ones and custom resources,
    /// gets the `ObjectMeta` rules (`metadata.finalizers` a set, `metadata.ownerReferences` a map
    /// by `uid`, `metadata.managedFields` atomic). Pod templates get the full `PodSpec` rules
    /// wherever the kind embeds one (`spec.template.spec`, `spec.jobTemplate.spec.template.spec`,
    /// `template.spec`).
    pub fn builtin(api_version: &str, kind: &str) -> ListRules {
        let group = match api_version.split_once('/') {
            Some((group, _)) => group,
            None => "",
        };
        let mut rules = ListRules::new();
        object_meta_rules(&mut rules, "metadata");
        match (group, kind) {
            ("", "Pod") => pod_spec_rules(&mut rules, "spec"),
            ("", "PodTemplate") => pod_template_rules(&mut rules, "template"),
            ("", "ReplicationController")
            | ("apps", "Deployment")
            | ("apps", "ReplicaSet")
            | ("apps", "DaemonSet") => pod_template_rules(&mut rules, "spec.template"),
            ("batch", "Job") => job_spec_rules(&mut rules, "spec"),
            ("apps", "StatefulSet") => {
                pod_template_rules(&mut rules, "spec.template");
                rules.set("spec.volumeClaimTemplates", ListRule::Atomic);
                object_meta_rules(&mut rules, "spec.volumeClaimTemplates.metadata");
                pvc_spec_rules(&mut rules, "spec.volumeClaimTemplates.spec");
            }
            ("batch", "CronJob") => {
                object_meta_rules(&mut rules, "spec.jobTemplate.metadata");
                job_spec_rules(&mut rules, "spec.jobTemplate.spec");
            }
            ("", "Service") => {
                rules.set("spec.ports", map(&["port", "protocol"]));
                rules.set_key_default("spec.ports", "protocol", Value::from("TCP"));
                for atomic in [
                    "spec.clusterIPs",
                    "spec.ipFamilies",
                    "spec.externalIPs",
                    "spec.loadBalancerSourceRanges",
                ] {
                    rules.set(atomic, ListRule::Atomic);
                }
            }
            ("", "ServiceAccount") => {
                rules.set("secrets", map(&["name"]));
                rules.set("imagePullSecrets", map(&["name"]));
            }
            ("", "Endpoints") => rules.set("subsets", ListRule::Atomic),
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration")
            | ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
                rules.set("webhooks", map(&["name"]));
                rules.set("webhooks.matchConditions", map(&["name"]));
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                rules.set("spec.matchConditions", map(&["name"]));
                rules.set("spec.variables", map(&["name"]));
            }
            ("admissionregistration.k8s.io", "MutatingAdmissionPolicy") => {
                rules.set("spec.matchConditions", map(&["name"]));
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                rules.set("spec.validationActions", ListRule::Set);
            }
            ("", "PersistentVolumeClaim") => pvc_spec_rules(&mut rules, "spec"),
            ("networking.k8s.io", "Ingress") => {
                rules.set("spec.rules", ListRule::Atomic);
                rules.set("spec.tls", ListRule::Atomic);
            }
            ("networking.k8s.io", "NetworkPolicy") => {
                rules.set("spec.ingress", ListRule::Atomic);
                rules.set("spec.egress", ListRule::Atomic);
                rules.set("spec.policyTypes", ListRule::Atomic);
            }
            ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {
                rules.set("rules", ListRule::Atomic);
            }
            ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
                rules.set("subjects", ListRule::Atomic);
            }
            ("autoscaling", "HorizontalPodAutoscaler") => {
                rules.set("spec.metrics", ListRule::Atomic);
            }
            _ => {}
        }
        rules
    }

    /// Rules read from a CRD version's `openAPIV3Schema`: every list with
    /// `x-kubernetes-list-type` (`atomic`, `set`, or `map` with `x-kubernetes-list-map-keys`,
    /// key defaults from the items' `properties.<key>.default`). Walks `properties`, `items`,
    /// `additionalProperties` (as `*`) and `allOf`/`anyOf`/`oneOf`. Nothing is inferred from
    /// shapes: an `x-kubernetes-embedded-resource` or a `template` that looks like a
    /// PodTemplateSpec gets no rules unless the schema marks its lists explicitly (those lists
    /// then follow the convention). Unknown marker values are ignored.
    pub fn from_openapi_schema(schema: &Value) -> ListRules {
        let mut rules = ListRules::new();
        walk_schema(schema, &mut rules.root, 0);
        rules.root.prune();
        rules.preserve_unknown = crate::preserve_unknown_subtrees(schema);
        rules
    }
}

impl ListRules {
    /// Rules from a CustomResourceDefinition object (`apiextensions.k8s.io/v1`): the
    /// `openAPIV3Schema` of the version named `version`, or of the storage version when `None`
    /// (the legacy top-level `spec.validation.openAPIV3Schema` is used when versions carry no
    /// schema). Errors name the missing part.
    pub fn from_crd(crd: &Value, version: Option<&str>) -> Result<ListRules, crate::Error> {
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let chosen = match version {
            Some(v) => versions
                .iter()
                .find(|x| x.get("name").and_then(Value::as_str) == Some(v)),
            None => versions
                .iter()
                .find(|x| x.get("storage").and_then(Value::as_bool) == Some(true))
                .or(versions.first()),
        };
        let schema = chosen
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
            .or_else(|| crd.pointer("/spec/validation/openAPIV3Schema"));
        match schema {
            Some(schema) => Ok(ListRules::from_openapi_schema(schema)),
            None => Err(crate::Error::InvalidField {
                path: match version {
                    Some(v) => format!("spec.versions[name={v}].schema.openAPIV3Schema"),
                    None => "spec.versions[].schema.openAPIV3Schema".to_owned(),
                },
                message: "the CRD has no such schema".to_owned(),
            }),
        }
    }
}

fn map(keys: &[&str]) -> ListRule {
    ListRule::Map(keys.iter().map(|k| (*k).to_owned()).collect())
}

pub(crate) fn object_meta_rules(rules: &mut ListRules, at: &str) {
    rules.set(&format!("{at}.finalizers"), ListRule::Set);
    rules.set(&format!("{at}.ownerReferences"), map(&["uid"]));
    rules.set(&format!("{at}.managedFields"), ListRule::Atomic);
}

fn pod_template_rules(rules: &mut ListRules, at: &str) {
    object_meta_rules(rules, &format!("{at}.metadata"));
    pod_spec_rules(rules, &format!("{at}.spec"));
}

fn job_spec_rules(rules: &mut ListRules, at: &str) {
    pod_template_rules(rules, &format!("{at}.template"));
    rules.set(&format!("{at}.podFailurePolicy.rules"), ListRule::Atomic);
    rules.set(
        &format!("{at}.podFailurePolicy.rules.onPodConditions"),
        ListRule::Atomic,
    );
    rules.set(
        &format!("{at}.podFailurePolicy.rules.onExitCodes.values"),
        ListRule::Set,
    );
    rules.set(&format!("{at}.scheduling.resourceClaims"), map(&["name"]));
}

fn pvc_spec_rules(rules: &mut ListRules, at: &str) {
    rules.set(&format!("{at}.accessModes"), ListRule::Atomic);
}

fn pod_spec_rules(rules: &mut ListRules, at: &str) {
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let c = format!("{at}.{list}");
        rules.set(&c, map(&["name"]));
        rules.set(&format!("{c}.ports"), map(&["containerPort", "protocol"]));
        rules.set_key_default(&format!("{c}.ports"), "protocol", Value::from("TCP"));
        rules.set(&format!("{c}.env"), map(&["name"]));
        rules.set(&format!("{c}.envFrom"), ListRule::Atomic);
        rules.set(&format!("{c}.volumeMounts"), map(&["mountPath"]));
        rules.set(&format!("{c}.volumeDevices"), map(&["devicePath"]));
        rules.set(&format!("{c}.resizePolicy"), ListRule::Atomic);
        rules.set(&format!("{c}.resources.claims"), map(&["name"]));
        rules.set(&format!("{c}.command"), ListRule::Atomic);
        rules.set(&format!("{c}.args"), ListRule::Atomic);
        rules.set(&format!("{c}.volumeMounts.bindMountOptions"), ListRule::Set);
        rules.set(
            &format!("{c}.restartPolicyRules.exitCodes.values"),
            ListRule::Set,
        );
    }
    rules.set(&format!("{at}.resources.claims"), map(&["name"]));
    rules.set(&format!("{at}.evictionResponders"), map(&["name"]));
    rules.set(&format!("{at}.volumes"), map(&["name"]));
    let claim_template = format!("{at}.volumes.ephemeral.volumeClaimTemplate");
    object_meta_rules(rules, &format!("{claim_template}.metadata"));
    pvc_spec_rules(rules, &format!("{claim_template}.spec"));
    for atomic in [
        "volumes.configMap.items",
        "volumes.secret.items",
        "volumes.downwardAPI.items",
        "volumes.projected.sources",
        "tolerations",
        "readinessGates",
        "securityContext.sysctls",
        "securityContext.supplementalGroups",
        "dnsConfig.nameservers",
        "dnsConfig.searches",
        "dnsConfig.options",
        "hostAliases.hostnames",
    ] {
        rules.set(&format!("{at}.{atomic}"), ListRule::Atomic);
    }
    rules.set(&format!("{at}.imagePullSecrets"), map(&["name"]));
    rules.set(&format!("{at}.hostAliases"), map(&["ip"]));
    rules.set(
        &format!("{at}.topologySpreadConstraints"),
        map(&["topologyKey", "whenUnsatisfiable"]),
    );
    rules.set(
        &format!("{at}.topologySpreadConstraints.matchLabelKeys"),
        ListRule::Atomic,
    );
    rules.set(&format!("{at}.resourceClaims"), map(&["name"]));
    rules.set(&format!("{at}.schedulingGates"), map(&["name"]));
}

/// Schema nesting limit for [`ListRules::from_openapi_schema`]; CRD schemas are far shallower.
const MAX_SCHEMA_DEPTH: usize = 128;

/// The rule a schema's `x-kubernetes-list-type` marker gives (`map` only with its
/// `x-kubernetes-list-map-keys`); `None` without a usable marker.
pub(crate) fn list_type_marker(obj: &serde_json::Map<String, Value>) -> Option<ListRule> {
    match obj.get("x-kubernetes-list-type").and_then(Value::as_str)? {
        "atomic" => Some(ListRule::Atomic),
        "set" => Some(ListRule::Set),
        "map" => {
            let keys: Vec<String> = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            (!keys.is_empty()).then_some(ListRule::Map(keys))
        }
        _ => None,
    }
}

fn walk_schema(schema: &Value, node: &mut Node, depth: usize) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    match list_type_marker(obj) {
        Some(ListRule::Map(keys)) => {
            let props = obj
                .get("items")
                .and_then(|items| items.get("properties"))
                .and_then(Value::as_object);
            for key in &keys {
                if let Some(default) = props
                    .and_then(|p| p.get(key))
                    .and_then(|p| p.get("default"))
                {
                    node.key_defaults.push((key.clone(), default.clone()));
                }
            }
            node.rule = Some(ListRule::Map(keys));
        }
        Some(rule) => node.rule = Some(rule),
        None => {}
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            walk_schema(sub, node.child_mut(name), depth + 1);
        }
    }
    if let Some(add @ Value::Object(_)) = obj.get("additionalProperties") {
        walk_schema(add, node.child_mut("*"), depth + 1);
    }
    if let Some(items) = obj.get("items") {
        walk_schema(items, node, depth + 1);
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        if let Some(subs) = obj.get(combinator).and_then(Value::as_array) {
            for sub in subs {
                walk_schema(sub, node, depth + 1);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_and_get_with_wildcards_and_escapes() {
        let mut rules = ListRules::new();
        rules.set("spec.template.spec.containers", map(&["name"]));
        rules.set("spec.pools.*.members", ListRule::Set);
        rules.set("data.a\\.b.items", ListRule::Atomic);
        rules.set("spec.list[].inner", ListRule::Atomic);
        assert_eq!(
            rules.get("spec.template.spec.containers"),
            Some(&map(&["name"]))
        );
        assert_eq!(rules.get("spec.pools.blue.members"), Some(&ListRule::Set));
        assert_eq!(rules.get("data.a\\.b.items"), Some(&ListRule::Atomic));
        assert_eq!(rules.get("spec.list.inner"), Some(&ListRule::Atomic));
        assert_eq!(rules.get("spec.template"), None);
        assert_eq!(rules.get("nope"), None);
        let paths: Vec<String> = rules.entries().into_iter().map(|(p, _)| p).collect();
        assert!(paths.contains(&"data.a\\.b.items".to_owned()), "{paths:?}");
        assert!(
            paths.contains(&"spec.pools.*.members".to_owned()),
            "{paths:?}"
        );
    }

    #[test]
    fn merge_prefers_other() {
        let mut a = ListRules::new();
        a.set("x", ListRule::Atomic);
        a.set("y", ListRule::Set);
        let mut b = ListRules::new();
        b.set("x", map(&["name"]));
        let c = a.merge(b);
        assert_eq!(c.get("x"), Some(&map(&["name"])));
        assert_eq!(c.get("y"), Some(&ListRule::Set));
    }

    #[test]
    fn without_atomic_keeps_maps_sets_and_key_defaults() {
        let mut rules = ListRules::new();
        rules.set("spec.ports", ListRule::Atomic);
        rules.set("spec.pools.*.hosts", ListRule::Atomic);
        rules.set("spec.tags", ListRule::Set);
        rules.set("spec.containers", map(&["name"]));
        rules.set("spec.containers.ports", ListRule::Atomic);
        rules.set_key_default("spec.containers", "kind", Value::from("app"));
        let kept = rules.without_atomic();
        assert_eq!(kept.get("spec.ports"), None);
        assert_eq!(kept.get("spec.pools.*.hosts"), None);
        assert_eq!(kept.get("spec.containers.ports"), None);
        assert_eq!(kept.get("spec.tags"), Some(&ListRule::Set));
        assert_eq!(kept.get("spec.containers"), Some(&map(&["name"])));
        assert_eq!(kept.entries().len(), 2);
        let node = kept
            .root()
            .and_then(|n| n.child("spec"))
            .and_then(|n| n.child("containers"));
        assert_eq!(
            node.map(|n| n.key_defaults.clone()),
            Some(vec![("kind".to_owned(), Value::from("app"))])
        );
    }

    #[test]
    fn builtin_deployment_has_pod_spec_rules() {
        let rules = ListRules::builtin("apps/v1", "Deployment");
        assert_eq!(
            rules.get("spec.template.spec.containers.ports"),
            Some(&map(&["containerPort", "protocol"]))
        );
        assert_eq!(
            rules.get("spec.template.spec.containers.env"),
            Some(&map(&["name"]))
        );
        assert_eq!(
            rules.get("spec.template.spec.initContainers.volumeMounts"),
            Some(&map(&["mountPath"]))
        );
        assert_eq!(
            rules.get("spec.template.spec.volumes"),
            Some(&map(&["name"]))
        );
        assert_eq!(rules.get("metadata.finalizers"), Some(&ListRule::Set));
        let cron = ListRules::builtin("batch/v1", "CronJob");
        assert_eq!(
            cron.get("spec.jobTemplate.spec.template.spec.containers"),
            Some(&map(&["name"]))
        );
        let svc = ListRules::builtin("v1", "Service");
        assert_eq!(svc.get("spec.ports"), Some(&map(&["port", "protocol"])));
        let pod = ListRules::builtin("v1", "Pod");
        assert_eq!(pod.get("spec.containers"), Some(&map(&["name"])));
        // a custom resource only gets ObjectMeta rules
        let custom = ListRules::builtin("example.com/v1", "CatSet");
        assert_eq!(custom.get("spec.template.spec.containers"), None);
        assert_eq!(custom.get("metadata.ownerReferences"), Some(&map(&["uid"])));
    }

    #[test]
    fn openapi_schema_markers_only() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["port", "protocol"],
                            "items": {"type": "object", "properties": {
                                "port": {"type": "integer"},
                                "protocol": {"type": "string", "default": "TCP"},
                                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                                         "items": {"type": "string"}}
                            }}
                        },
                        "args": {"type": "array", "x-kubernetes-list-type": "atomic"},
                        "template": {
                            "type": "object",
                            "x-kubernetes-embedded-resource": true,
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"spec": {"type": "object", "properties": {
                                "containers": {"type": "array", "items": {"type": "object"}}
                            }}}
                        },
                        "pools": {"type": "object", "additionalProperties": {
                            "type": "object", "properties": {"members": {
                                "type": "array", "x-kubernetes-list-type": "set"}}}},
                        "weird": {"type": "array", "x-kubernetes-list-type": "map"}
                    }
                }
            }
        });
        let rules = ListRules::from_openapi_schema(&schema);
        assert_eq!(rules.get("spec.ports"), Some(&map(&["port", "protocol"])));
        assert_eq!(rules.get("spec.ports.tags"), Some(&ListRule::Set));
        assert_eq!(rules.get("spec.args"), Some(&ListRule::Atomic));
        assert_eq!(rules.get("spec.template.spec.containers"), None);
        assert_eq!(rules.get("spec.pools.any.members"), Some(&ListRule::Set));
        assert_eq!(rules.get("spec.weird"), None);
        assert_eq!(rules.entries().len(), 4, "{:?}", rules.entries());
        // key default picked up from the item schema
        let mut node = rules.root().unwrap();
        for seg in ["spec", "ports"] {
            node = node.child(seg).unwrap();
        }
        assert_eq!(
            node.key_defaults,
            vec![("protocol".to_owned(), json!("TCP"))]
        );
        assert!(ListRules::from_openapi_schema(&json!("not a schema")).is_empty());
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "storage": false, "schema": {"openAPIV3Schema": {"properties": {"a": {"x-kubernetes-list-type": "set"}}}}},
            {"name": "v2", "storage": true, "schema": {"openAPIV3Schema": schema}}
        ]}});
        assert_eq!(ListRules::from_crd(&crd, None).unwrap().entries().len(), 4);
        assert_eq!(
            ListRules::from_crd(&crd, Some("v1")).unwrap().get("a"),
            Some(&ListRule::Set)
        );
        let err = ListRules::from_crd(&crd, Some("v9"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "at spec.versions[name=v9].schema.openAPIV3Schema: the CRD has no such schema"
        );
    }
}
