//! Field rules: single fields of an object handed off to another writer, addressed by merge key
//! (`spec.template.spec.containers[name=app].resources`), and how they shape the three-way merge
//! (see "Field rules" in the crate docs).

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::Error;

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldSeg {
    /// An object field or map key (`spec`, `[kubectl.kubernetes.io/restartedAt]`).
    Field(String),
    /// The list items whose key fields have these values (`[name=app]`,
    /// `[containerPort=80,protocol=TCP]`).
    Select(Vec<(String, String)>),
}

/// A field path addressed by merge key, e.g. `spec.replicas`,
/// `spec.template.spec.containers[name=app].resources` or
/// `spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]`. Positions
/// (`containers[0]`) and JSON pointers are refused: they name whatever an admission webhook put
/// at that index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    segs: Vec<FieldSeg>,
}

/// What kmeta does with a field a [`FieldRule`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldMode {
    /// Set when the object, or the list item holding the field, is created; never changed or
    /// removed afterwards (another writer owns it).
    HandOff,
    /// Never sent, not even on create.
    Ignore,
}

/// A field left to another writer: its name (for reports), path and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRule {
    /// The rule's name as reports show it (the path when the user gave none).
    pub name: String,
    /// The field.
    pub path: FieldPath,
    /// Hand-off or ignore.
    pub mode: FieldMode,
}

fn path_error(path: &str, message: impl Into<String>) -> Error {
    Error::InvalidFieldPath {
        path: path.to_owned(),
        message: message.into(),
    }
}

impl FieldPath {
    /// Parses a path (see [`FieldPath`]); the error names the path and what is wrong.
    pub fn parse(text: &str) -> Result<FieldPath, Error> {
        if text.starts_with('/') {
            return Err(path_error(
                text,
                "a JSON pointer addresses list items by position; write field names separated by `.` and select list items by key, e.g. `containers[name=app]`",
            ));
        }
        let mut segs = Vec::new();
        let mut rest = text;
        let mut after_dot = true;
        while !rest.is_empty() {
            if let Some(inner) = rest.strip_prefix('[') {
                let Some(end) = inner.find(']') else {
                    return Err(path_error(text, "`[` without its `]`"));
                };
                segs.push(bracket(text, &inner[..end], segs.is_empty())?);
                rest = &inner[end + 1..];
                after_dot = false;
            } else if let Some(r) = rest.strip_prefix('.') {
                if after_dot {
                    return Err(path_error(text, "an empty field name"));
                }
                rest = r;
                after_dot = true;
            } else {
                if !after_dot {
                    return Err(path_error(text, "a field name must follow a `.`"));
                }
                let end = rest.find(['.', '[', ']']).unwrap_or(rest.len());
                if rest[end..].starts_with(']') {
                    return Err(path_error(text, "`]` without its `[`"));
                }
                segs.push(FieldSeg::Field(rest[..end].to_owned()));
                rest = &rest[end..];
                after_dot = false;
            }
        }
        if segs.is_empty() || after_dot {
            return Err(path_error(text, "an empty field name"));
        }
        Ok(FieldPath { segs })
    }

    /// The path made of `segs` (unchecked: for messages naming a path's prefix).
    pub(crate) fn from_segments(segs: Vec<FieldSeg>) -> FieldPath {
        FieldPath { segs }
    }

    /// The steps of the path.
    pub fn segments(&self) -> &[FieldSeg] {
        &self.segs
    }

    /// The values the path names in `v`: none when a field on the way is missing or no list
    /// item has the key; several when a selector matches several items (a list that is not a
    /// map there).
    pub fn resolve<'v>(&self, v: &'v Value) -> Vec<&'v Value> {
        let mut out = Vec::new();
        resolve_into(v, &self.segs, &mut out);
        out
    }

    /// The steps up to and including the last list-item selector: the object or list item
    /// that holds the field (empty: the object itself).
    fn anchor(&self) -> &[FieldSeg] {
        let last_select = self
            .segs
            .iter()
            .rposition(|s| matches!(s, FieldSeg::Select(_)));
        &self.segs[..last_select.map_or(0, |i| i + 1)]
    }

    /// Removes every value the path names from `v`; true when something was removed.
    pub fn remove_from(&self, v: &mut Value) -> bool {
        remove(v, &self.segs)
    }
}

