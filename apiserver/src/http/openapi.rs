//! Minimal OpenAPI v3 documents: enough for kubectl to see that every resource's PATCH
//! supports the `fieldValidation` query parameter (so it validates server-side instead of
//! downloading full schemas) and to find CRD schemas. `/openapi/v2` is not served (404), which
//! kubectl tolerates once v3 answers.

use crate::registry::{Registry, ResourceDef};
use serde_json::{Map, Value, json};

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
        let doc = group_version(reg, &g, &v).unwrap_or(Value::Null);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash_of(&doc.to_string()))}),
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
    let mut schemas = Map::new();
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
        // Only CRD schemas are published: for built-in kinds kubectl then falls back to its
        // compiled-in patch metadata (merge keys), which a schemaless document would hide.
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
}
