//! The resource registry: which resources are served, with their names, scope and verbs.

use crate::selector::FieldSelector;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The standard verbs of a fully featured resource.
pub(crate) const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Where `/scale` finds replicas and the selector in the object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScaleSpec {
    /// JSON path of desired replicas, e.g. `.spec.replicas`.
    pub(crate) spec_replicas_path: String,
    /// JSON path of observed replicas, e.g. `.status.replicas`.
    pub(crate) status_replicas_path: String,
    /// JSON path of the label selector string, if any.
    pub(crate) label_selector_path: Option<String>,
}

/// One served resource (all its served versions).
#[derive(Debug, Clone)]
pub(crate) struct ResourceDef {
    /// API group, "" for core.
    pub(crate) group: String,
    /// Served versions, preferred (storage) first.
    pub(crate) versions: Vec<String>,
    /// Kind, e.g. `Deployment`.
    pub(crate) kind: String,
    /// Lowercase plural, e.g. `deployments`.
    pub(crate) plural: String,
    /// Lowercase singular.
    pub(crate) singular: String,
    /// Namespaced or cluster scoped.
    pub(crate) namespaced: bool,
    /// Short names (`deploy`).
    pub(crate) short_names: Vec<String>,
    /// Categories (`all`).
    pub(crate) categories: Vec<String>,
    /// Whether a `/status` subresource exists.
    pub(crate) status_subresource: bool,
    /// `/scale` subresource, if any.
    pub(crate) scale: Option<ScaleSpec>,
    /// Name of the CRD that defines this resource; `None` for built-ins.
    pub(crate) crd: Option<String>,
    /// The CRD's schema per version (`openAPIV3Schema`), used for list types.
    pub(crate) schemas: BTreeMap<String, Value>,
    /// The same schemas compiled once, for pruning, defaulting and validation of writes.
    pub(crate) structural: BTreeMap<String, Arc<crate::schema::Schema>>,
    /// CRD `selectableFields` (without the leading dot), usable in field selectors.
    pub(crate) selectable_fields: Vec<String>,
    /// The CRD's `additionalPrinterColumns` per version, for `kubectl get` tables.
    pub(crate) printer_columns: BTreeMap<String, Vec<Value>>,
}

impl ResourceDef {
    /// Storage key: `group/plural`, independent of version.
    pub(crate) fn storage_key(&self) -> Arc<str> {
        match crate::convert::shared_storage(&self.group, &self.plural) {
            Some(shared) => Arc::from(shared),
            None => Arc::from(format!("{}/{}", self.group, self.plural).as_str()),
        }
    }

    /// A field selector with each label resolved to the field it selects in stored objects.
    pub(crate) fn stored_selector(&self, field: FieldSelector) -> FieldSelector {
        field.resolve(|label| crate::convert::stored_field(&self.group, &self.plural, label))
    }

    /// `apiVersion` for a version.
    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// The compiled schema of a custom resource's version (`None` for built-in kinds and
    /// versions without a schema).
    pub(crate) fn structural_schema(&self, version: &str) -> Option<Arc<crate::schema::Schema>> {
        self.crd.as_ref()?;
        self.structural.get(version).cloned()
    }

    /// Whether this is a built-in kind (strategic merge patch allowed).
    pub(crate) fn is_builtin(&self) -> bool {
        self.crd.is_none()
    }

    /// Whether a field selector may use this field (`metadata.name`/`metadata.namespace` for all,
    /// plus the per-kind fields kube-apiserver supports, plus a CRD's `selectableFields`).
    pub(crate) fn supports_field(&self, field: &str) -> bool {
        if matches!(field, "metadata.name" | "metadata.namespace") {
            return true;
        }
        let builtin: &[&str] = match (self.group.as_str(), self.plural.as_str()) {
            ("", "pods") => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            ("", "events") => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("events.k8s.io", "events") => &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "source",
                "type",
            ],
            ("", "secrets") => &["type"],
            ("", "namespaces") => &["status.phase"],
            ("", "nodes") => &["spec.unschedulable"],
            ("apps", "replicasets") => &["status.replicas"],
            ("batch", "jobs") => &["status.successful"],
            _ => &[],
        };
        builtin.contains(&field) || self.selectable_fields.iter().any(|f| f == field)
    }

    /// Group-qualified resource, e.g. `deployments.apps`.
    pub(crate) fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The set of served resources.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    defs: Vec<ResourceDef>,
}

