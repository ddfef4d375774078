//! Table-driven merge cases: every `tests/cases/*.yaml` file is one case. See
//! `tests/cases/README.md` for the format. Failures name the file.
// run_case checks each mode's result in one place, reading as the case format does
#![allow(clippy::too_many_lines)]

use dynapply::{
    ListRule, ListRules, Options, Ordering, Outcome, apply_update, get_last_applied, json_eq,
    merge_into, merge_with, parse_document, prepare_create,
};
use serde_json::Value;
use std::path::PathBuf;

fn parse_options(v: Option<&Value>) -> Result<Options, String> {
    let mut opts = Options::default();
    let Some(v) = v else { return Ok(opts) };
    if let Some(ordering) = v.get("ordering").and_then(Value::as_str) {
        opts.ordering = match ordering {
            "desired" => Ordering::Desired,
            "metacontroller" => Ordering::Metacontroller,
            other => return Err(format!("unknown ordering {other}")),
        };
    }
    if let Some(annotation) = v.get("annotation").and_then(Value::as_str) {
        opts.annotation = annotation.to_owned();
    }
    if let Some(builtin) = v.get("builtin") {
        let api_version = builtin["apiVersion"].as_str().ok_or("builtin.apiVersion")?;
        let kind = builtin["kind"].as_str().ok_or("builtin.kind")?;
        opts.rules = ListRules::builtin(api_version, kind);
    }
    if let Some(schema) = v.get("schema") {
        opts.rules = std::mem::take(&mut opts.rules).merge(ListRules::from_openapi_schema(schema));
    }
    if let Some(rules) = v.get("rules").and_then(Value::as_object) {
        let mut explicit = ListRules::new();
        for (path, rule) in rules {
            let rule = match rule {
                Value::String(s) if s == "atomic" => ListRule::Atomic,
                Value::String(s) if s == "set" => ListRule::Set,
                Value::Object(m) => {
                    let keys = m
                        .get("map")
                        .and_then(Value::as_array)
                        .ok_or_else(|| format!("rule {path}: map needs a key list"))?;
                    if let Some(defaults) = m.get("defaults").and_then(Value::as_object) {
                        for (field, value) in defaults {
                            explicit.set_key_default(path, field, value.clone());
                        }
                    }
                    ListRule::Map(
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect(),
                    )
                }
                other => return Err(format!("rule {path}: unknown rule {other}")),
            };
            explicit.set(path, rule);
        }
        opts.rules = std::mem::take(&mut opts.rules).merge(explicit);
    }
    Ok(opts)
}

fn yaml(v: &Value) -> String {
    dynapply::to_yaml(v).unwrap_or_else(|e| e.to_string())
}

fn mismatch(what: &str, got: &Value, want: &Value) -> String {
    format!("{what}\n--- got:\n{}--- want:\n{}", yaml(got), yaml(want))
}

fn strip_annotation(obj: &mut Value, annotation: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.shift_remove(annotation);
            if a.is_empty() {
                meta.shift_remove("annotations");
            }
        }
        if meta.is_empty()
            && let Some(top) = obj.as_object_mut()
        {
            top.shift_remove("metadata");
        }
    }
}

fn run_case(case: &Value) -> Result<(), String> {
    let mode = case.get("mode").and_then(Value::as_str).unwrap_or("merge");
    let opts = parse_options(case.get("options"))?;
    let observed = case.get("observed").cloned().unwrap_or(Value::Null);
    let last_applied = case.get("last_applied").filter(|v| !v.is_null());
    let desired = case.get("desired").ok_or("case has no `desired`")?;
    let want_error = case.get("want_error").and_then(Value::as_str);
    let result = match mode {
        "merge" => {
            let copied = merge_with(&observed, last_applied, desired, &opts);
            // the in-place merge must agree exactly (result or error message)
            let mut in_place = observed.clone();
            let r = merge_into(&mut in_place, last_applied, desired, &opts);
            match (&copied, r) {
                (Ok(v), Ok(())) if *v == in_place => {}
                (Err(a), Err(b)) if a.to_string() == b.to_string() => {}
                (c, r) => {
                    return Err(format!(
                        "merge_into differs from merge_with: {r:?} / {:?} vs {c:?}",
                        in_place
                    ));
                }
            }
            copied.map(|v| (v, None))
        }
        "apply" => apply_update(&observed, desired, &opts).map(|o| match o {
            Outcome::Unchanged => (observed.clone(), Some(false)),
            Outcome::Changed(v) => (v, Some(true)),
        }),
        "create" => prepare_create(desired, &opts).map(|v| (v, None)),
        other => return Err(format!("unknown mode {other}")),
    };
    let (got, changed) = match (result, want_error) {
        (Err(e), Some(want)) => {
            let msg = e.to_string();
            return if msg.contains(want) {
                Ok(())
            } else {
                Err(format!("error `{msg}` does not contain `{want}`"))
            };
        }
        (Err(e), None) => return Err(format!("unexpected error: {e}")),
        (Ok((got, _)), Some(want)) => {
            return Err(format!(
                "expected an error containing `{want}`, got:\n{}",
                yaml(&got)
            ));
        }
        (Ok(ok), None) => ok,
    };
    let want = case.get("want").ok_or("case has no `want`")?;
    match mode {
        "merge" => {
            if got != *want && !json_eq(&got, want) {
                return Err(mismatch("merge result differs", &got, want));
            }
            // every merge must be a fixed point: re-applying desired onto the result (with
            // last-applied = desired) changes nothing
            let again = merge_with(&got, Some(desired), desired, &opts)
                .map_err(|e| format!("re-merge failed: {e}"))?;
            if !json_eq(&again, &got) {
                return Err(mismatch(
                    "re-merge with last_applied=desired is not stable",
                    &again,
                    &got,
                ));
            }
        }
        "apply" | "create" => {
            if let Some(want_changed) = case.get("want_changed").and_then(Value::as_bool)
                && changed != Some(want_changed)
            {
                return Err(format!("changed = {changed:?}, want {want_changed}"));
            }
            let recorded = get_last_applied(&got, &opts)
                .map_err(|e| format!("reading the written annotation: {e}"))?
                .ok_or("no last-applied annotation written")?;
            if let Some(want_la) = case.get("want_last_applied")
                && !json_eq(&recorded, want_la)
            {
                return Err(mismatch("written last-applied differs", &recorded, want_la));
            }
            let mut stripped = got.clone();
            strip_annotation(&mut stripped, &opts.annotation);
            if !json_eq(&stripped, want) {
                return Err(mismatch(
                    "result (without the last-applied annotation) differs",
                    &stripped,
                    want,
                ));
            }
            // reading it back must be stable
            match apply_update(&got, desired, &opts) {
                Ok(Outcome::Unchanged) => {}
                Ok(Outcome::Changed(v)) => {
                    return Err(mismatch("second apply_update is not Unchanged", &v, &got));
                }
                Err(e) => return Err(format!("second apply_update failed: {e}")),
            }
        }
        _ => {}
    }
    Ok(())
}

#[test]
fn cases() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/cases exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "expected at least 30 case files, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outcome = std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|text| parse_document(&name, &text).map_err(|e| e.to_string()))
            .and_then(|case| {
                if case.get("description").and_then(Value::as_str).is_none() {
                    return Err("case has no `description`".to_owned());
                }
                run_case(&case)
            });
        if let Err(msg) = outcome {
            failures.push(format!("tests/cases/{name}: {msg}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}
