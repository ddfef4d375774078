//! The pure part of an apply: which request to send, and what the server dropped from it.

use serde_json::Value;

use crate::params::DynApplyParams;

/// The request one attempt sends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// No live object: POST this (desired with the last-applied annotation).
    Create(Value),
    /// PUT this: live merged with desired, carrying live's `resourceVersion`.
    Update(Value),
    /// Live already is what an update would write: send nothing.
    Unchanged,
}

/// dynapply's options for `desired`: the built-in list rules of its kind (patch-merge keys of
/// the Kubernetes types; `ObjectMeta` rules for every kind), then the caller's rules on top.
pub(crate) fn options(desired: &Value, params: &DynApplyParams) -> dynapply::Options {
    let text = |k: &str| desired.get(k).and_then(Value::as_str).unwrap_or_default();
    let builtin = if params.builtin_rules {
        dynapply::ListRules::builtin(text("apiVersion"), text("kind"))
    } else {
        dynapply::ListRules::new()
    };
    dynapply::Options {
        annotation: params.annotation.clone(),
        rules: builtin.merge(params.rules.clone()),
        ordering: params.ordering,
        record: true,
        fields: Vec::new(),
    }
}

/// The step for one attempt: create when there is no live object, else the three-way merge of
/// live, its last-applied annotation and desired.
pub(crate) fn plan(
    live: Option<&Value>,
    desired: &Value,
    opts: &dynapply::Options,
) -> Result<Step, dynapply::Error> {
    match live {
        None => Ok(Step::Create(dynapply::prepare_create(desired, opts)?)),
        Some(live) => Ok(match dynapply::apply_update(live, desired, opts)? {
            dynapply::Outcome::Unchanged => Step::Unchanged,
            dynapply::Outcome::Changed(merged) => Step::Update(merged),
        }),
    }
}

/// The fields of `desired` that the object the server stored does not have as desired: dropped
/// (an undeclared field pruned by a CRD's schema) or overridden (reset by an admission hook).
/// Paths are dotted, list items named by their `name` when they have one
/// (`spec.template.spec.containers[name=app].resources`), else by index; outermost paths only.
/// `apiVersion`, `kind`, `status` and the last-applied `annotation` are not compared; `null`, an
/// empty object or an empty list in desired is satisfied by an absent field. Extra fields in `stored` (defaults,
/// other writers' fields) are never reported.
///
/// ```
/// use serde_json::json;
///
/// let desired = json!({"spec": {"replicas": 2, "color": "blue"}});
/// let stored = json!({"spec": {"replicas": 2, "paused": false}});
/// let dropped = kmeta_apply::dropped_fields(&desired, &stored, "last-applied");
/// assert_eq!(dropped, vec!["spec.color".to_owned()]);
/// ```
pub fn dropped_fields(desired: &Value, stored: &Value, annotation: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(fields) = desired.as_object() else {
        return out;
    };
    for (k, v) in fields {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                let mut v = v.clone();
                if let Some(a) = v.get_mut("annotations").and_then(Value::as_object_mut) {
                    a.shift_remove(annotation);
                }
                compare(&v, stored.get(k), k, &mut out);
            }
            _ => compare(v, stored.get(k), k, &mut out),
        }
    }
    out
}

fn compare(desired: &Value, stored: Option<&Value>, path: &str, out: &mut Vec<String>) {
    match (desired, stored) {
        (Value::Null, None | Some(Value::Null)) => {}
        (d, None) if is_empty(d) => {}
        (Value::Object(d), Some(Value::Object(s))) => {
            for (k, v) in d {
                compare(v, s.get(k), &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(d), Some(Value::Array(s))) => {
            for (i, item) in d.iter().enumerate() {
                if !s.iter().any(|have| covers(item, have)) {
                    out.push(format!("{path}[{}]", item_name(item, i)));
                }
            }
        }
        (d, Some(s)) if covers(d, s) => {}
        _ => out.push(path.to_owned()),
    }
}

/// An empty object or list, which a server may store as absent.
fn is_empty(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
}

fn item_name(item: &Value, index: usize) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) => format!("name={name}"),
        None => index.to_string(),
    }
}