/// One built-in resource, a row of [`BUILTINS`]; every built-in is served at `v1`.
struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    /// In the `all` category (`kubectl get all`).
    all: bool,
    /// Has the `status` subresource.
    status: bool,
    /// Has the `scale` subresource (`.spec.replicas`, `.status.replicas`, `.status.selector`).
    scale: bool,
}

impl Builtin {
    const fn namespaced(group: &'static str, kind: &'static str, plural: &'static str) -> Self {
        Builtin {
            group,
            kind,
            plural,
            namespaced: true,
            short_names: &[],
            all: false,
            status: false,
            scale: false,
        }
    }
    const fn cluster(group: &'static str, kind: &'static str, plural: &'static str) -> Self {
        Builtin {
            namespaced: false,
            ..Builtin::namespaced(group, kind, plural)
        }
    }
    const fn short(self, short_names: &'static [&'static str]) -> Self {
        Builtin {
            short_names,
            ..self
        }
    }
    const fn all(self) -> Self {
        Builtin { all: true, ..self }
    }
    const fn status(self) -> Self {
        Builtin {
            status: true,
            ..self
        }
    }
    const fn scale(self) -> Self {
        Builtin {
            scale: true,
            ..self
        }
    }

    fn def(&self) -> ResourceDef {
        ResourceDef {
            group: self.group.into(),
            versions: vec!["v1".into()],
            kind: self.kind.into(),
            plural: self.plural.into(),
            singular: self.kind.to_lowercase(),
            namespaced: self.namespaced,
            short_names: self.short_names.iter().map(|s| s.to_string()).collect(),
            categories: if self.all { vec!["all".into()] } else { vec![] },
            status_subresource: self.status,
            scale: self.scale.then(|| ScaleSpec {
                spec_replicas_path: ".spec.replicas".into(),
                status_replicas_path: ".status.replicas".into(),
                label_selector_path: Some(".status.selector".into()),
            }),
            crd: None,
            schemas: BTreeMap::new(),
            structural: BTreeMap::new(),
            selectable_fields: vec![],
            printer_columns: BTreeMap::new(),
        }
    }
}

/// The built-in resources this server serves, in discovery order.
const BUILTINS: &[Builtin] = &[
    Builtin::cluster("", "Namespace", "namespaces")
        .short(&["ns"])
        .status(),
    Builtin::namespaced("", "ConfigMap", "configmaps").short(&["cm"]),
    Builtin::namespaced("", "Secret", "secrets"),
    Builtin::namespaced("", "Service", "services")
        .short(&["svc"])
        .all()
        .status(),
    Builtin::namespaced("", "ServiceAccount", "serviceaccounts").short(&["sa"]),
    Builtin::namespaced("", "Pod", "pods")
        .short(&["po"])
        .all()
        .status(),
    Builtin::namespaced("", "Event", "events").short(&["ev"]),
    Builtin::namespaced("", "Endpoints", "endpoints").short(&["ep"]),
    Builtin::namespaced("", "ResourceQuota", "resourcequotas")
        .short(&["quota"])
        .status(),
    Builtin::namespaced("", "PersistentVolumeClaim", "persistentvolumeclaims")
        .short(&["pvc"])
        .status(),
    Builtin::cluster("", "Node", "nodes")
        .short(&["no"])
        .status(),
    Builtin::namespaced("events.k8s.io", "Event", "events").short(&["ev"]),
    Builtin::namespaced("apps", "Deployment", "deployments")
        .short(&["deploy"])
        .all()
        .status()
        .scale(),
    Builtin::namespaced("apps", "StatefulSet", "statefulsets")
        .short(&["sts"])
        .all()
        .status()
        .scale(),
    Builtin::namespaced("apps", "DaemonSet", "daemonsets")
        .short(&["ds"])
        .all()
        .status(),
    Builtin::namespaced("apps", "ReplicaSet", "replicasets")
        .short(&["rs"])
        .all()
        .status()
        .scale(),
    Builtin::namespaced("apps", "ControllerRevision", "controllerrevisions"),
    Builtin::namespaced("batch", "Job", "jobs").all().status(),
    Builtin::namespaced("batch", "CronJob", "cronjobs")
        .short(&["cj"])
        .all()
        .status(),
    Builtin::namespaced("coordination.k8s.io", "Lease", "leases"),
    Builtin::namespaced("discovery.k8s.io", "EndpointSlice", "endpointslices"),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    ),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    ),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
    .status(),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
    ),
    Builtin::cluster(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    ),
    Builtin::namespaced("policy", "PodDisruptionBudget", "poddisruptionbudgets")
        .short(&["pdb"])
        .status(),
    Builtin::namespaced("networking.k8s.io", "Ingress", "ingresses")
        .short(&["ing"])
        .status(),
    Builtin::namespaced("networking.k8s.io", "NetworkPolicy", "networkpolicies").short(&["netpol"]),
    Builtin::namespaced("rbac.authorization.k8s.io", "Role", "roles"),
    Builtin::namespaced("rbac.authorization.k8s.io", "RoleBinding", "rolebindings"),
    Builtin::cluster("rbac.authorization.k8s.io", "ClusterRole", "clusterroles"),
    Builtin::cluster(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
    ),
    Builtin::cluster(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
    .short(&["crd", "crds"])
    .status(),
];

