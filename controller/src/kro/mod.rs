//! kro's ResourceGraphDefinitions (`kro.run/v1alpha1`) served by kmeta: each becomes the
//! instance CRD generated from its SimpleSchema (`schema`) and a CompositeController whose
//! sync hook is the graph itself, evaluated with CEL ([`crate::api::CelHook`]), so kmeta's own
//! claim, adopt, apply (dynapply, sidecar-safe) and status machinery runs the instances, and
//! `kmeta trace`, `render`, `plan`, pause and reconcile-now work for them. [`translate`] is the
//! pure translation; [`serve`] the executor watching ResourceGraphDefinitions. Design:
//! `docs/design/cel-hooks.md`.

pub(crate) mod schema;
mod serve;

use serde_json::{Value, json};

use crate::hook::cel::check;
use crate::hook::cel::external::RESOURCE_FIELD;
use crate::hook::cel::graph::{self, Graph, Source};
pub use crate::hook::cel::{EvalError, GraphError};
pub use kmeta_cel::Schema;
use kmeta_cel::Type;
pub use serve::{ServeOptions, install_crd, serve, serve_while, serve_with};

/// kro's API group and version of the ResourceGraphDefinition.
pub const API_VERSION: &str = "kro.run/v1alpha1";
/// The group an instance CRD takes when `spec.schema.group` is not set.
pub const DEFAULT_GROUP: &str = "kro.run";
/// The field manager of kmeta's writes of generated CRDs and CompositeControllers.
pub const FIELD_MANAGER: &str = "kmeta-kro";

/// Why a ResourceGraphDefinition cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum KroError {
    /// The SimpleSchema is wrong at `path`.
    #[error("{path}: {message}")]
    Schema {
        /// Where (`spec.schema.spec.replicas`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The graph is wrong: the resource, the field path and the expression named.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// An expression failed for good while answering an instance's sync.
    #[error(transparent)]
    Evaluate(#[from] EvalError),
    /// The graph uses a kro feature kmeta does not run yet (docs/design/cel-hooks.md); none
    /// refused today (an `externalRef` was until kmeta read it as a related object).
    #[error("resource {id:?}: {feature} is not supported by kmeta yet")]
    Unsupported {
        /// The resource's id.
        id: String,
        /// The feature (`externalRef`).
        feature: &'static str,
    },
    /// A child's kind is not served by the API server.
    #[error("resource {id:?}: {api_version} {kind} is not served by the API server")]
    UnknownKind {
        /// The resource's id.
        id: String,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// Reading or writing through the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
}

/// What kmeta makes of one ResourceGraphDefinition.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The instance CRD.
    pub crd: Value,
    /// The CompositeController running the instances.
    pub controller: Value,
    /// The resources' ids in the order they are made (kro's `status.topologicalOrder`).
    pub order: Vec<String>,
}

/// The plural of `kind` as kro names the instance CRD's resource (lowercase, English plural).
pub fn plural(kind: &str) -> String {
    crate::hook::cel::external::plural(kind)
}

fn schema_field<'a>(rgd: &'a Value, f: &str) -> Option<&'a str> {
    rgd.pointer(&format!("/spec/schema/{f}"))
        .and_then(Value::as_str)
}

/// The instance CRD of `rgd`: group, version, kind and scope from `spec.schema`, the spec's
/// OpenAPI schema from its SimpleSchema, a status with kro's `state` and `conditions` (and the
/// fields of the status expressions, kept whole), its printer columns or kro's defaults, its
/// `shortNames` and `categories`.
pub fn instance_crd(rgd: &Value) -> Result<Value, KroError> {
    let need = |f: &str| {
        schema_field(rgd, f)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| KroError::Schema {
                path: format!("spec.schema.{f}"),
                message: "is required".into(),
            })
    };
    let (kind, version) = (need("kind")?, need("apiVersion")?);
    let mut chars = kind.chars();
    let upper_camel = chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_alphanumeric());
    if !upper_camel {
        return Err(KroError::Schema {
            path: "spec.schema.kind".into(),
            message: format!("{kind:?} is not a valid kind (UpperCamelCase)"),
        });
    }
    let group = schema_field(rgd, "group").unwrap_or(DEFAULT_GROUP);
    let scope = schema_field(rgd, "scope").unwrap_or("Namespaced");
    let types: schema::Types = rgd
        .pointer("/spec/schema/types")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let empty = json!({});
    let spec_src = rgd
        .pointer("/spec/schema/spec")
        .filter(|v| !v.is_null())
        .unwrap_or(&empty);
    let spec = schema::object_schema(spec_src, &types, "spec.schema.spec")?;
    let columns = rgd
        .pointer("/spec/schema/additionalPrinterColumns")
        .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
        .cloned()
        .unwrap_or_else(default_columns);
    let p = plural(kind);
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{p}.{group}"), "labels": {"kro.run/owned": "true"}},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": p,
                "singular": kind.to_lowercase()},
            "scope": scope,
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec, "status": status_schema()}}},
            }],
        },
    });
    copy_metadata(rgd, &mut crd);
    copy_names(rgd, &mut crd)?;
    Ok(crd)
}