/// Parses the inside of `[...]`: a selector (`k=v[,k=v]`) or a map key.
fn bracket(text: &str, inner: &str, first: bool) -> Result<FieldSeg, Error> {
    if inner.is_empty() || inner == "*" {
        return Err(path_error(
            text,
            "`[]` and `[*]` select every item; select one by its key, e.g. `[name=app]`",
        ));
    }
    if !inner.contains('=') {
        if inner.bytes().all(|b| b.is_ascii_digit()) {
            return Err(path_error(
                text,
                format!(
                    "`[{inner}]` is a position, which names whatever an admission webhook put there; select the item by its key, e.g. `[name=app]`"
                ),
            ));
        }
        return Ok(FieldSeg::Field(inner.to_owned()));
    }
    if first {
        return Err(path_error(text, "a list selector must follow a field name"));
    }
    let mut keys = Vec::new();
    for pair in inner.split(',') {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                keys.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            _ => {
                return Err(path_error(text, format!("`{pair}` is not `key=value`")));
            }
        }
    }
    Ok(FieldSeg::Select(keys))
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.segs.iter().enumerate() {
            match seg {
                FieldSeg::Field(name) if name.contains(['.', '/', '[', ']']) || name.is_empty() => {
                    write!(f, "[{name}]")?;
                }
                FieldSeg::Field(name) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(name)?;
                }
                FieldSeg::Select(keys) => {
                    let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "[{}]", pairs.join(","))?;
                }
            }
        }
        Ok(())
    }
}

/// Whether list item `item` has the selector's key values (strings as they are, numbers and
/// booleans by their JSON text).
fn selected(item: &Value, keys: &[(String, String)]) -> bool {
    keys.iter().all(|(k, want)| match item.get(k) {
        Some(Value::String(s)) => s == want,
        Some(Value::Number(n)) => want.parse::<serde_json::Number>().is_ok_and(|w| w == *n),
        Some(Value::Bool(b)) => want.parse::<bool>().is_ok_and(|w| w == *b),
        _ => false,
    })
}

fn resolve_into<'v>(v: &'v Value, segs: &[FieldSeg], out: &mut Vec<&'v Value>) {
    let Some((first, rest)) = segs.split_first() else {
        out.push(v);
        return;
    };
    match first {
        FieldSeg::Field(name) => {
            if let Some(sub) = v.as_object().and_then(|m| m.get(name)) {
                resolve_into(sub, rest, out);
            }
        }
        FieldSeg::Select(keys) => {
            for item in v.as_array().into_iter().flatten() {
                if selected(item, keys) {
                    resolve_into(item, rest, out);
                }
            }
        }
    }
}

fn remove(v: &mut Value, segs: &[FieldSeg]) -> bool {
    match segs {
        [] => false,
        [FieldSeg::Field(name)] => v
            .as_object_mut()
            .is_some_and(|m| m.shift_remove(name).is_some()),
        [FieldSeg::Select(keys)] => v.as_array_mut().is_some_and(|items| {
            let before = items.len();
            items.retain(|item| !selected(item, keys));
            items.len() != before
        }),
        [FieldSeg::Field(name), rest @ ..] => v
            .as_object_mut()
            .and_then(|m| m.get_mut(name))
            .is_some_and(|sub| remove(sub, rest)),
        [FieldSeg::Select(keys), rest @ ..] => {
            let mut any = false;
            for item in v.as_array_mut().into_iter().flatten() {
                if selected(item, keys) {
                    any |= remove(item, rest);
                }
            }
            any
        }
    }
}

/// Whether any rule names a value in `v` (to copy it only then).
fn names_any(rules: &[&FieldRule], v: &Value) -> bool {
    rules.iter().any(|r| !r.path.resolve(v).is_empty())
}

/// `v` without the values `rules` name (borrowed when there are none).
fn without<'a>(v: &'a Value, rules: &[&FieldRule]) -> Cow<'a, Value> {
    if !names_any(rules, v) {
        return Cow::Borrowed(v);
    }
    let mut copy = v.clone();
    for rule in rules {
        rule.path.remove_from(&mut copy);
    }
    Cow::Owned(copy)
}

/// The rules that take their field out of desired before a merge onto `observed`: every
/// `Ignore` rule, and each `HandOff` rule whose object or list item already exists in
/// `observed` (else kmeta creates it with the field).
pub(crate) fn withheld<'r>(rules: &'r [FieldRule], observed: &Value) -> Vec<&'r FieldRule> {
    rules
        .iter()
        .filter(|r| match r.mode {
            FieldMode::Ignore => true,
            FieldMode::HandOff => {
                let anchor = r.path.anchor();
                anchor.is_empty() || {
                    let mut found = Vec::new();
                    resolve_into(observed, anchor, &mut found);
                    !found.is_empty()
                }
            }
        })
        .collect()
}