/// The built-in resources this server serves.
pub(crate) fn builtin_resources() -> Vec<ResourceDef> {
    BUILTINS.iter().map(Builtin::def).collect()
}

/// Errors reading a CRD into a [`ResourceDef`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum CrdError {
    /// A required field is missing or has the wrong type.
    #[error("spec.{0}: Required value")]
    Missing(&'static str),
    /// A field has an invalid value.
    #[error("{field}: Invalid value: {msg}")]
    Invalid {
        /// Field path.
        field: String,
        /// What is wrong.
        msg: String,
    },
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

fn parse_json_path(v: Option<&str>, default: &str) -> String {
    v.unwrap_or(default).to_string()
}

/// Build the served resource from a CRD object (apiextensions.k8s.io/v1).
pub(crate) fn crd_to_def(crd: &Value) -> Result<ResourceDef, CrdError> {
    let spec = crd.get("spec").ok_or(CrdError::Missing("spec"))?;
    let group = str_at(spec, &["group"]).ok_or(CrdError::Missing("group"))?;
    let kind = str_at(spec, &["names", "kind"]).ok_or(CrdError::Missing("names.kind"))?;
    let plural = str_at(spec, &["names", "plural"]).ok_or(CrdError::Missing("names.plural"))?;
    let name = str_at(crd, &["metadata", "name"]).unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(CrdError::Invalid {
            field: "metadata.name".into(),
            msg: format!("\"{name}\": must be spec.names.plural+\".\"+spec.group"),
        });
    }
    let singular = str_at(spec, &["names", "singular"])
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = crd_namespaced(spec)?;
    let strs = |p: &str| -> Vec<String> {
        spec.get("names")
            .and_then(|n| n.get(p))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or(CrdError::Missing("versions"))?;
    if versions.is_empty() {
        return Err(CrdError::Missing("versions"));
    }
    let mut vs = CrdVersions::default();
    for (i, v) in versions.iter().enumerate() {
        vs.read(i, v)?;
    }
    let storage = vs.storage.ok_or_else(|| CrdError::Invalid {
        field: "spec.versions".into(),
        msg: "must have exactly one version marked as storage version".into(),
    })?;
    // preferred version: the storage version if served, else the first served
    vs.served.sort_by_key(|v| if *v == storage { 0 } else { 1 });
    Ok(ResourceDef {
        group: group.into(),
        versions: vs.served,
        kind: kind.into(),
        plural: plural.into(),
        singular,
        namespaced,
        short_names: strs("shortNames"),
        categories: strs("categories"),
        status_subresource: vs.status_subresource,
        scale: vs.scale,
        crd: Some(name.to_string()),
        schemas: vs.schemas,
        structural: vs.structural,
        selectable_fields: vs.selectable,
        printer_columns: vs.printer_columns,
    })
}

/// `spec.scope`: `Namespaced` or `Cluster`.
fn crd_namespaced(spec: &Value) -> Result<bool, CrdError> {
    match str_at(spec, &["scope"]).ok_or(CrdError::Missing("scope"))? {
        "Namespaced" => Ok(true),
        "Cluster" => Ok(false),
        other => Err(CrdError::Invalid {
            field: "spec.scope".into(),
            msg: format!("\"{other}\": supported values: \"Cluster\", \"Namespaced\""),
        }),
    }
}

/// What the versions of a CRD declare, read one version at a time.
#[derive(Default)]
struct CrdVersions {
    served: Vec<String>,
    storage: Option<String>,
    schemas: BTreeMap<String, Value>,
    structural: BTreeMap<String, Arc<crate::schema::Schema>>,
    status_subresource: bool,
    scale: Option<ScaleSpec>,
    selectable: Vec<String>,
    printer_columns: BTreeMap<String, Vec<Value>>,
}

impl CrdVersions {
    /// Read `spec.versions[i]`.
    fn read(&mut self, i: usize, v: &Value) -> Result<(), CrdError> {
        let vname = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| CrdError::Invalid {
                field: format!("spec.versions[{i}].name"),
                msg: "required".into(),
            })?;
        if v.get("served").and_then(Value::as_bool).unwrap_or(false) {
            self.served.push(vname.to_string());
        }
        if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
            if self.storage.is_some() {
                return Err(CrdError::Invalid {
                    field: "spec.versions".into(),
                    msg: "must have exactly one version marked as storage version".into(),
                });
            }
            self.storage = Some(vname.to_string());
        }
        if let Some(fields) = v.get("selectableFields").and_then(Value::as_array) {
            for f in fields {
                if let Some(p) = f.get("jsonPath").and_then(Value::as_str) {
                    let p = p.trim_start_matches('.').to_string();
                    if !self.selectable.contains(&p) {
                        self.selectable.push(p);
                    }
                }
            }
        }
        if let Some(s) = v.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
            let compiled = crate::schema::Schema::compile(s).map_err(|e| CrdError::Invalid {
                field: format!("spec.versions[{i}].schema.{}", e.field),
                msg: e.message,
            })?;
            self.structural
                .insert(vname.to_string(), Arc::new(compiled));
            self.schemas.insert(vname.to_string(), s.clone());
        }
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            check_printer_columns(i, cols)?;
            self.printer_columns.insert(vname.to_string(), cols.clone());
        }
        if let Some(sub) = v.get("subresources") {
            if sub.get("status").is_some() {
                self.status_subresource = true;
            }
            if let Some(sc) = sub.get("scale") {
                self.scale = Some(scale_spec(sc));
            }
        }
        Ok(())
    }
}

