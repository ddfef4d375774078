//! Property tests over random JSON trees (small key/value alphabets so observed, last-applied and
//! desired overlap, and list items often share conventional merge keys).

use dynapply::{
    ListRules, Options, Ordering, Outcome, apply_update, apply_update_recorded, apply_update_with,
    get_last_applied, is_recorded, json_eq, merge_into, merge_with, prepare_create,
    recorded_last_applied, set_last_applied, would_change,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

const KEYS: &[&str] = &[
    "name",
    "port",
    "a",
    "b",
    "c",
    "spec",
    "containers",
    "env",
    "status",
    "metadata",
    "labels",
];
const NAMES: &[&str] = &["app", "sidecar", "x", "y", "80"];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => (-2i64..90).prop_map(Value::from),
        1 => (-1.0e3f64..1.0e3).prop_map(Value::from),
        3 => prop::sample::select(NAMES).prop_map(Value::from),
    ]
}

fn object_of(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|entries| {
        let mut m = Map::new();
        for (k, v) in entries {
            m.insert(k.to_owned(), v);
        }
        Value::Object(m)
    })
}

fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            2 => object_of(inner.clone()),
            1 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            // list-map-like lists: objects sharing `name` (sometimes duplicated) or `port`
            2 => prop::collection::vec(
                (prop::sample::select(NAMES), any::<bool>(), inner),
                0..4
            )
            .prop_map(|items| {
                Value::Array(
                    items
                        .into_iter()
                        .map(|(n, by_port, v)| {
                            let mut m = Map::new();
                            m.insert(if by_port { "port" } else { "name" }.to_owned(), Value::from(n));
                            m.insert("v".to_owned(), v);
                            Value::Object(m)
                        })
                        .collect(),
                )
            }),
        ]
    })
}

fn top() -> impl Strategy<Value = Value> {
    object_of(tree())
}