/// The last-applied configuration and desired object a merge onto `observed` uses under
/// `rules`: last-applied without any ruled field (so the merge never removes or resets one as
/// "applied before, no longer wanted"), desired without the [`withheld`] ones.
pub(crate) fn shaped<'a>(
    rules: &[FieldRule],
    observed: &Value,
    last: Option<&'a Value>,
    desired: &'a Value,
) -> (Option<Cow<'a, Value>>, Cow<'a, Value>) {
    if rules.is_empty() {
        return (last.map(Cow::Borrowed), Cow::Borrowed(desired));
    }
    let all: Vec<&FieldRule> = rules.iter().collect();
    let last = last.map(|l| without(l, &all));
    let mut desired = without(desired, &withheld(rules, observed));
    // a map on the way to a ruled field that live has but desired no longer sets would be removed
    // whole (rule 1, or rule 2 for a null) with the field: desired keeps it, empty
    for rule in rules {
        let parents = &rule.path.segs[..rule.path.segs.len() - 1];
        if missing_parents(&desired, parents) && !rule.path.resolve(observed).is_empty() {
            fill_parents(desired.to_mut(), parents);
        }
    }
    (last, desired)
}

/// Whether a map on the way `segs` names is missing (or null) in `v`, below an object or a
/// selected item that `v` has.
fn missing_parents(v: &Value, segs: &[FieldSeg]) -> bool {
    match segs.split_first() {
        None => false,
        Some((FieldSeg::Field(name), rest)) => match v.as_object().map(|m| m.get(name)) {
            Some(None | Some(Value::Null)) => true,
            Some(Some(sub)) => missing_parents(sub, rest),
            None => false,
        },
        Some((FieldSeg::Select(keys), rest)) => v
            .as_array()
            .into_iter()
            .flatten()
            .any(|item| selected(item, keys) && missing_parents(item, rest)),
    }
}

/// Adds the empty maps [`missing_parents`] finds missing.
fn fill_parents(v: &mut Value, segs: &[FieldSeg]) {
    match segs.split_first() {
        None => {}
        Some((FieldSeg::Field(name), rest)) => {
            if let Some(m) = v.as_object_mut() {
                let sub = m
                    .entry(name.clone())
                    .or_insert_with(|| Value::Object(Default::default()));
                if sub.is_null() {
                    *sub = Value::Object(Default::default());
                }
                fill_parents(sub, rest);
            }
        }
        Some((FieldSeg::Select(keys), rest)) => {
            for item in v.as_array_mut().into_iter().flatten() {
                if selected(item, keys) {
                    fill_parents(item, rest);
                }
            }
        }
    }
}

/// `desired` without the fields `rules` take out of it before a merge onto `observed` (every
/// `Ignore` field, and each `HandOff` field whose object or list item exists in `observed`):
/// what kmeta still means to set. For reports that compare desired with live (drift).
pub fn without_withheld(rules: &[FieldRule], observed: &Value, desired: &Value) -> Value {
    without(desired, &withheld(rules, observed)).into_owned()
}

/// `desired` as a create sends it under `rules`: without the `Ignore` fields.
pub(crate) fn for_create<'a>(rules: &[FieldRule], desired: &'a Value) -> Cow<'a, Value> {
    let ignored: Vec<&FieldRule> = rules
        .iter()
        .filter(|r| r.mode == FieldMode::Ignore)
        .collect();
    without(desired, &ignored)
}