/// Every printer column of `spec.versions[i]` needs a name, a type and a JSONPath.
fn check_printer_columns(i: usize, cols: &[Value]) -> Result<(), CrdError> {
    for (j, c) in cols.iter().enumerate() {
        for f in ["name", "type", "jsonPath"] {
            if c.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(CrdError::Invalid {
                    field: format!("spec.versions[{i}].additionalPrinterColumns[{j}].{f}"),
                    msg: "Required value".into(),
                });
            }
        }
    }
    Ok(())
}

/// `subresources.scale` of a CRD version.
fn scale_spec(sc: &Value) -> ScaleSpec {
    ScaleSpec {
        spec_replicas_path: parse_json_path(
            sc.get("specReplicasPath").and_then(Value::as_str),
            ".spec.replicas",
        ),
        status_replicas_path: parse_json_path(
            sc.get("statusReplicasPath").and_then(Value::as_str),
            ".status.replicas",
        ),
        label_selector_path: sc
            .get("labelSelectorPath")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

impl Registry {
    /// A registry with the built-in resources.
    pub(crate) fn with_builtins() -> Self {
        Registry {
            defs: builtin_resources(),
        }
    }

    /// All served resources.
    pub(crate) fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// Find a resource by group, version and plural.
    pub(crate) fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| {
            d.group == group && d.plural == plural && d.versions.iter().any(|v| v == version)
        })
    }

    /// Find a resource by group and plural (any version).
    pub(crate) fn lookup_group_resource(&self, group: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.plural == plural)
    }

    /// Whether any resource is served under group/version.
    pub(crate) fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.versions.iter().any(|v| v == version))
    }

    /// Install (or replace) a CRD-defined resource.
    pub(crate) fn install(&mut self, def: ResourceDef) {
        self.defs
            .retain(|d| !(d.group == def.group && d.plural == def.plural));
        self.defs.push(def);
    }

    /// Remove the resource defined by the named CRD.
    pub(crate) fn uninstall_crd(&mut self, crd_name: &str) -> Option<ResourceDef> {
        let idx = self
            .defs
            .iter()
            .position(|d| d.crd.as_deref() == Some(crd_name))?;
        Some(self.defs.remove(idx))
    }

    /// Groups with their versions (preferred first), core group excluded, in a stable order:
    /// built-in groups in registration order, then CRD groups.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![];
        for d in &self.defs {
            if d.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    for v in &d.versions {
                        if !vs.contains(v) {
                            vs.push(v.clone());
                        }
                    }
                }
                None => out.push((d.group.clone(), d.versions.clone())),
            }
        }
        for (_, vs) in out.iter_mut() {
            sort_versions(vs);
        }
        out
    }
}

