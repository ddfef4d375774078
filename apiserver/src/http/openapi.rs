//! OpenAPI v3 documents, in kube-apiserver's shape: `/openapi/v3` names each group-version's
//! document with a `hash` in its `serverRelativeURL` (clients cache a document by that URL); a
//! group-version document has the paths kubectl reads (each resource's PATCH takes
//! `fieldValidation`, so kubectl validates server-side) and `components.schemas`: the published
//! Kubernetes 1.37 schemas of the built-in kinds, generated from the `k8s-openapi` crate
//! (`openapi/v3/`, see its README) and each CRD version's schema, each kind marked with `x-kubernetes-group-version-kind`.
//! `/openapi/v2` is not served (404), which kubectl tolerates once v3 answers.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::registry::{Registry, ResourceDef};
use serde_json::{Map, Value, json};

/// The generated documents: group, version, the document (see `openapi/README.md`).
const VENDORED: [(&str, &str, &str); 10] = [
    (
        "",
        "v1",
        include_str!("../../openapi/v3/api__v1_openapi.json"),
    ),
    (
        "apps",
        "v1",
        include_str!("../../openapi/v3/apis__apps__v1_openapi.json"),
    ),
    (
        "batch",
        "v1",
        include_str!("../../openapi/v3/apis__batch__v1_openapi.json"),
    ),
    (
        "discovery.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__discovery.k8s.io__v1_openapi.json"),
    ),
    (
        "events.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__events.k8s.io__v1_openapi.json"),
    ),
    (
        "coordination.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__coordination.k8s.io__v1_openapi.json"),
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__admissionregistration.k8s.io__v1_openapi.json"),
    ),
    (
        "policy",
        "v1",
        include_str!("../../openapi/v3/apis__policy__v1_openapi.json"),
    ),
    (
        "networking.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__networking.k8s.io__v1_openapi.json"),
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        include_str!("../../openapi/v3/apis__rbac.authorization.k8s.io__v1_openapi.json"),
    ),
];

/// A vendored group-version's schemas and the hash of its text.
struct Builtin {
    schemas: Map<String, Value>,
    hash: String,
}

/// The vendored schemas by (group, version), parsed once. A document that does not parse
/// (caught by this module's tests) serves no built-in schemas.
fn builtin(group: &str, version: &str) -> Option<&'static Builtin> {
    static PARSED: OnceLock<HashMap<(String, String), Builtin>> = OnceLock::new();
    PARSED
        .get_or_init(|| {
            VENDORED
                .iter()
                .filter_map(|(g, v, text)| {
                    let doc: Value = serde_json::from_str(text).ok()?;
                    let schemas = doc.pointer("/components/schemas")?.as_object()?.clone();
                    let key = ((*g).to_owned(), (*v).to_owned());
                    Some((
                        key,
                        Builtin {
                            schemas,
                            hash: hash_of(text),
                        },
                    ))
                })
                .collect()
        })
        .get(&(group.to_owned(), version.to_owned()))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn hash_of(s: &str) -> String {
    // FNV-1a, only used as a cache key
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

fn group_versions(reg: &Registry) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    for d in reg.all() {
        for v in &d.versions {
            let k = (d.group.clone(), v.clone());
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// `/openapi/v3`: the index of group-version documents.
pub(super) fn root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, v) in group_versions(reg) {
        let p = gv_path(&g, &v);
        let doc = document(reg, &g, &v, false).unwrap_or(Value::Null);
        let vendored = builtin(&g, &v).map(|b| b.hash.as_str()).unwrap_or_default();
        let hash = hash_of(&format!("{vendored}{doc}"));
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

fn schema_name(d: &ResourceDef, version: &str) -> String {
    let group = if d.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        d.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{version}.{}", d.kind)
}

/// `/openapi/v3/apis/{group}/{version}` (or `api/v1`).
pub(super) fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    document(reg, group, version, true)
}

/// The document of a group-version, with the vendored built-in schemas or without them (for the
/// index's hash, which hashes their text instead).
fn document(reg: &Registry, group: &str, version: &str, with_builtin: bool) -> Option<Value> {
    let defs: Vec<&ResourceDef> = reg
        .all()
        .iter()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        .collect();
    if defs.is_empty() {
        return None;
    }
    let prefix = format!("/{}", gv_path(group, version));
    let mut paths = Map::new();
    let mut schemas = match builtin(group, version) {
        Some(b) if with_builtin => b.schemas.clone(),
        _ => Map::new(),
    };
    let params = json!([
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
    ]);
    for d in defs {
        let gvk = json!({"group": d.group, "version": version, "kind": d.kind});
        let item = if d.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
        } else {
            format!("{prefix}/{}/{{name}}", d.plural)
        };
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", d.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            item,
            json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
        );
        // a CRD version's schema (the built-in kinds' come from the generated documents)
        if let Some(schema) = d.schemas.get(version) {
            let mut schema = schema.clone();
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            schemas.insert(schema_name(d, version), schema);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_list_patch_with_field_validation() {
        let reg = Registry::with_builtins();
        let r = root(&reg);
        assert!(r["paths"]["apis/apps/v1"]["serverRelativeURL"].is_string());
        let doc = group_version(&reg, "apps", "v1").unwrap_or_default();
        let p = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
        assert_eq!(
            p["patch"]["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        assert_eq!(p["patch"]["parameters"][0]["name"], "fieldValidation");
        assert!(group_version(&reg, "nope", "v1").is_none());
    }

    /// Every vendored document parses, every `$ref` in it resolves inside it, and every built-in
    /// kind served in its group-version has its schema there (so `openapi/generate.py`'s list of kinds
    /// and `builtin_resources` cannot drift apart).
    #[test]
    fn vendored_documents_cover_the_served_built_in_kinds() {
        let reg = Registry::with_builtins();
        for (group, version, text) in VENDORED {
            let doc: Value = serde_json::from_str(text).unwrap_or_default();
            let Some(schemas) = doc
                .pointer("/components/schemas")
                .and_then(Value::as_object)
            else {
                panic!("{group}/{version}: no components.schemas");
            };
            assert!(builtin(group, version).is_some(), "{group}/{version}");
            for target in text.split("\"#/components/schemas/").skip(1) {
                let name = target.split('"').next().unwrap_or_default();
                assert!(schemas.contains_key(name), "{group}/{version}: $ref {name}");
            }
            let served = group_version(&reg, group, version).unwrap_or_default();
            for d in reg
                .all()
                .iter()
                .filter(|d| d.crd.is_none() && d.group == group)
            {
                let gvk = json!({"group": group, "version": version, "kind": d.kind});
                let marked = served["components"]["schemas"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(_, s)| {
                        s["x-kubernetes-group-version-kind"]
                            .as_array()
                            .is_some_and(|l| l.contains(&gvk))
                    });
                assert!(marked, "{group}/{version} {}: no schema", d.kind);
            }
        }
        // a group-version without a generated document still lists its paths
        let crds = group_version(&reg, "apiextensions.k8s.io", "v1").unwrap_or_default();
        assert_eq!(crds["components"]["schemas"], json!({}));
        assert!(crds["paths"].as_object().is_some_and(|p| !p.is_empty()));
        let r = root(&reg);
        assert!(
            r["paths"]["apis/discovery.k8s.io/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/discovery.k8s.io/v1?hash="))
        );
    }
}