/// The rules under which `observed` is left differing from `desired`: those whose field a merge
/// takes out of desired (see [`without_withheld`]) while desired's value differs from live's
/// there. For
/// reports ("left alone: hpa, vpa"); the names in rule order.
pub fn left_alone<'r>(rules: &'r [FieldRule], observed: &Value, desired: &Value) -> Vec<&'r str> {
    withheld(rules, observed)
        .into_iter()
        .filter(|r| {
            let want = r.path.resolve(desired);
            !want.is_empty() && {
                let have = r.path.resolve(observed);
                want.len() != have.len()
                    || want.iter().zip(&have).any(|(w, h)| !crate::json_eq(w, h))
            }
        })
        .map(|r| r.name.as_str())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(s: &str) -> FieldSeg {
        FieldSeg::Field(s.to_owned())
    }

    #[test]
    fn parses_fields_selectors_and_bracketed_map_keys() {
        let p = FieldPath::parse("spec.template.spec.containers[name=app].resources").unwrap();
        assert_eq!(
            p.segments(),
            [
                field("spec"),
                field("template"),
                field("spec"),
                field("containers"),
                FieldSeg::Select(vec![("name".into(), "app".into())]),
                field("resources"),
            ]
        );
        let a = "spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]";
        let p = FieldPath::parse(a).unwrap();
        assert_eq!(
            p.segments().last(),
            Some(&field("kubectl.kubernetes.io/restartedAt"))
        );
        let ports = "spec.ports[port=80,protocol=TCP].targetPort";
        for text in ["spec.replicas", a, ports, "spec.containers[name=app]"] {
            assert_eq!(FieldPath::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn refuses_positions_pointers_and_malformed_paths() {
        for (text, says) in [
            ("/spec/template/spec/containers/0/resources", "JSON pointer"),
            ("spec.containers[0].resources", "is a position"),
            ("spec.containers[].resources", "select every item"),
            ("spec.containers[*]", "select every item"),
            ("spec..replicas", "empty field name"),
            ("spec.replicas.", "empty field name"),
            ("", "empty field name"),
            ("spec.containers[name=app", "without its `]`"),
            ("spec]", "without its `[`"),
            ("spec.containers[name=]", "not `key=value`"),
            ("[name=app]", "must follow a field name"),
            ("spec.containers[name=app]resources", "must follow a `.`"),
        ] {
            let err = FieldPath::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(err.contains(&format!("`{text}`")), "names the path: {err}");
        }
    }

    fn deployment() -> Value {
        json!({"spec": {"replicas": 7, "template": {"spec": {"containers": [
            {"name": "istio-proxy", "image": "proxy", "resources": {"limits": {"cpu": "2"}}},
            {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "250m"}}},
        ]}}}})
    }

    #[test]
    fn resolves_by_key_wherever_the_item_is() {
        let d = deployment();
        let p = FieldPath::parse("spec.template.spec.containers[name=app].resources").unwrap();
        assert_eq!(p.resolve(&d), [&json!({"requests": {"cpu": "250m"}})]);
        // missing: no such item, or a field on the way absent
        let none = FieldPath::parse("spec.template.spec.containers[name=db].resources").unwrap();
        assert!(none.resolve(&d).is_empty());
        assert!(
            FieldPath::parse("spec.paused")
                .unwrap()
                .resolve(&d)
                .is_empty()
        );
        // not unique: every matching item
        let dup = json!({"items": [{"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 2, "v": "c"}]});
        let p = FieldPath::parse("items[k=1].v").unwrap();
        assert_eq!(p.resolve(&dup), [&json!("a"), &json!("b")]);
    }

    fn rule(path: &str, mode: FieldMode) -> FieldRule {
        FieldRule {
            name: path.to_owned(),
            path: FieldPath::parse(path).unwrap(),
            mode,
        }
    }

    #[test]
    fn hand_off_withholds_once_the_holder_exists_ignore_always() {
        let rules = [
            rule("spec.replicas", FieldMode::HandOff),
            rule(
                "spec.template.spec.containers[name=app].resources",
                FieldMode::HandOff,
            ),
            rule(
                "spec.template.spec.containers[name=db].resources",
                FieldMode::HandOff,
            ),
            rule("spec.paused", FieldMode::Ignore),
        ];
        let names: Vec<&str> = withheld(&rules, &deployment())
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        // `db` does not exist yet: kmeta creates it with its resources
        assert_eq!(
            names,
            [
                "spec.replicas",
                "spec.template.spec.containers[name=app].resources",
                "spec.paused"
            ]
        );
        let desired = json!({"spec": {"replicas": 3, "paused": true}});
        let created = for_create(&rules, &desired);
        assert_eq!(*created, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn left_alone_names_the_rules_whose_field_differs() {
        let rules = [
            rule("spec.replicas", FieldMode::HandOff),
            rule(
                "spec.template.spec.containers[name=app].resources",
                FieldMode::HandOff,
            ),
        ];
        let mut desired = deployment();
        desired["spec"]["replicas"] = json!(3);
        assert_eq!(
            left_alone(&rules, &deployment(), &desired),
            ["spec.replicas"]
        );
        assert!(left_alone(&rules, &deployment(), &deployment()).is_empty());
    }

    /// The proof at the merge's level: an HPA owns `replicas`, a VPA `app`'s `resources`, an
    /// injector put a sidecar at index 0.
    mod handed_off {
        use super::*;
        use crate::{Options, Outcome, apply_update, prepare_create, server_side_apply_body};

        fn opts(on: bool) -> Options {
            let fields = match on {
                true => vec![
                    rule("spec.replicas", FieldMode::HandOff),
                    rule(
                        "spec.template.spec.containers[name=app].resources",
                        FieldMode::HandOff,
                    ),
                ],
                false => Vec::new(),
            };
            Options {
                rules: crate::ListRules::builtin("apps/v1", "Deployment"),
                fields,
                ..Options::default()
            }
        }

        fn desired(image: &str) -> Value {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ns"},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [
                    {"name": "app", "image": image,
                     "resources": {"requests": {"cpu": "100m"}}}]}}}})
        }

        /// What the cluster made of the child kmeta created with `opts`.
        fn live(opts: &Options) -> Value {
            let mut live = prepare_create(&desired("app:1"), opts).unwrap();
            live["metadata"]["resourceVersion"] = json!("5");
            live["spec"]["replicas"] = json!(7);
            let cs = live["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap();
            cs[0]["resources"] = json!({"requests": {"cpu": "750m"}});
            cs.insert(0, json!({"name": "istio-proxy", "image": "proxy:1"}));
            live
        }

        fn containers(v: &Value) -> &Value {
            &v["spec"]["template"]["spec"]["containers"]
        }

        #[test]
        fn resync_writes_nothing_and_an_image_change_keeps_the_owners_values() {
            let opts = opts(true);
            let live = live(&opts);
            assert_eq!(
                apply_update(&live, &desired("app:1"), &opts).unwrap(),
                Outcome::Unchanged
            );
            let Outcome::Changed(written) = apply_update(&live, &desired("app:2"), &opts).unwrap()
            else {
                panic!("the image changed")
            };
            assert_eq!(written["spec"]["replicas"], 7);
            assert_eq!(
                *containers(&written),
                json!([{"name": "istio-proxy", "image": "proxy:1"},
                    {"name": "app", "image": "app:2", "resources": {"requests": {"cpu": "750m"}}}])
            );
            // and the write is a fixed point
            assert_eq!(
                apply_update(&written, &desired("app:2"), &opts).unwrap(),
                Outcome::Unchanged
            );
            // the hook stops setting replicas: last-applied does not make kmeta remove it
            let mut dropped = desired("app:1");
            dropped["spec"].as_object_mut().unwrap().remove("replicas");
            let Outcome::Changed(w) = apply_update(&live, &dropped, &opts).unwrap() else {
                panic!("the record changed")
            };
            assert_eq!(w["spec"]["replicas"], 7);
        }

        #[test]
        fn switching_on_writes_nothing_switching_off_takes_the_fields_back() {
            // created before the rules existed, then changed by the HPA and the VPA
            let before = live(&opts(false));
            assert_eq!(
                apply_update(&before, &desired("app:1"), &opts(true)).unwrap(),
                Outcome::Unchanged
            );
            let Outcome::Changed(back) =
                apply_update(&before, &desired("app:1"), &opts(false)).unwrap()
            else {
                panic!("without the rules kmeta enforces its answer")
            };
            assert_eq!(back["spec"]["replicas"], 3);
            assert_eq!(
                containers(&back)[1]["resources"],
                json!({"requests": {"cpu": "100m"}})
            );
        }

        #[test]
        fn ignore_never_sends_the_field() {
            let mut opts = opts(false);
            opts.fields = vec![rule("spec.replicas", FieldMode::Ignore)];
            let created = prepare_create(&desired("app:1"), &opts).unwrap();
            assert!(created["spec"].get("replicas").is_none());
            let mut live = created.clone();
            live["spec"]["replicas"] = json!(2);
            assert_eq!(
                apply_update(&live, &desired("app:1"), &opts).unwrap(),
                Outcome::Unchanged
            );
        }

        #[test]
        fn a_server_side_apply_body_leaves_the_fields_out() {
            let opts = Options {
                record: false,
                ..opts(true)
            };
            let body = server_side_apply_body(&live(&opts), &desired("app:2"), &opts, &[]).unwrap();
            assert!(body["spec"].get("replicas").is_none(), "{body}");
            assert_eq!(
                *containers(&body),
                json!([{"name": "app", "image": "app:2"}])
            );
        }

        /// The hook stops setting the map that holds a handed-off field (all its annotations):
        /// the map stays, with the field; kmeta's own keys in it go.
        #[test]
        fn a_map_holding_a_ruled_field_is_not_removed_whole() {
            let restarted = "spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]";
            let opts = Options {
                fields: vec![rule(restarted, FieldMode::HandOff)],
                ..Options::default()
            };
            let first = json!({"metadata": {"name": "d"}, "spec": {"template": {"metadata": {
                "annotations": {"ours": "1"}}}}});
            let mut live = prepare_create(&first, &opts).unwrap();
            live["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] =
                json!("t9");
            for dropped in [
                json!({"metadata": {"name": "d"}, "spec": {"template": {}}}),
                json!({"metadata": {"name": "d"}, "spec": {"template": {"metadata": null}}}),
            ] {
                let Outcome::Changed(w) = apply_update(&live, &dropped, &opts).unwrap() else {
                    panic!("`ours` goes")
                };
                assert_eq!(
                    w["spec"]["template"]["metadata"]["annotations"],
                    json!({"kubectl.kubernetes.io/restartedAt": "t9"}),
                    "{dropped}"
                );
            }
        }

        /// A schemaless custom resource: no list rules, the containers keyed by the convention
        /// (`name`); an annotation by its bracketed key; a whole list item handed off.
        #[test]
        fn schemaless_lists_map_keys_and_whole_items() {
            let opts = Options {
                fields: vec![
                    rule(
                        "spec.template.spec.containers[name=app].resources",
                        FieldMode::HandOff,
                    ),
                    rule(
                        "spec.template.metadata.annotations[kubectl.kubernetes.io/restartedAt]",
                        FieldMode::Ignore,
                    ),
                    rule(
                        "spec.template.spec.containers[name=debug]",
                        FieldMode::HandOff,
                    ),
                ],
                ..Options::default()
            };
            let want = |image: &str| {
                json!({"apiVersion": "x.io/v1", "kind": "Workload", "metadata": {"name": "w"},
                    "spec": {"template": {
                        "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t0"}},
                        "spec": {"containers": [
                            {"name": "app", "image": image, "resources": {"cpu": "1"}},
                            {"name": "debug", "image": "busybox"}]}}}})
            };
            let created = prepare_create(&want("app:1"), &opts).unwrap();
            assert!(
                created["spec"]["template"]["metadata"]["annotations"]
                    .get("kubectl.kubernetes.io/restartedAt")
                    .is_none()
            );
            let mut live = created.clone();
            let t = &mut live["spec"]["template"];
            t["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = json!("t9");
            t["spec"]["containers"][0]["resources"] = json!({"cpu": "3"});
            t["spec"]["containers"][1]["image"] = json!("busybox:debug");
            t["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .insert(0, json!({"name": "proxy"}));
            assert_eq!(
                apply_update(&live, &want("app:1"), &opts).unwrap(),
                Outcome::Unchanged
            );
            let Outcome::Changed(w) = apply_update(&live, &want("app:2"), &opts).unwrap() else {
                panic!("the image changed")
            };
            let mut expected = live["spec"]["template"].clone();
            expected["spec"]["containers"][1]["image"] = json!("app:2");
            assert_eq!(w["spec"]["template"], expected);
        }

        /// Inside a preserve-unknown-fields subtree (a schemaless CRD's pod template) the server
        /// replaces lists whole: the body carries the merged subtree, the owner's value in it.
        #[test]
        fn a_server_side_apply_body_carries_the_owners_value_in_a_schemaless_subtree() {
            let opts = Options {
                record: false,
                rules: crate::ListRules::new(),
                ..opts(true)
            };
            let template = vec!["spec".to_owned(), "template".to_owned()];
            let body = server_side_apply_body(&live(&opts), &desired("app:2"), &opts, &[template])
                .unwrap();
            assert_eq!(
                *containers(&body),
                json!([{"name": "istio-proxy", "image": "proxy:1"},
                    {"name": "app", "image": "app:2", "resources": {"requests": {"cpu": "750m"}}}])
            );
            // outside the subtree the handed-off field is left out
            assert!(body["spec"].get("replicas").is_none(), "{body}");
        }

        /// Not a feature: the same rule written by position, as JSON-pointer rules write it,
        /// names the injected sidecar, not `app`.
        #[test]
        fn the_same_rule_by_index_names_the_sidecar() {
            let live = live(&opts(true));
            let by_index = live.pointer("/spec/template/spec/containers/0");
            assert_eq!(by_index.map(|c| &c["name"]), Some(&json!("istio-proxy")));
            let by_key = FieldPath::parse("spec.template.spec.containers[name=app]").unwrap();
            assert_eq!(by_key.resolve(&live)[0]["name"], "app");
        }
    }
}
