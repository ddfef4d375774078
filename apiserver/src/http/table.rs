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
pub(super) fn render(
    def: &ResourceDef,
    version: &str,
    items: &[&Value],
    metadata: Value,
    now: jiff::Timestamp,
) -> Value {
    let (definitions, rows): (Vec<Value>, Vec<Value>) = match builtin_printer(def) {
        Some(printer) => (
            printer
                .columns
                .iter()
                .map(|(name, kind, priority, description)| {
                    json!({"name": name, "type": kind, "format": "", "priority": priority,
                        "description": description})
                })
                .collect(),
            items
                .iter()
                .map(|o| row((printer.cells)(o, now), o))
                .collect(),
        ),
        None => {
            let columns = columns(def, version);
            let rows = items
                .iter()
                .map(|o| {
                    let cells = columns.iter().map(|c| cell(&c.cell, o, now)).collect();
                    row(cells, o)
                })
                .collect();
            (columns.into_iter().map(|c| c.definition).collect(), rows)
        }
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A built-in kind's printer: the resource it prints, its column definitions (name, type,
/// priority, description) and the function computing one row's cells.
struct Printer {
    /// The API groups serving the resource (`""` for the core group).
    groups: &'static [&'static str],
    /// The resource, plural.
    plural: &'static str,
    columns: &'static [(&'static str, &'static str, i64, &'static str)],
    cells: fn(&Value, jiff::Timestamp) -> Vec<Value>,
}

const NAME: (&str, &str, i64, &str) = ("Name", "string", 0, "Name of the object.");
const CONTAINERS: (&str, &str, i64, &str) = ("Containers", "string", 1, "Container names.");
const IMAGES: (&str, &str, i64, &str) = ("Images", "string", 1, "Container images.");
const SELECTOR: (&str, &str, i64, &str) = ("Selector", "string", 1, "The pod selector.");
const READY_OF_DESIRED: (&str, &str, i64, &str) =
    ("Ready", "string", 0, "Ready replicas / desired replicas.");
const AGE: (&str, &str, i64, &str) = (
    "Age",
    "string",
    0,
    "Time since the object was created (metadata.creationTimestamp).",
);