/// `spec.schema.shortNames` and `categories` onto the CRD's names, as kro; each a list of
/// strings.
fn copy_names(rgd: &Value, crd: &mut Value) -> Result<(), KroError> {
    for f in ["shortNames", "categories"] {
        let Some(v) = rgd
            .pointer(&format!("/spec/schema/{f}"))
            .filter(|v| !v.is_null())
        else {
            continue;
        };
        let strings = v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !strings {
            return Err(KroError::Schema {
                path: format!("spec.schema.{f}"),
                message: format!("must be a list of strings, got {v}"),
            });
        }
        if v.as_array().is_some_and(|a| !a.is_empty()) {
            crd["spec"]["names"][f] = v.clone();
        }
    }
    Ok(())
}

/// `spec.schema.metadata` (labels, annotations) onto the CRD, as kro.
fn copy_metadata(rgd: &Value, crd: &mut Value) {
    for f in ["labels", "annotations"] {
        let Some(m) = rgd
            .pointer(&format!("/spec/schema/metadata/{f}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (k, v) in m {
            crd["metadata"][f][k] = v.clone();
        }
    }
}

fn status_schema() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
        "state": {"type": "string"},
        "conditions": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"type": "string"}, "status": {"type": "string"},
            "reason": {"type": "string"}, "message": {"type": "string"},
            "lastTransitionTime": {"type": "string"}, "observedGeneration": {"type": "integer"}}}},
    }})
}

/// kro's printer columns when the RGD names none: State, Ready, Age.
fn default_columns() -> Value {
    json!([
        {"name": "State", "type": "string", "description": "The state of a ResourceGraphDefinition instance", "jsonPath": ".status.state"},
        {"name": "Ready", "type": "string", "description": "Whether a ResourceGraphDefinition instance is ready", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Age", "type": "date", "description": "Age of the resource", "jsonPath": ".metadata.creationTimestamp"},
    ])
}

/// The CompositeController running `rgd`'s instances: its instances as parents, each
/// resource's kind as a child (`plural_of` names a kind's resource), children selected by a
/// generated selector and updated in place, the graph as its CEL sync hook; owned by the RGD
/// (deleted with it) and labelled as it is. A graph with external references reads them as
/// related objects: the same graph is its customize hook, both hooks at version v2 (so a
/// reference may name another namespace), each reference's resource written into it.
pub(crate) fn controller(
    rgd: &Value,
    graph_order: &Graph,
    plural_of: &dyn Fn(&str, &str) -> Option<String>,
) -> Result<Value, KroError> {
    let crd = instance_crd(rgd)?;
    let s = &crd["spec"];
    let parent_av = format!(
        "{}/{}",
        s["group"].as_str().unwrap_or_default(),
        s["versions"][0]["name"].as_str().unwrap_or_default()
    );
    let mut graph_spec = rgd["spec"].clone();
    let (children, external) = resources(graph_order, plural_of, &mut graph_spec)?;
    let cel = json!({"cel": {"resourceGraph": graph_spec}});
    let hooks = if external {
        let mut v2 = cel.clone();
        v2["version"] = json!("v2");
        json!({"sync": v2, "customize": v2})
    } else {
        json!({ "sync": cel })
    };
    let meta = &rgd["metadata"];
    let mut labels = meta.get("labels").cloned().unwrap_or_else(|| json!({}));
    labels["kro.run/resource-graph-definition-name"] = meta["name"].clone();
    Ok(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": meta["name"], "labels": labels, "ownerReferences": [{
            "apiVersion": API_VERSION, "kind": "ResourceGraphDefinition", "name": meta["name"],
            "uid": meta["uid"], "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": parent_av, "resource": s["names"]["plural"]},
            "childResources": children,
            "hooks": hooks,
        },
    }))
}

