//! Server-side `Table` rendering (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which
//! `kubectl get` asks for and prints as columns.
//!
//! Like kube-apiserver: a custom resource whose CRD version declares `additionalPrinterColumns`
//! gets `Name` plus those columns (values found by each column's JSONPath, dates shown as ages);
//! Events get their printer's columns (`LAST SEEN TYPE REASON OBJECT MESSAGE`, more with `-o
//! wide`); everything else gets the default `Name`, `Created At`.

use crate::registry::ResourceDef;
use jsonpath_rust::JsonPath;
use serde_json::{Value, json};

/// One column: its definition and how a cell is computed.
struct Column {
    definition: Value,
    cell: Cell,
}

enum Cell {
    /// `metadata.name`.
    Name,
    /// `metadata.creationTimestamp` as RFC 3339 (the default table's `Created At`).
    CreatedAt,
    /// A CRD printer column: JSONPath (`$`-rooted) and type.
    Path { path: String, kind: String },
}

/// Renders `items` (already in the requested version) as a `meta.k8s.io/v1` Table.
pub fn render(
    def: &ResourceDef,
    version: &str,
    items: &[&Value],
    metadata: Value,
    now: jiff::Timestamp,
) -> Value {
    let rows: Vec<Value> = if is_event(def) {
        items.iter().map(|o| row(event_cells(o, now), o)).collect()
    } else {
        let columns = columns(def, version);
        items
            .iter()
            .map(|o| {
                let cells = columns.iter().map(|c| cell(&c.cell, o, now)).collect();
                row(cells, o)
            })
            .collect()
    };
    let definitions: Vec<Value> = if is_event(def) {
        event_columns()
    } else {
        columns(def, version)
            .into_iter()
            .map(|c| c.definition)
            .collect()
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn is_event(def: &ResourceDef) -> bool {
    def.kind == "Event" && matches!(def.group.as_str(), "" | "events.k8s.io")
}

fn row(cells: Vec<Value>, obj: &Value) -> Value {
    json!({
        "cells": cells,
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
        },
    })
}

fn name_column() -> Column {
    Column {
        definition: json!({"name": "Name", "type": "string", "format": "name", "priority": 0,
            "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}),
        cell: Cell::Name,
    }
}

fn columns(def: &ResourceDef, version: &str) -> Vec<Column> {
    let declared = def.printer_columns.get(version).filter(|c| !c.is_empty());
    let Some(declared) = declared else {
        return vec![
            name_column(),
            Column {
                definition: json!({"name": "Created At", "type": "date", "format": "", "priority": 0,
                    "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."}),
                cell: Cell::CreatedAt,
            },
        ];
    };
    let mut out = vec![name_column()];
    for c in declared {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
        let kind = s("type").to_owned();
        out.push(Column {
            definition: json!({
                "name": s("name"), "type": kind, "format": s("format"),
                "description": s("description"),
                "priority": c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            }),
            cell: Cell::Path {
                path: rooted(s("jsonPath")),
                kind,
            },
        });
    }
    out
}

/// A printer column's Kubernetes JSONPath (`.status.x`, optionally in braces) as a
/// `$`-rooted JSONPath query.
fn rooted(path: &str) -> String {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    if p.starts_with('.') || p.starts_with('[') {
        format!("${p}")
    } else {
        format!("$.{p}")
    }
}

fn cell(cell: &Cell, obj: &Value, now: jiff::Timestamp) -> Value {
    let meta = |k: &str| {
        obj.get("metadata")
            .and_then(|m| m.get(k))
            .cloned()
            .unwrap_or(Value::Null)
    };
    match cell {
        Cell::Name => meta("name"),
        Cell::CreatedAt => meta("creationTimestamp"),
        Cell::Path { path, kind } => {
            let found = obj
                .query(path)
                .ok()
                .and_then(|r| r.first().copied().cloned());
            match found {
                Some(v) => typed_cell(kind, v, now),
                None => Value::Null,
            }
        }
    }
}

/// A found value as the cell of a column of `kind` (kube-apiserver: strings are printed, numbers
/// and booleans kept when they have the column's type, dates shown as the age since them).
fn typed_cell(kind: &str, v: Value, now: jiff::Timestamp) -> Value {
    match kind {
        "string" => match v {
            Value::String(s) => Value::String(s),
            other => Value::String(other.to_string()),
        },
        "integer" => match v.as_i64() {
            Some(i) => json!(i),
            None => Value::Null,
        },
        "number" => match v {
            Value::Number(n) => Value::Number(n),
            _ => Value::Null,
        },
        "boolean" => match v {
            Value::Bool(b) => Value::Bool(b),
            _ => Value::Null,
        },
        "date" => match v.as_str() {
            Some(s) => Value::String(age_since(Some(s), now)),
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

fn event_columns() -> Vec<Value> {
    let col = |name: &str, priority: i64, description: &str| {
        json!({"name": name, "type": "string", "format": "", "priority": priority,
            "description": description})
    };
    vec![
        col("Last Seen", 0, "The last time this event was observed."),
        col("Type", 0, "Type of this event (Normal, Warning)."),
        col(
            "Reason",
            0,
            "Short, machine understandable reason for the event.",
        ),
        col("Object", 0, "The object the event is about (kind/name)."),
        col(
            "Subobject",
            1,
            "The field of the object the event is about.",
        ),
        col(
            "Source",
            1,
            "The component (and instance) that reported the event.",
        ),
        col("Message", 0, "A human-readable description of the event."),
        col("First Seen", 1, "The first time this event was observed."),
        col("Count", 1, "The number of times this event has occurred."),
        col("Name", 1, "Name of the event object."),
    ]
}

/// The cells of one Event, read from either version's field names.
fn event_cells(e: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let s = |path: &[&str]| -> Option<&str> {
        let mut cur = e;
        for p in path {
            cur = cur.get(*p)?;
        }
        cur.as_str().filter(|s| !s.is_empty())
    };
    let either = |core: &[&str], v1: &[&str]| s(core).or_else(|| s(v1));
    let first = match either(&["firstTimestamp"], &["deprecatedFirstTimestamp"]) {
        Some(t) => age_since(Some(t), now),
        None => age_since(s(&["eventTime"]), now),
    };
    let mut last = match either(&["lastTimestamp"], &["deprecatedLastTimestamp"]) {
        Some(t) => age_since(Some(t), now),
        None => first.clone(),
    };
    let series_count = e
        .get("series")
        .and_then(|x| x.get("count"))
        .and_then(Value::as_i64);
    let count = match series_count {
        Some(c) => {
            last = age_since(s(&["series", "lastObservedTime"]), now);
            c
        }
        None => e
            .get("count")
            .or_else(|| e.get("deprecatedCount"))
            .and_then(Value::as_i64)
            .filter(|c| *c != 0)
            .unwrap_or(1),
    };
    let kind = either(&["involvedObject", "kind"], &["regarding", "kind"]).unwrap_or("");
    let object = match either(&["involvedObject", "name"], &["regarding", "name"]) {
        Some(name) => format!("{}/{name}", kind.to_lowercase()),
        None => kind.to_lowercase(),
    };
    let component = either(&["source", "component"], &["deprecatedSource", "component"])
        .or_else(|| either(&["reportingComponent"], &["reportingController"]));
    let host = either(&["source", "host"], &["deprecatedSource", "host"])
        .or_else(|| s(&["reportingInstance"]));
    let source = match (component.unwrap_or(""), host) {
        (c, Some(h)) => format!("{c}, {h}"),
        (c, None) => c.to_owned(),
    };
    vec![
        json!(last),
        json!(s(&["type"]).unwrap_or("")),
        json!(s(&["reason"]).unwrap_or("")),
        json!(object),
        json!(
            either(
                &["involvedObject", "fieldPath"],
                &["regarding", "fieldPath"]
            )
            .unwrap_or("")
        ),
        json!(source),
        json!(either(&["message"], &["note"]).unwrap_or("").trim()),
        json!(first),
        json!(count),
        json!(s(&["metadata", "name"]).unwrap_or("")),
    ]
}

/// The age of a timestamp as kubectl shows it (`<unknown>` when absent or unparseable).
fn age_since(ts: Option<&str>, now: jiff::Timestamp) -> String {
    match ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".to_owned(),
    }
}

/// A duration in seconds in Kubernetes' short human form: exact seconds up to 2 minutes, then
/// minutes (with seconds below 10 minutes), hours (with minutes below 8 hours), days (with hours
/// below 8 days), years (with days below 8 years).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_owned();
    }
    if secs < 0 {
        return "0s".to_owned();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let with = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    let minutes = secs / 60;
    if minutes < 10 {
        return with(minutes, "m", secs % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return with(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return with(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::registry::{Registry, crd_to_def};

    fn now() -> jiff::Timestamp {
        "2026-11-23T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn human_durations() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (8 * 3600 + 300, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 3600, "2d1h"),
            (3 * 86400, "3d"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400 + 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn crd_printer_columns() {
        let crd = json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Ready", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Image", "type": "string", "priority": 1,
                     "jsonPath": ".spec.template.spec.containers[0].image"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
                ]}]}});
        let def = crd_to_def(&crd).unwrap();
        let w = json!({"metadata": {"name": "w1", "creationTimestamp": "2026-11-23T11:55:00Z"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "app:2"}]}}},
            "status": {"conditions": [{"type": "Synced", "status": "False"},
                                      {"type": "Ready", "status": "True"}]}});
        let t = render(&def, "v1", &[&w], json!({"resourceVersion": "7"}), now());
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["Name", "Replicas", "Ready", "Image", "Age", "Missing"]
        );
        assert_eq!(t["columnDefinitions"][3]["priority"], 1);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["w1", 3, "True", "app:2", "5m", null])
        );
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "w1");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn default_columns_without_printer_columns() {
        let reg = Registry::with_builtins();
        let def = reg.lookup("", "v1", "configmaps").unwrap();
        let cm = json!({"metadata": {"name": "c", "creationTimestamp": "2026-11-23T11:00:00Z"}});
        let t = render(def, "v1", &[&cm], json!({}), now());
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(t["rows"][0]["cells"], json!(["c", "2026-11-23T11:00:00Z"]));
    }

    #[test]
    fn event_rows_from_either_version() {
        let reg = Registry::with_builtins();
        let core_def = reg.lookup("", "v1", "events").unwrap();
        let v1_def = reg.lookup("events.k8s.io", "v1", "events").unwrap();
        let core = json!({"metadata": {"name": "w.1"}, "type": "Warning", "reason": "SyncError",
            "involvedObject": {"kind": "Widget", "name": "w", "fieldPath": "spec"},
            "message": " hook failed \n", "firstTimestamp": "2026-11-23T11:00:00Z",
            "lastTimestamp": "2026-11-23T11:58:00Z", "count": 4,
            "source": {"component": "kmeta"}, "reportingInstance": "kmeta-0"});
        let t = render(core_def, "v1", &[&core], json!({}), now());
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "2m",
                "Warning",
                "SyncError",
                "widget/w",
                "spec",
                "kmeta, kmeta-0",
                "hook failed",
                "60m",
                4,
                "w.1"
            ])
        );
        let v1 = json!({"metadata": {"name": "w.2"}, "type": "Normal", "reason": "Started",
            "regarding": {"kind": "CompositeController", "name": "cc"}, "note": "started",
            "eventTime": "2026-11-23T11:59:30.000000Z", "reportingController": "kmeta",
            "series": {"count": 3, "lastObservedTime": "2026-11-23T11:59:50.000000Z"}});
        let t = render(v1_def, "v1", &[&v1], json!({}), now());
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "10s",
                "Normal",
                "Started",
                "compositecontroller/cc",
                "",
                "kmeta",
                "started",
                "30s",
                3,
                "w.2"
            ])
        );
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 10);
    }
}
