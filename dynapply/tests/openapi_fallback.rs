//! Checks the fallback table (`ListRules::builtin`, used when the API server serves no OpenAPI v3
//! schema for a kind) against the Kubernetes 1.37 OpenAPI documents kmeta-apiserver serves
//! (`apiserver/openapi/v3/`, generated from the `k8s-openapi` crate): for every list field of
//! every built-in kind in them, outside `status`, a map or a set in the document must be the
//! table's rule too (those rules keep other actors' items, and kmeta uses them by default), and
//! an `atomic` list must be atomic or unlisted in the table (kmeta does not let `atomic` override
//! the convention by default, see `docs/design/list-rules-from-openapi.md`), except the lists in
//! `ATOMIC_MERGED_BY_TABLE`. Kinds in `LEFT_TO_RUNTIME` are not checked.

use std::path::Path;

use dynapply::{ListRule, ListRules};
use serde_json::Value;

/// Kinds whose list fields the fallback table does not try to cover: kmeta reads their rules from
/// the API server's OpenAPI v3 document, and without one merges their lists by the convention.
const LEFT_TO_RUNTIME: &[(&str, &str)] =
    &[("v1", "Node"), ("discovery.k8s.io/v1", "EndpointSlice")];

/// Lists Kubernetes 1.37 marks `atomic` that the table merges by a key, as kmeta has since before
/// it read OpenAPI documents: `(apiVersion, kind, path, why)`. Under the `kmeta.dev/schema-atomic-lists`
/// opt-in the document's `atomic` applies instead.
const ATOMIC_MERGED_BY_TABLE: &[(&str, &str, &str, &str)] = &[(
    "v1",
    "ServiceAccount",
    "imagePullSecrets",
    "released behaviour (merged by `name`, as Metacontroller's convention does): an image pull \
     secret another actor added is kept",
)];

/// The documents: `(apiVersion, document)`.
fn documents() -> anyhow::Result<Vec<(String, Value)>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../apiserver/openapi/v3");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let Some(stem) = name.strip_suffix("_openapi.json") else {
            continue;
        };
        // `api__v1` → `v1`, `apis__apps__v1` → `apps/v1`
        let parts: Vec<&str> = stem.split("__").collect();
        let api_version = match parts.as_slice() {
            ["api", v] => (*v).to_owned(),
            ["apis", g, v] => format!("{g}/{v}"),
            _ => anyhow::bail!("{name}: not a group-version document"),
        };
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        out.push((api_version, doc));
    }
    anyhow::ensure!(
        out.len() >= 10,
        "only {} documents in {}",
        out.len(),
        dir.display()
    );
    Ok(out)
}

/// The kinds of `api_version` the document defines (not their lists).
fn kinds(doc: &Value, api_version: &str) -> Vec<String> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let mut out = Vec::new();
    for schema in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        for gvk in schema["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let kind = gvk["kind"].as_str().unwrap_or_default();
            if gvk["group"] == group && gvk["version"] == version && !kind.ends_with("List") {
                out.push(kind.to_owned());
            }
        }
    }
    out
}

#[test]
fn fallback_table_agrees_with_the_published_documents() -> anyhow::Result<()> {
    let mut disagreements = Vec::new();
    let mut checked = 0;
    for (api_version, doc) in documents()? {
        for kind in kinds(&doc, &api_version) {
            let Some(published) = ListRules::from_openapi_v3(&doc, &api_version, &kind) else {
                anyhow::bail!("{api_version} {kind}: no rules from its own document");
            };
            if LEFT_TO_RUNTIME.contains(&(api_version.as_str(), kind.as_str())) {
                continue;
            }
            let table = ListRules::builtin(&api_version, &kind);
            for (path, rule) in published.entries() {
                if path.split('.').any(|seg| seg == "status") {
                    continue;
                }
                checked += 1;
                let fallback = table.get(&path);
                let agrees = match (&rule, fallback) {
                    (ListRule::Atomic, None | Some(ListRule::Atomic)) => true,
                    (ListRule::Atomic, Some(_)) => ATOMIC_MERGED_BY_TABLE
                        .iter()
                        .any(|(av, k, p, _)| *av == api_version && *k == kind && *p == path),
                    _ => fallback == Some(&rule),
                };
                if !agrees {
                    disagreements.push(format!(
                        "{api_version} {kind} {path}: published {rule:?}, table {fallback:?}"
                    ));
                }
            }
            for (path, rule) in table.entries() {
                // the generated documents mark every list of a built-in kind
                if published.get(&path).is_none() && rule != ListRule::Atomic {
                    disagreements.push(format!(
                        "{api_version} {kind} {path}: published none, table {rule:?}"
                    ));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} list fields checked");
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    Ok(())
}

#[test]
fn left_to_runtime_kinds_exist() -> anyhow::Result<()> {
    let docs = documents()?;
    for (api_version, kind) in LEFT_TO_RUNTIME {
        let found = docs
            .iter()
            .any(|(av, doc)| av == api_version && kinds(doc, av).iter().any(|k| k == kind));
        assert!(found, "{api_version} {kind} is in no document");
    }
    Ok(())
}

#[test]
fn atomic_merged_by_table_lists_are_atomic_in_the_documents() -> anyhow::Result<()> {
    let docs = documents()?;
    for (api_version, kind, path, _) in ATOMIC_MERGED_BY_TABLE {
        let Some((_, doc)) = docs.iter().find(|(av, _)| av == api_version) else {
            anyhow::bail!("no document for {api_version}");
        };
        let published = ListRules::from_openapi_v3(doc, api_version, kind);
        assert_eq!(
            published.as_ref().and_then(|r| r.get(path)),
            Some(&ListRule::Atomic),
            "{api_version} {kind} {path}"
        );
        assert!(matches!(
            ListRules::builtin(api_version, kind).get(path),
            Some(ListRule::Map(_))
        ));
    }
    Ok(())
}