/// The printers of the built-in kinds `kubectl get` users look at most, with kube-apiserver's
/// columns; other built-ins get the default `Name`, `Created At`.
const PRINTERS: &[Printer] = &[
    Printer {
        groups: &["", "events.k8s.io"],
        plural: "events",
        columns: EVENT_COLUMNS,
        cells: event_cells,
    },
    Printer {
        groups: &[""],
        plural: "configmaps",
        columns: &[NAME, ("Data", "integer", 0, "Number of data keys."), AGE],
        cells: config_map_cells,
    },
    Printer {
        groups: &[""],
        plural: "secrets",
        columns: &[
            NAME,
            ("Type", "string", 0, "Type of the secret."),
            ("Data", "integer", 0, "Number of data keys."),
            AGE,
        ],
        cells: secret_cells,
    },
    Printer {
        groups: &[""],
        plural: "namespaces",
        columns: &[NAME, ("Status", "string", 0, "The namespace's phase."), AGE],
        cells: |o, now| vec![name(o), json!(text(o, "/status/phase")), age(o, now)],
    },
    Printer {
        groups: &[""],
        plural: "serviceaccounts",
        columns: &[NAME, ("Secrets", "string", 0, "Number of secrets."), AGE],
        cells: |o, now| vec![name(o), json!(len(o, "/secrets")), age(o, now)],
    },
    Printer {
        groups: &[""],
        plural: "services",
        columns: &[
            NAME,
            ("Type", "string", 0, "Type of the service."),
            ("Cluster-IP", "string", 0, "The cluster IP of the service."),
            ("External-IP", "string", 0, "External IPs of the service."),
            ("Port(s)", "string", 0, "The ports of the service."),
            AGE,
            SELECTOR,
        ],
        cells: service_cells,
    },
    Printer {
        groups: &[""],
        plural: "pods",
        columns: &[
            NAME,
            ("Ready", "string", 0, "Ready containers / all containers."),
            ("Status", "string", 0, "The pod's status."),
            ("Restarts", "string", 0, "Container restarts."),
            AGE,
            ("IP", "string", 1, "The pod's IP."),
            ("Node", "string", 1, "The node the pod runs on."),
        ],
        cells: pod_cells,
    },
    Printer {
        groups: &["apps"],
        plural: "deployments",
        columns: &[
            NAME,
            READY_OF_DESIRED,
            (
                "Up-to-date",
                "integer",
                0,
                "Replicas with the current template.",
            ),
            ("Available", "integer", 0, "Available replicas."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        cells: deployment_cells,
    },
    Printer {
        groups: &["apps"],
        plural: "statefulsets",
        columns: &[NAME, READY_OF_DESIRED, AGE, CONTAINERS, IMAGES],
        cells: stateful_set_cells,
    },
    Printer {
        groups: &["apps"],
        plural: "replicasets",
        columns: &[
            NAME,
            ("Desired", "integer", 0, "Desired replicas."),
            ("Current", "integer", 0, "Current replicas."),
            ("Ready", "integer", 0, "Ready replicas."),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ],
        cells: replica_set_cells,
    },
    Printer {
        groups: &["apps"],
        plural: "daemonsets",
        columns: &[
            NAME,
            ("Desired", "integer", 0, "Nodes that should run the pod."),
            ("Current", "integer", 0, "Nodes running the pod."),
            ("Ready", "integer", 0, "Nodes with a ready pod."),
            (
                "Up-to-date",
                "integer",
                0,
                "Nodes running the current template.",
            ),
            ("Available", "integer", 0, "Nodes with an available pod."),
            AGE,
        ],
        cells: daemon_set_cells,
    },
    Printer {
        groups: &["apps"],
        plural: "controllerrevisions",
        columns: &[
            NAME,
            ("Controller", "string", 0, "The controlling owner."),
            ("Revision", "integer", 0, "The revision number."),
            AGE,
        ],
        cells: |o, now| {
            vec![
                name(o),
                json!(controller_of(o)),
                json!(int(o, "/revision")),
                age(o, now),
            ]
        },
    },
    Printer {
        groups: &["coordination.k8s.io"],
        plural: "leases",
        columns: &[NAME, ("Holder", "string", 0, "The lease's holder."), AGE],
        cells: |o, now| vec![name(o), json!(text(o, "/spec/holderIdentity")), age(o, now)],
    },
];

/// The printer of a built-in resource, if [`PRINTERS`] has one.
fn builtin_printer(def: &ResourceDef) -> Option<&'static Printer> {
    if !def.is_builtin() {
        return None;
    }
    PRINTERS
        .iter()
        .find(|p| p.plural == def.plural && p.groups.contains(&def.group.as_str()))
}

fn config_map_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let n = len(o, "/data") + len(o, "/binaryData");
    vec![name(o), json!(n), age(o, now)]
}

fn secret_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let n = len(o, "/data");
    vec![name(o), json!(text(o, "/type")), json!(n), age(o, now)]
}

fn deployment_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (containers, images) = template_containers(o);
    vec![
        name(o),
        ready_of_desired(o),
        json!(int(o, "/status/updatedReplicas")),
        json!(int(o, "/status/availableReplicas")),
        age(o, now),
        json!(containers),
        json!(images),
        json!(selector(o)),
    ]
}

fn stateful_set_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (containers, images) = template_containers(o);
    vec![
        name(o),
        ready_of_desired(o),
        age(o, now),
        json!(containers),
        json!(images),
    ]
}

fn replica_set_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (containers, images) = template_containers(o);
    vec![
        name(o),
        json!(replicas(o)),
        json!(int(o, "/status/replicas")),
        json!(int(o, "/status/readyReplicas")),
        age(o, now),
        json!(containers),
        json!(images),
        json!(selector(o)),
    ]
}

fn daemon_set_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![
        name(o),
        json!(int(o, "/status/desiredNumberScheduled")),
        json!(int(o, "/status/currentNumberScheduled")),
        json!(int(o, "/status/numberReady")),
        json!(int(o, "/status/updatedNumberScheduled")),
        json!(int(o, "/status/numberAvailable")),
        age(o, now),
    ]
}

