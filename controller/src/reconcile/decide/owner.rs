//! The controllerRef a parent puts on its children, added and removed.

use serde_json::{Value, json};

use crate::object::meta_str;

/// The controllerRef a parent puts on its children.
pub fn owner_reference(parent: &Value) -> Value {
    json!({
        "apiVersion": parent.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": parent.get("kind").cloned().unwrap_or(Value::Null),
        "name": meta_str(parent, "name"),
        "uid": meta_str(parent, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// `child` with the parent's controllerRef appended (unless a ref with that UID exists).
pub fn with_owner(child: &Value, parent: &Value) -> Value {
    add_owner(child.clone(), parent)
}

/// [`with_owner`] of a child the caller owns (no copy).
pub fn add_owner(mut out: Value, parent: &Value) -> Value {
    let uid = meta_str(parent, "uid").to_owned();
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        let refs = m
            .entry("ownerReferences")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !refs.is_array() {
            *refs = Value::Array(Vec::new());
        }
        if let Some(a) = refs.as_array_mut()
            && !a
                .iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(&uid))
        {
            a.push(owner_reference(parent));
        }
    }
    out
}

/// `child` without owner references to `parent_uid`.
pub fn without_owner(child: &Value, parent_uid: &str) -> Value {
    let mut out = child.clone();
    if let Some(a) = out
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        a.retain(|r| r.get("uid").and_then(Value::as_str) != Some(parent_uid));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::object::controller_ref;
    use crate::reconcile::decide::fixtures::{child, parent};
    use serde_json::json;

    #[test]
    fn owner_refs_added_once_and_removed() {
        let p = parent();
        let c = with_owner(&child("a", json!({}), None), &p);
        let c2 = with_owner(&c, &p);
        assert_eq!(
            c2["metadata"]["ownerReferences"].as_array().unwrap().len(),
            1
        );
        assert_eq!(
            c2["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            json!(true)
        );
        assert_eq!(controller_ref(&c2).unwrap()["uid"], "u1");
        let r = without_owner(&c2, "u1");
        assert!(controller_ref(&r).is_none());
    }
}