/// Sort versions by Kubernetes version priority: GA > beta > alpha, higher numbers first,
/// then non-conforming names alphabetically.
pub(crate) fn sort_versions(vs: &mut [String]) {
    fn rank(v: &str) -> (u8, i64, i64, String) {
        let parse = |s: &str| -> Option<(i64, u8, i64)> {
            let s = s.strip_prefix('v')?;
            let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
            let major: i64 = digits.parse().ok()?;
            let rest = &s[digits.len()..];
            if rest.is_empty() {
                return Some((major, 0, 0));
            }
            let (lvl, num) = if let Some(n) = rest.strip_prefix("beta") {
                (1, n)
            } else if let Some(n) = rest.strip_prefix("alpha") {
                (2, n)
            } else {
                return None;
            };
            Some((major, lvl, num.parse().ok()?))
        };
        match parse(v) {
            Some((major, lvl, minor)) => (lvl, -major, -minor, String::new()),
            None => (3, 0, 0, v.to_string()),
        }
    }
    vs.sort_by_key(|v| rank(v));
}

/// The `status` a freshly accepted CRD gets.
pub(crate) fn crd_accepted_status(crd: &Value, now: &str, storage_version: &str) -> Value {
    let names = crd
        .get("spec")
        .and_then(|s| s.get("names"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "acceptedNames": names,
        "storedVersions": [storage_version],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builtins_lookup() {
        let r = Registry::with_builtins();
        let d = r.lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(d.kind, "Deployment");
        assert!(d.namespaced && d.status_subresource && d.scale.is_some());
        assert!(
            r.lookup("", "v1", "namespaces")
                .is_some_and(|d| !d.namespaced)
        );
        assert!(r.lookup("apps", "v2", "deployments").is_none());
    }

    #[test]
    fn version_priority() {
        let mut v = vec![
            "v1alpha1".to_string(),
            "v2".into(),
            "v1beta2".into(),
            "foo".into(),
            "v1".into(),
            "v1beta1".into(),
        ];
        sort_versions(&mut v);
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }

    #[test]
    fn crd_def() {
        let crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
              "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
              "versions": [
                {"name": "v1alpha1", "served": true, "storage": false},
                {"name": "v1", "served": true, "storage": true,
                 "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        });
        let d = crd_to_def(&crd).unwrap();
        assert_eq!(d.versions, ["v1", "v1alpha1"]);
        assert_eq!(d.singular, "widget");
        assert!(d.status_subresource);
        assert_eq!(d.short_names, ["wd"]);
        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("nope");
        assert!(matches!(crd_to_def(&bad), Err(CrdError::Invalid { .. })));
    }
}