/// `v` with the keys of every map in reverse order.
fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .rev()
                .map(|(k, x)| (k.clone(), reversed(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

fn ordering() -> impl Strategy<Value = Ordering> {
    prop_oneof![Just(Ordering::Desired), Just(Ordering::Metacontroller)]
}

/// `result` contains every non-null part of `desired` (objects: all keys; lists: every item is
/// contained in some result item; scalars: equal by value).
fn contains(result: &Value, desired: &Value) -> bool {
    match (result, desired) {
        (Value::Object(r), Value::Object(d)) => d
            .iter()
            .filter(|(_, v)| !v.is_null())
            .all(|(k, v)| r.get(k).is_some_and(|rv| contains(rv, v))),
        (Value::Array(r), Value::Array(d)) => d
            .iter()
            .filter(|v| !v.is_null())
            .all(|dv| r.iter().any(|rv| contains(rv, dv))),
        (r, d) => json_eq(r, d),
    }
}

fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(has_null),
        Value::Array(items) => items.iter().any(has_null),
        _ => false,
    }
}

/// Every field of `observed` that neither `desired` nor `last` mentions (walking through objects
/// present in both) is in `result` unchanged.
fn live_only_survive(
    observed: &Value,
    last: Option<&Value>,
    desired: &Value,
    result: &Value,
) -> Result<(), String> {
    let (Value::Object(o), Value::Object(d), Value::Object(r)) = (observed, desired, result) else {
        return Ok(());
    };
    let l = last.and_then(Value::as_object);
    for (k, ov) in o {
        match d.get(k) {
            None if !l.is_some_and(|l| l.contains_key(k)) && r.get(k) != Some(ov) => {
                return Err(format!("live-only field {k} lost or changed"));
            }
            Some(dv) if dv.is_object() && ov.is_object() => {
                let rv = r.get(k).ok_or_else(|| format!("field {k} vanished"))?;
                live_only_survive(ov, l.and_then(|l| l.get(k)), dv, rv)
                    .map_err(|e| format!("{k}.{e}"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Two update results that must be the same: the same outcome, or the same error.
fn same_result(
    plain: &Result<Outcome, dynapply::Error>,
    with: &Result<Outcome, dynapply::Error>,
) -> Result<(), TestCaseError> {
    match (plain, with) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        _ => prop_assert!(false, "{:?} vs {:?}", plain, with),
    }
    Ok(())
}

/// Whether `v` holds a number that is not an integer.
fn has_fraction(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_fraction),
        Value::Object(m) => m.values().any(has_fraction),
        _ => false,
    }
}

/// `observed` after an update to `first` (as written; `None` when the update fails), and the
/// last-applied configuration that write recorded.
fn write(
    observed: &Value,
    first: &Value,
    opts: &Options,
) -> Result<Option<(Value, Value)>, TestCaseError> {
    let written = match apply_update(observed, first, opts) {
        Ok(Outcome::Changed(v)) => v,
        Ok(Outcome::Unchanged) => observed.clone(),
        Err(_) => return Ok(None),
    };
    let recorded =
        recorded_last_applied(first, opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(Some((written, recorded)))
}

fn opts_with(ordering: Ordering) -> Options {
    Options {
        ordering,
        ..Options::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_any_json(observed in tree(), last in tree(), desired in tree(), ord in ordering()) {
        let opts = opts_with(ord);
        let _ = merge_with(&observed, Some(&last), &desired, &opts);
        let _ = merge_with(&observed, None, &desired, &opts);
        let _ = apply_update(&observed, &desired, &opts);
        let _ = prepare_create(&desired, &opts);
        let _ = get_last_applied(&observed, &opts);
    }

    #[test]
    fn merge_keeps_live_only_fields_and_includes_desired(
        observed in top(), last in top(), desired in top(), use_last in any::<bool>(), ord in ordering()
    ) {
        let opts = opts_with(ord);
        let last = use_last.then_some(&last);
        let result = merge_with(&observed, last, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(contains(&result, &desired), "desired not contained in result {}", result);
        if let Err(e) = live_only_survive(&observed, last, &desired, &result) {
            return Err(TestCaseError::fail(format!("{e}; result {result}")));
        }
        // nulls in desired never reach the result (observed had none of its own here)
        if !has_null(&observed) {
            prop_assert!(!has_null(&result), "null in result {}", result);
        }
        // a merge is a fixed point once desired is recorded as last-applied
        let again = merge_with(&result, Some(&desired), &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(json_eq(&again, &result), "re-merge moved: {} -> {}", result, again);
    }

    #[test]
    fn apply_update_twice_is_unchanged(observed in top(), desired in top(), ord in ordering(), builtin in any::<bool>()) {
        let mut opts = opts_with(ord);
        if builtin {
            opts.rules = ListRules::builtin("apps/v1", "Deployment");
        }
        let Ok(first) = apply_update(&observed, &desired, &opts) else {
            // e.g. desired metadata that is not an object: an error, never a panic
            return Ok(());
        };
        let written = match first {
            Outcome::Unchanged => observed.clone(),
            Outcome::Changed(v) => v,
        };
        let second = apply_update(&written, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(second, Outcome::Unchanged, "written: {}", written);
    }

    /// With the last-applied configuration supplied (as a caller caching it per object version
    /// does), the update is exactly apply_update's: same outcome, same object, same error. And
    /// `Changed` always means the written object differs from observed.
    #[test]
    fn apply_update_with_parsed_last_applied_is_apply_update(
        observed in top(), last in top(), desired in top(), record in 0u8..3, ord in ordering()
    ) {
        let opts = opts_with(ord);
        let mut observed = observed;
        match record {
            0 => {}
            1 => { let _ = set_last_applied(&mut observed, &last, &opts); }
            _ => { let _ = set_last_applied(&mut observed, &desired, &opts); }
        }
        let Ok(parsed) = get_last_applied(&observed, &opts) else {
            return Ok(());
        };
        let plain = apply_update(&observed, &desired, &opts);
        let with = apply_update_with(&observed, parsed.as_ref(), &desired, &opts);
        same_result(&plain, &with)?;
        if let Ok(Outcome::Changed(written)) = &plain {
            prop_assert!(!json_eq(written, &observed), "Changed but equal to observed: {}", written);
        }
    }

    /// After a write of `first`, the last-applied recorded from `first` without a parse gives
    /// the next update exactly what parsing the written annotation gives.
    #[test]
    fn recorded_last_applied_stands_for_the_parsed_annotation(
        observed in top(), first in top(), second in top(), ord in ordering()
    ) {
        let opts = opts_with(ord);
        let Some((written, recorded)) = write(&observed, &first, &opts)? else {
            return Ok(());
        };
        let plain = apply_update(&written, &second, &opts);
        let with = apply_update_with(&written, Some(&recorded), &second, &opts);
        same_result(&plain, &with)?;
    }

    /// After a write of `first`, `apply_update_recorded` with what was recorded gives exactly
    /// what `apply_update` gives, for the same answer again (its shortcut) and for another.
    #[test]
    fn apply_update_recorded_is_apply_update_after_a_write(
        observed in top(), first in top(), other in top(), again in 0..3u8, ord in ordering()
    ) {
        let opts = opts_with(ord);
        let Some((written, recorded)) = write(&observed, &first, &opts)? else {
            return Ok(());
        };
        // the recorded configuration, the answer as the hook gave it (nulls and all), another
        let second = [&recorded, &first, &other][usize::from(again)];
        let plain = apply_update(&written, second, &opts);
        let with = apply_update_recorded(&written, &recorded, second, &opts);
        same_result(&plain, &with)?;
    }

    /// What dynapply wrote, parsed back, is recognised as recorded, and serves
    /// apply_update_recorded as well as what was recorded at the write.
    #[test]
    fn parsed_record_is_recognised_and_updates_alike(
        observed in top(), first in top(), other in top(), again in any::<bool>(), ord in ordering()
    ) {
        let opts = opts_with(ord);
        let Some((written, recorded)) = write(&observed, &first, &opts)? else {
            return Ok(());
        };
        let parsed = get_last_applied(&written, &opts)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let Some(parsed) = parsed else {
            return Err(TestCaseError::fail("a written object without its annotation"));
        };
        // always recognised, unless a fractional number did not parse back to the same bits
        // (serde_json's parse may be off by one ulp): then the caller takes the encoding path
        let recognised = is_recorded(&written, &parsed, &opts);
        prop_assert!(recognised || has_fraction(&parsed), "not recognised: {}", written);
        if !recognised {
            return Ok(());
        }
        let second = if again { &recorded } else { &other };
        let plain = apply_update(&written, second, &opts);
        let with = apply_update_recorded(&written, &parsed, second, &opts);
        same_result(&plain, &with)?;
    }

    /// The dry run used by apply_update's fast path is sound (never "no change" for a merge that
    /// changes something) and complete on fixed points (a merged object needs no change).
    #[test]
    fn dry_run_agrees_with_merge(
        observed in top(), last in top(), desired in top(), use_last in any::<bool>(), ord in ordering(), builtin in any::<bool>()
    ) {
        let mut opts = opts_with(ord);
        if builtin {
            opts.rules = ListRules::builtin("v1", "Pod");
        }
        let last = use_last.then_some(&last);
        let merged = merge_with(&observed, last, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if !would_change(&observed, last, &desired, &opts) {
            prop_assert!(json_eq(&merged, &observed), "dry run said unchanged, merge gave {}", merged);
        }
        prop_assert!(!would_change(&merged, Some(&desired), &desired, &opts), "fixed point reported as a change: {}", merged);
        if !would_change(&merged, last, &desired, &opts) {
            let again = merge_with(&merged, last, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(json_eq(&again, &merged), "dry run said unchanged, merge gave {}", again);
        }
    }

    /// The in-place merge is the copying merge: same result (structurally, key order included)
    /// or the same error, for both orderings, with and without last-applied and list rules, on
    /// arbitrary JSON (errors for non-objects included) and on object-shaped inputs.
    #[test]
    fn merge_into_equals_merge_with(
        any_observed in tree(), any_last in tree(), any_desired in tree(),
        observed in top(), last in top(), desired in top(),
        use_last in any::<bool>(), builtin in any::<bool>()
    ) {
        for ord in [Ordering::Desired, Ordering::Metacontroller] {
            let mut opts = opts_with(ord);
            if builtin {
                opts.rules = ListRules::builtin("v1", "Pod");
            }
            for (o, l, d) in [(&observed, &last, &desired), (&any_observed, &any_last, &any_desired)] {
                let l = use_last.then_some(l);
                let copied = merge_with(o, l, d, &opts).map_err(|e| e.to_string());
                let mut in_place = o.clone();
                let r = merge_into(&mut in_place, l, d, &opts).map_err(|e| e.to_string());
                match (copied, r) {
                    (Ok(want), Ok(())) => prop_assert_eq!(&in_place, &want, "{:?}", ord),
                    (Err(want), Err(got)) => prop_assert_eq!(got, want),
                    (want, got) => {
                        return Err(TestCaseError::fail(format!("merge_with {want:?}, merge_into {got:?}")));
                    }
                }
            }
        }
    }

    /// Key order never decides a merge: with the keys of every map of observed, last-applied
    /// or desired listed in reverse (the merge pairs keys in step first, then looks them up),
    /// the result holds the same values.
    #[test]
    fn merge_ignores_key_order(
        observed in top(), last in top(), desired in top(), use_last in any::<bool>(), ord in ordering()
    ) {
        let opts = opts_with(ord);
        let last = use_last.then_some(&last);
        let want = merge_with(&observed, last, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let rev_last = last.map(reversed);
        let variants = [
            (reversed(&observed), last.cloned(), desired.clone()),
            (observed.clone(), rev_last.clone(), desired.clone()),
            (observed.clone(), last.cloned(), reversed(&desired)),
            (reversed(&observed), rev_last, reversed(&desired)),
        ];
        for (o, l, d) in variants {
            let got = merge_with(&o, l.as_ref(), &d, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(json_eq(&got, &want), "{} vs {}", got, want);
        }
    }

    #[test]
    fn created_object_needs_no_update(desired in top()) {
        let opts = Options::default();
        let Ok(created) = prepare_create(&desired, &opts) else { return Ok(()) };
        prop_assert!(!has_null(&created));
        prop_assert_eq!(apply_update(&created, &desired, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?, Outcome::Unchanged);
    }
}

/// A keyed list: unique names from `pool`, in random order, each with a small payload.
fn keyed_list() -> impl Strategy<Value = Vec<(String, i64)>> {
    prop::collection::btree_map(
        prop::sample::select(&["a", "b", "c", "d", "e", "f", "g"][..]),
        0i64..3,
        0..6,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Vec<_>>()
    })
    .prop_shuffle()
}

fn as_list(items: &[(String, i64)], field: &str) -> Value {
    Value::Array(
        items
            .iter()
            .map(|(n, v)| serde_json::json!({"name": n, field: v}))
            .collect(),
    )
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Rules 7 and 8 on a list-map: live-only items survive untouched, last-applied items dropped
    /// from desired are removed, desired items are present and merged, desired items keep
    /// desired's relative order and kept items keep live's relative order.
    #[test]
    fn list_map_membership_and_order(live in keyed_list(), last in keyed_list(), desired in keyed_list(), ord in ordering()) {
        let observed = serde_json::json!({"items": as_list(&live, "live")});
        let last_v = serde_json::json!({"items": as_list(&last, "last")});
        let desired_v = serde_json::json!({"items": as_list(&desired, "want")});
        let result = merge_with(&observed, Some(&last_v), &desired_v, &opts_with(ord)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = names(&result["items"]);
        let in_list = |l: &[(String, i64)], n: &str| l.iter().any(|(m, _)| m == n);
        let want_kept: Vec<String> = live.iter().map(|(n, _)| n.clone()).filter(|n| !in_list(&desired, n) && !in_list(&last, n)).collect();
        let want_desired: Vec<String> = desired.iter().map(|(n, _)| n.clone()).collect();
        // membership
        let mut expected: Vec<String> = want_kept.iter().chain(&want_desired).cloned().collect();
        expected.sort();
        let mut sorted = got.clone();
        sorted.sort();
        prop_assert_eq!(sorted, expected, "result {}", result);
        // payloads: desired items carry desired's value and keep live's extra field
        for item in result["items"].as_array().into_iter().flatten() {
            let n = item["name"].as_str().unwrap_or_default();
            if let Some((_, w)) = desired.iter().find(|(m, _)| m == n) {
                prop_assert_eq!(&item["want"], &Value::from(*w));
                if let Some((_, l)) = live.iter().find(|(m, _)| m == n) {
                    prop_assert_eq!(&item["live"], &Value::from(*l));
                }
            } else {
                let l = live.iter().find(|(m, _)| m == n).map(|(_, l)| *l);
                prop_assert_eq!(item, &serde_json::json!({"name": n, "live": l}));
            }
        }
        // relative orders
        let kept_order: Vec<&String> = got.iter().filter(|n| want_kept.contains(n)).collect();
        prop_assert_eq!(kept_order, want_kept.iter().collect::<Vec<_>>());
        if ord == Ordering::Desired {
            let desired_order: Vec<&String> = got.iter().filter(|n| want_desired.contains(n)).collect();
            prop_assert_eq!(desired_order, want_desired.iter().collect::<Vec<_>>());
        }
    }

    /// A list-map whose live keys line up with desired's (same names, same order; the case
    /// merged item by item where it stands), with a null at the same position in both sometimes:
    /// every item is merged onto its live counterpart, a null live item stays where it is, and
    /// the in-place merge agrees with the copying one.
    #[test]
    fn aligned_list_map_merges_each_item(
        desired in keyed_list(), last in keyed_list(), null_at in any::<prop::sample::Index>(),
        with_null in any::<bool>(), ord in ordering()
    ) {
        let live: Vec<(String, i64)> = desired.iter().map(|(n, v)| (n.clone(), v + 10)).collect();
        let mut live_v = as_list(&live, "live");
        let mut desired_v = as_list(&desired, "want");
        let mut want: Vec<Value> = desired
            .iter()
            .zip(&live)
            .map(|((n, w), (_, l))| serde_json::json!({"name": n, "live": l, "want": w}))
            .collect();
        if with_null {
            let at = null_at.index(desired.len() + 1);
            for list in [&mut live_v, &mut desired_v] {
                if let Some(items) = list.as_array_mut() {
                    items.insert(at, Value::Null);
                }
            }
            want.insert(at, Value::Null);
        }
        let observed = serde_json::json!({"items": live_v});
        let last_v = serde_json::json!({"items": as_list(&last, "last")});
        let desired_v = serde_json::json!({"items": desired_v});
        let opts = opts_with(ord);
        let result = merge_with(&observed, Some(&last_v), &desired_v, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&result["items"], &Value::Array(want), "result {}", result);
        let mut in_place = observed.clone();
        merge_into(&mut in_place, Some(&last_v), &desired_v, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(in_place, result);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A field left to others (`spec.a`, hand-off or ignore) is never set, changed or removed by
    /// an update, whatever the last-applied record and the hook's answer, as long as the answer
    /// keeps `spec` a map or drops it (an answer turning `spec` into a scalar or a list replaces
    /// it, rule 3).
    #[test]
    fn a_ruled_field_is_never_removed_or_reset(
        observed in top(), last in top(), desired in top(), ignore in any::<bool>()
    ) {
        prop_assume!(desired.get("spec").is_none_or(|s| s.is_object() || s.is_null()));
        let rule = dynapply::FieldRule {
            name: "r".into(),
            path: dynapply::FieldPath::parse("spec.a").map_err(|e| TestCaseError::fail(e.to_string()))?,
            mode: if ignore { dynapply::FieldMode::Ignore } else { dynapply::FieldMode::HandOff },
        };
        let opts = Options { fields: vec![rule], ..Options::default() };
        // live has the field (another writer set it)
        let mut observed = observed;
        if !observed.get("spec").is_some_and(Value::is_object) {
            observed["spec"] = Value::Object(Map::new());
        }
        if observed["spec"].get("a").is_none_or(Value::is_null) {
            observed["spec"]["a"] = Value::from(7);
        }
        prop_assume!(set_last_applied(&mut observed, &last, &opts).is_ok());
        if let Ok(Outcome::Changed(written)) = apply_update(&observed, &desired, &opts) {
            let (was, is) = (observed.pointer("/spec/a"), written.pointer("/spec/a"));
            prop_assert!(
                match (was, is) { (Some(w), Some(i)) => json_eq(w, i), (None, None) => true, _ => false },
                "spec.a was {was:?}, is {is:?}"
            );
        }
    }
}