/// `desired` is contained in `stored`: same scalars (numbers by value), every desired field
/// present (or null and absent), every desired list item covered by some stored item.
fn covers(desired: &Value, stored: &Value) -> bool {
    match (desired, stored) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::Object(d), Value::Object(s)) => d.iter().all(|(k, v)| match s.get(k) {
            Some(have) => covers(v, have),
            None => v.is_null() || is_empty(v),
        }),
        (Value::Array(d), Value::Array(s)) => {
            d.iter().all(|item| s.iter().any(|have| covers(item, have)))
        }
        (d, s) => d == s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
        })
    }

    fn params() -> DynApplyParams {
        DynApplyParams::default()
    }

    #[test]
    fn no_live_object_is_a_create_carrying_the_annotation() -> Result<(), dynapply::Error> {
        let desired = deployment("app:1");
        let opts = options(&desired, &params());
        let Step::Create(body) = plan(None, &desired, &opts)? else {
            panic!("expected a create");
        };
        let recorded = &body["metadata"]["annotations"][dynapply::LAST_APPLIED_ANNOTATION];
        assert!(recorded.as_str().is_some_and(|a| a.contains("app:1")));
        Ok(())
    }

    #[test]
    fn an_injected_sidecar_survives_and_a_repeat_is_unchanged() -> Result<(), dynapply::Error> {
        let desired = deployment("app:1");
        let opts = options(&desired, &params());
        let Step::Create(mut live) = plan(None, &desired, &opts)? else {
            panic!("expected a create");
        };
        live["metadata"]["resourceVersion"] = json!("7");
        if let Some(c) = live["spec"]["template"]["spec"]["containers"].as_array_mut() {
            c.push(json!({"name": "proxy", "image": "envoy"}));
        }
        assert_eq!(plan(Some(&live), &desired, &opts)?, Step::Unchanged);

        let newer = deployment("app:2");
        let Step::Update(sent) = plan(Some(&live), &newer, &options(&newer, &params()))? else {
            panic!("expected an update");
        };
        assert_eq!(
            sent["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "app:2"}, {"name": "proxy", "image": "envoy"}])
        );
        assert_eq!(sent["metadata"]["resourceVersion"], "7");
        Ok(())
    }

    #[test]
    fn builtin_rules_follow_the_kind_and_can_be_turned_off() {
        let desired = deployment("app:1");
        let on = options(&desired, &params());
        assert!(on.rules.get("spec.template.spec.containers").is_some());
        let off = options(&desired, &params().builtin_rules(false));
        assert!(off.rules.get("spec.template.spec.containers").is_none());
    }

    #[test]
    fn caller_rules_win_over_builtin_ones() {
        let mut rules = dynapply::ListRules::new();
        rules.set("spec.template.spec.containers", dynapply::ListRule::Atomic);
        let desired = deployment("app:1");
        let opts = options(&desired, &params().rules(rules));
        assert_eq!(
            opts.rules.get("spec.template.spec.containers"),
            Some(&dynapply::ListRule::Atomic)
        );
    }

    #[test]
    fn dropped_fields_names_pruned_and_overridden_fields_only() {
        let desired = json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {"name": "a", "labels": {"team": "x"}, "annotations": {"la": "{}"}},
            "spec": {"n": 1, "gone": {"deep": true}, "unset": null,
                     "items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}], "tags": ["t"]},
            "status": {"ignored": true}
        });
        let stored = json!({
            "metadata": {"name": "a", "labels": {"team": "y"}, "uid": "u"},
            "spec": {"n": 1.0, "extra": 3,
                     "items": [{"name": "a", "v": 1, "d": 0}, {"name": "b", "v": 3}], "tags": ["t", "u"]}
        });
        assert_eq!(
            dropped_fields(&desired, &stored, "la"),
            vec!["metadata.labels.team", "spec.gone", "spec.items[name=b]"]
        );
        assert!(dropped_fields(&desired, &desired, "la").is_empty());
    }
}