/// A ControllerRevision's controlling owner as `kind[.group]/name`, or `<none>`.
fn controller_of(o: &Value) -> String {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller") == Some(&json!(true)))
        })
        .map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
            let group = s("apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
            let kind = s("kind").to_lowercase();
            match group {
                "" => format!("{kind}/{}", s("name")),
                g => format!("{kind}.{g}/{}", s("name")),
            }
        })
        .unwrap_or_else(|| "<none>".to_owned())
}

fn name(o: &Value) -> Value {
    o.pointer("/metadata/name").cloned().unwrap_or(json!(""))
}

fn age(o: &Value, now: jiff::Timestamp) -> Value {
    let created = o
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str);
    json!(age_since(created, now))
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// Entries of a map or list at `pointer` (0 when absent).
fn len(o: &Value, pointer: &str) -> usize {
    match o.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

/// `ready/desired` replicas of a workload.
fn ready_of_desired(o: &Value) -> Value {
    json!(format!(
        "{}/{}",
        int(o, "/status/readyReplicas"),
        replicas(o)
    ))
}

/// `spec.replicas`, which defaults to 1 for workloads.
fn replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// Container names and images of a workload's pod template, comma-separated.
fn template_containers(o: &Value) -> (String, String) {
    let containers = o
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let field = |k: &str| {
        containers
            .iter()
            .map(|c| c.get(k).and_then(Value::as_str).unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// A label selector (`matchLabels` and `matchExpressions`, or a Service's plain map) in the
/// label-selector string syntax; `<none>` when empty.
fn selector(o: &Value) -> String {
    let sel = o.pointer("/spec/selector");
    let plain =
        sel.filter(|s| s.get("matchLabels").is_none() && s.get("matchExpressions").is_none());
    let labels = plain.or_else(|| sel.and_then(|s| s.get("matchLabels")));
    let mut parts: Vec<String> = labels
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let expressions = sel
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for e in expressions {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(
            match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_owned(),
                "DoesNotExist" => format!("!{key}"),
                other => format!("{key} {other}"),
            },
        );
    }
    if parts.is_empty() {
        "<none>".to_owned()
    } else {
        parts.join(",")
    }
}

fn service_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let kind = match text(o, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = match text(o, "/spec/clusterIP") {
        "" => "<none>",
        ip => ip,
    };
    let mut external: Vec<String> = o
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    match kind {
        "ExternalName" => external = vec![text(o, "/spec/externalName").to_owned()],
        "LoadBalancer" => {
            let ingress = o
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for i in ingress {
                let ip = i.get("ip").or_else(|| i.get("hostname"));
                if let Some(ip) = ip.and_then(Value::as_str) {
                    external.push(ip.to_owned());
                }
            }
            if external.is_empty() {
                external.push("<pending>".to_owned());
            }
        }
        _ => {}
    }
    let external = if external.is_empty() {
        "<none>".to_owned()
    } else {
        external.join(",")
    };
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(node) => format!("{port}:{node}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".to_owned()
    } else {
        ports.join(",")
    };
    vec![
        name(o),
        json!(kind),
        json!(cluster_ip),
        json!(external),
        json!(ports),
        age(o, now),
        json!(selector(o)),
    ]
}

fn pod_cells(o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let total = len(o, "/spec/containers");
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ready = statuses
        .iter()
        .filter(|c| c.get("ready") == Some(&json!(true)))
        .count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum();
    let mut status = match text(o, "/status/reason") {
        "" => text(o, "/status/phase").to_owned(),
        r => r.to_owned(),
    };
    for c in statuses.iter().rev() {
        let waiting = c.pointer("/state/waiting/reason").and_then(Value::as_str);
        let terminated = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str);
        if let Some(r) = waiting.or(terminated).filter(|r| !r.is_empty()) {
            status = r.to_owned();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        status = "Terminating".to_owned();
    }
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_owned()
        } else {
            s.to_owned()
        }
    };
    vec![
        name(o),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        age(o, now),
        json!(or_none(text(o, "/status/podIP"))),
        json!(or_none(text(o, "/spec/nodeName"))),
    ]
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
    if def.is_builtin() {
        return vec![
            name_column(),
            Column {
                definition: json!({"name": "Created At", "type": "date", "format": "", "priority": 0,
                    "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."}),
                cell: Cell::CreatedAt,
            },
        ];
    }
    // a custom resource version without printer columns gets an Age column (as kube-apiserver)
    let age = [
        json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
        "description": "Time since the object was created (metadata.creationTimestamp)."}),
    ];
    let declared = match def.printer_columns.get(version) {
        Some(c) if !c.is_empty() => c.as_slice(),
        _ => &age,
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

const EVENT_COLUMNS: &[(&str, &str, i64, &str)] = &[
    (
        "Last Seen",
        "string",
        0,
        "The last time this event was observed.",
    ),
    ("Type", "string", 0, "Type of this event (Normal, Warning)."),
    (
        "Reason",
        "string",
        0,
        "Short, machine understandable reason for the event.",
    ),
    (
        "Object",
        "string",
        0,
        "The object the event is about (kind/name).",
    ),
    (
        "Subobject",
        "string",
        1,
        "The field of the object the event is about.",
    ),
    (
        "Source",
        "string",
        1,
        "The component (and instance) that reported the event.",
    ),
    (
        "Message",
        "string",
        0,
        "A human-readable description of the event.",
    ),
    (
        "First Seen",
        "string",
        1,
        "The first time this event was observed.",
    ),
    (
        "Count",
        "string",
        1,
        "The number of times this event has occurred.",
    ),
    ("Name", "string", 1, "Name of the event object."),
];

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
pub(super) fn human_duration(secs: i64) -> String {
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
        let def = reg
            .lookup("rbac.authorization.k8s.io", "v1", "roles")
            .unwrap();
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2026-11-23T11:00:00Z"}});
        let t = render(def, "v1", &[&role], json!({}), now());
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(t["rows"][0]["cells"], json!(["r", "2026-11-23T11:00:00Z"]));

        let crd = json!({"metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"kind": "Gadget", "plural": "gadgets"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let def = crd_to_def(&crd).unwrap();
        let g = json!({"metadata": {"name": "g", "creationTimestamp": "2026-11-23T09:00:00Z"}});
        let t = render(&def, "v1", &[&g], json!({}), now());
        assert_eq!(t["columnDefinitions"][1]["name"], "Age");
        assert_eq!(t["rows"][0]["cells"], json!(["g", "3h"]));
    }

    fn cells(group: &str, plural: &str, obj: Value) -> Value {
        let reg = Registry::with_builtins();
        let def = reg.lookup(group, "v1", plural).unwrap();
        let t = render(def, "v1", &[&obj], json!({}), now());
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), t["rows"][0]["cells"].as_array().unwrap().len());
        t["rows"][0]["cells"].clone()
    }

    #[test]
    fn builtin_printers() {
        let created = "2026-11-23T11:59:00Z";
        assert_eq!(
            cells(
                "",
                "configmaps",
                json!({"metadata": {"name": "c", "creationTimestamp": created},
                "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}})
            ),
            json!(["c", 3, "60s"])
        );
        assert_eq!(
            cells(
                "",
                "secrets",
                json!({"metadata": {"name": "s", "creationTimestamp": created},
                "type": "Opaque", "data": {"a": "MQ=="}})
            ),
            json!(["s", "Opaque", 1, "60s"])
        );
        let deploy = json!({"metadata": {"name": "web", "creationTimestamp": created},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]},
                "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1"},
                                                     {"name": "proxy", "image": "envoy:1"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            cells("apps", "deployments", deploy),
            json!([
                "web",
                "2/3",
                3,
                2,
                "60s",
                "app,proxy",
                "nginx:1,envoy:1",
                "app=web,tier in (fe,be)"
            ])
        );
        let svc = json!({"metadata": {"name": "lb", "creationTimestamp": created},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.7", "selector": {"app": "web"},
                "ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(
            cells("", "services", svc),
            json!([
                "lb",
                "LoadBalancer",
                "10.0.0.7",
                "<pending>",
                "80:30080/TCP,53/UDP",
                "60s",
                "app=web"
            ])
        );
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": created},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.1.0.4", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 4,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(
            cells("", "pods", pod),
            json!(["p", "1/2", "CrashLoopBackOff", "5", "60s", "10.1.0.4", "n1"])
        );
        let rev = json!({"metadata": {"name": "r-1", "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                 "uid": "u", "controller": true}]}, "revision": 2});
        assert_eq!(
            cells("apps", "controllerrevisions", rev),
            json!(["r-1", "statefulset.apps/db", 2, "60s"])
        );
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
