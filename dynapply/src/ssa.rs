//! The hybrid of server-side apply and dynamic apply: under server-side apply, the API server
//! treats every list inside an `x-kubernetes-preserve-unknown-fields` subtree as atomic, so an
//! apply of the desired list replaces it whole and drops the items other writers added (an
//! injected sidecar container). Those subtrees are therefore computed here, with the three-way
//! merge against the live object and its last-applied record, and sent in the apply body; the
//! rest of the body is the desired object, left to the server's merge.

use serde_json::Value;

use crate::{Error, Options, Outcome, apply_update, prepare_create};

/// Schema nesting deeper than this is not searched (as in [`crate::ListRules`]).
const MAX_DEPTH: usize = 64;

/// The field paths (from the object root; the empty path is the whole object) of the subtrees an
/// `openAPIV3Schema` marks `x-kubernetes-preserve-unknown-fields: true`. Walks `properties`
/// only; a marked node's own properties are inside its subtree.
pub fn preserve_unknown_subtrees(schema: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if path.len() > MAX_DEPTH {
        return;
    }
    let Some(obj) = schema.as_object() else {
        return;
    };
    if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        out.push(path.clone());
        return;
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            path.push(name.clone());
            walk(sub, path, out);
            path.pop();
        }
    }
}

/// The body of a server-side apply of `desired` onto `live`: `desired` as [`prepare_create`]
/// writes it (with its last-applied annotation), except that each subtree at `subtrees` that
/// `desired` sets is taken from the three-way merge of `live`, its last-applied record and
/// `desired` (so what others added there survives). The root subtree (an empty path) covers
/// every top-level field but `apiVersion`, `kind`, `metadata` and `status`. The fields
/// [`Options::fields`] leaves to others once they exist in `live` are left out of the body
/// (outside those subtrees).
pub fn server_side_apply_body(
    live: &Value,
    desired: &Value,
    opts: &Options,
    subtrees: &[Vec<String>],
) -> Result<Value, Error> {
    let mut body = prepare_create(desired, opts)?;
    // fields left to others ([`Options::fields`]) are not applied, so kmeta's manager lets go of
    // them; inside a preserve-unknown subtree (replaced below) the server treats lists as
    // atomic, so there the merged subtree carries the owner's live value instead
    for rule in crate::fields::withheld(&opts.fields, live) {
        rule.path.remove_from(&mut body);
    }
    if subtrees.is_empty() {
        return Ok(body);
    }
    let merged = match apply_update(live, desired, opts)? {
        Outcome::Unchanged => live.clone(),
        Outcome::Changed(m) => m,
    };
    for path in subtrees {
        if path.is_empty() {
            let Some(root) = body.as_object_mut() else {
                continue;
            };
            let keys: Vec<String> = root
                .keys()
                .filter(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
                .cloned()
                .collect();
            for k in keys {
                if let Some(v) = merged.get(&k) {
                    root.insert(k, v.clone());
                }
            }
            continue;
        }
        if let (Some(slot), Some(v)) = (get_mut(&mut body, path), get(&merged, path)) {
            *slot = v.clone();
        }
    }
    Ok(body)
}

fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.as_object()?.get(k))
}

fn get_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(v, |cur, k| cur.as_object_mut()?.get_mut(k))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subtrees_of_a_schema() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"metadata": {"type": "object"}}}
            }},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }});
        assert_eq!(
            preserve_unknown_subtrees(&schema),
            vec![
                vec!["spec".to_owned(), "template".to_owned()],
                vec!["status".to_owned()]
            ]
        );
        let schemaless = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        assert_eq!(
            preserve_unknown_subtrees(&schemaless),
            vec![Vec::<String>::new()]
        );
    }

    #[test]
    fn an_injected_container_survives_in_the_body() {
        let opts = Options::default();
        let desired = |image: &str| {
            json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
                "spec": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "app", "image": image}]}}}})
        };
        let mut live = prepare_create(&desired("web:1"), &opts).unwrap();
        live["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "proxy", "image": "envoy"}));
        live["spec"]["replicas"] = json!(3);
        let template = vec!["spec".to_owned(), "template".to_owned()];
        let body = server_side_apply_body(&live, &desired("web:2"), &opts, &[template]).unwrap();
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "web:2"}, {"name": "proxy", "image": "envoy"}])
        );
        // outside the subtree the body is the desired object: the server merges it
        assert_eq!(body["spec"]["replicas"], 1);
        let plain = server_side_apply_body(&live, &desired("web:2"), &opts, &[]).unwrap();
        assert_eq!(plain, prepare_create(&desired("web:2"), &opts).unwrap());
    }
}
