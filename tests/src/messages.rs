//! The messages kmeta writes for people — Events and the conditions on parents — carry no Rust
//! debug formatting (`Some("x")`, `Ok(..)`, a `Struct { field: .. }` dump, escaped quotes of a
//! nested dump). Every scenario's [`crate::Env::finish`] reads the Events the scenario left on
//! its server and the conditions of the objects it created ([`scan`]) and fails on one.
//!
//! Why the scenarios' output rather than the `Display` of each error enum with made-up values:
//! the scenarios reach the messages through the code paths that compose them (an error's
//! `Display` wrapped in a sync failure, joined with its causes, cut to the event size), so a
//! `{:?}` added anywhere on that path is caught, and no list of variants to keep in step exists.

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::ar;

/// What in `text` is Rust debug formatting, if anything: the first offending fragment.
pub fn debug_formatting(text: &str) -> Option<String> {
    for marker in ["Some(", "Ok(", "Err(", "\\\""] {
        if let Some(i) = text.find(marker) {
            return Some(fragment(text, i));
        }
    }
    // `Name { field: ` (a struct or struct-variant dump)
    let bytes = text.as_bytes();
    for (i, _) in text.match_indices(" { ") {
        let before = &text[..i];
        let word = before
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let after = &text[i + 3..];
        let field = after
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let struct_like = word.starts_with(|c: char| c.is_ascii_uppercase())
            && !field.is_empty()
            && after[field.len()..].starts_with(": ");
        if struct_like && bytes.get(i.saturating_sub(word.len())).is_some() {
            return Some(fragment(text, i - word.len()));
        }
    }
    None
}

/// Up to 60 characters of `text` from byte `i` (on a character boundary).
fn fragment(text: &str, i: usize) -> String {
    text[i..].chars().take(60).collect()
}

/// The custom resources served now (each CRD's first served version): where parents live.
async fn custom_resources(client: &kube::Client) -> anyhow::Result<Vec<kube::core::ApiResource>> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ar(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let mut out = Vec::new();
    for crd in crds.list(&ListParams::default()).await?.items {
        let spec = &crd.data["spec"];
        let group = spec["group"].as_str().unwrap_or("");
        let served = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["served"] == true);
        let (Some(version), Some(kind), Some(plural)) = (
            served.and_then(|v| v["name"].as_str()),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            continue;
        };
        out.push(ar(&format!("{group}/{version}"), kind, plural));
    }
    Ok(out)
}

/// The messages of the Events on the server and of the conditions of every custom resource
/// (parents, decorator targets) that contain debug formatting, each as `where: fragment in
/// message`.
pub async fn scan(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let objects = custom_resources(client).await?;
    let mut found = Vec::new();
    let mut check = |what: String, text: &str| {
        if let Some(f) = debug_formatting(text) {
            found.push(format!("{what}: …{f}… in {text:?}"));
        }
    };
    let lp = ListParams::default();
    for (api_version, kind, plural, field) in [
        ("events.k8s.io/v1", "Event", "events", "note"),
        ("v1", "Event", "events", "message"),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar(api_version, kind, plural));
        for e in api.list(&lp).await?.items {
            let text = e.data.get(field).and_then(Value::as_str).unwrap_or("");
            let reason = e.data.get("reason").and_then(Value::as_str).unwrap_or("");
            check(format!("{kind} {reason}"), text);
        }
    }
    for r in &objects {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), r);
        let Ok(list) = api.list(&lp).await else {
            continue;
        };
        for o in list.items {
            let conditions = o
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array);
            for c in conditions.into_iter().flatten() {
                let text = c.get("message").and_then(Value::as_str).unwrap_or("");
                let t = c.get("type").and_then(Value::as_str).unwrap_or("");
                check(format!("{} condition {t}", r.kind), text);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::debug_formatting;

    #[test]
    fn debug_formatting_is_found_and_prose_is_not() {
        for bad in [
            "type must be Normal or Warning, got Some(\"Sometimes\")",
            "hook failed: Err(Timeout)",
            "cannot decode: Status { code: 500, body: \"x\" }",
            "child {\\\"name\\\": 1}",
        ] {
            assert!(debug_formatting(bad).is_some(), "{bad}");
        }
        for good in [
            "type must be Normal or Warning, got \"Sometimes\"",
            "sync hook http://h/sync: 500 Internal Server Error: {\"error\": \"x\"}",
            "drift policy Report: the child is not updated",
            "ConfigMap default/x: spec { replicas } (no such field)",
            "Some parents are waiting",
        ] {
            assert_eq!(debug_formatting(good), None, "{good}");
        }
    }
}