/// The `childResources` of the graph's templates, and whether it has external references,
/// whose resource is written into `graph_spec` (each kind's resource named by `plural_of`).
fn resources(
    graph_order: &Graph,
    plural_of: &dyn Fn(&str, &str) -> Option<String>,
    graph_spec: &mut Value,
) -> Result<(Vec<Value>, bool), KroError> {
    let mut children: Vec<Value> = Vec::new();
    let mut external = false;
    for n in &graph_order.nodes {
        let Some(resource) = plural_of(&n.api_version, &n.kind) else {
            return Err(KroError::UnknownKind {
                id: n.id.clone(),
                api_version: n.api_version.clone(),
                kind: n.kind.clone(),
            });
        };
        if matches!(n.source, Source::External(_)) {
            external = true;
            let written = graph_spec
                .get_mut("resources")
                .and_then(Value::as_array_mut)
                .and_then(|rs| rs.iter_mut().find(|r| r["id"] == n.id.as_str()))
                .and_then(|r| r.get_mut("externalRef"))
                .and_then(Value::as_object_mut);
            if let Some(x) = written {
                x.insert(RESOURCE_FIELD.to_owned(), json!(resource));
            }
            continue;
        }
        let child = json!({"apiVersion": n.api_version, "resource": resource,
            "updateStrategy": {"method": "InPlace"}});
        if !children
            .iter()
            .any(|c| c["apiVersion"] == child["apiVersion"] && c["resource"] == child["resource"])
        {
            children.push(child);
        }
    }
    Ok((children, external))
}

/// What kmeta makes of `rgd`: its graph checked (syntax, ids, cycles, and the types of its
/// expressions against the instance's schema, the children's kinds read as `dyn`) and ordered,
/// its instance CRD and controller. [`translate_checked`] checks the children's fields too.
pub fn translate(
    rgd: &Value,
    plural_of: &dyn Fn(&str, &str) -> Option<String>,
) -> Result<Served, KroError> {
    translate_checked(rgd, plural_of, &|_, _| None)
}

/// As [`translate`], with `schema_of` giving the OpenAPI schema of a child kind (apiVersion,
/// kind) where it is known: the fields its expressions read from other resources and the
/// fields its templates place values in are type-checked against it (docs/design/cel-hooks.md).
pub fn translate_checked(
    rgd: &Value,
    plural_of: &dyn Fn(&str, &str) -> Option<String>,
    schema_of: &dyn Fn(&str, &str) -> Option<Schema>,
) -> Result<Served, KroError> {
    let g = graph::parse(rgd.get("spec").unwrap_or(&Value::Null))?;
    let crd = instance_crd(rgd)?;
    let root = crd.pointer("/spec/versions/0/schema/openAPIV3Schema");
    let instance = Schema::new(root.cloned().unwrap_or(Value::Null)).to_type();
    let kind_of = |av: &str, kind: &str| schema_of(av, kind).map_or(Type::Dyn, |s| s.to_type());
    check::check_types(&g, &instance, &kind_of)?;
    Ok(Served {
        crd,
        controller: controller(rgd, &g, plural_of)?,
        order: g.nodes.iter().map(|n| n.id.clone()).collect(),
    })
}

/// A resource graph compiled as a CEL hook holds it, answering requests as the hook does:
/// public for the CEL hook bench (`benches/cel_hook.rs`), not an API.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct CompiledGraph(std::sync::Arc<Graph>);

impl CompiledGraph {
    /// Compiles `resource_graph` (an RGD's `spec`).
    pub fn compile(resource_graph: &Value) -> Result<CompiledGraph, KroError> {
        Ok(CompiledGraph(std::sync::Arc::new(graph::parse(
            resource_graph,
        )?)))
    }

    /// The answer to a `hook` request, stamped `now`.
    pub fn answer(&self, hook: &str, request: &Value, now: &str) -> Result<Value, KroError> {
        Ok(crate::hook::cel::answer(&self.0, hook, request, now)?)
    }
}

/// The ResourceGraphDefinition CRD (`kro.run/v1alpha1`, cluster-scoped, with a status), to
/// install where kro is not: the spec kept whole, kmeta reads it as kro's Go types do.
pub fn resource_graph_definition_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "resourcegraphdefinitions.kro.run"},
        "spec": {
            "group": "kro.run",
            "names": {"kind": "ResourceGraphDefinition", "listKind": "ResourceGraphDefinitionList",
                "plural": "resourcegraphdefinitions", "singular": "resourcegraphdefinition",
                "shortNames": ["rgd"], "categories": ["kro"]},
            "scope": "Cluster",
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "APIVERSION", "type": "string", "jsonPath": ".spec.schema.apiVersion"},
                    {"name": "KIND", "type": "string", "jsonPath": ".spec.schema.kind"},
                    {"name": "STATE", "type": "string", "jsonPath": ".status.state"},
                    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "required": ["schema"]},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}],
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
