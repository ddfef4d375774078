//! Server-side apply of kmeta-apiserver against structured-merge-diff, the library
//! kube-apiserver's field manager is built on (`docs/design/ssa-differential.md`).
//!
//! Seeded sequences of applies (several managers, with and without force), updates (PUT) and
//! applies of bodies made by dynapply's `server_side_apply_body` run against a custom resource
//! whose schema has every kind of node structured-merge-diff distinguishes (scalars, granular
//! and atomic maps and structs, associative lists with one and two keys, sets, atomic lists, a
//! `x-kubernetes-preserve-unknown-fields` subtree). Each sequence goes through kmeta-apiserver
//! over HTTP and through the Go harness in `tests/smd/` (one long-lived process speaking JSON
//! lines); after every step the object, the managed fields (manager, operation, `fieldsV1`) and
//! the conflicts (manager, field) must be the same. A difference is shrunk by proptest to its
//! smallest sequence and printed.
//!
//! `KMETA_SSA_DIFF_CASES=N` runs N sequences (default 400, and 2000 in the deep tier
//! `KMETA_TEST_DEEP=1` that `.ci/run` runs: CONTRIBUTING.md, "How long the tests take"),
//! `KMETA_SSA_DIFF_SEED=S` another seed. Needs `go` and Debian's `golang-k8s-sigs-structured-merge-diff-dev`: without them the
//! test says SKIPPED, and fails under `KMETA_CI=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use kmeta_apiserver::TestServer;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Map, Value, json};

const GROUP: &str = "smd.kmeta.test";
const API_VERSION: &str = "smd.kmeta.test/v1";

/// The schema both sides use: one field per kind of node.
fn schema() -> Value {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "a": s, "n": i,
            "m": {"type": "object", "additionalProperties": s},
            "am": {"type": "object", "additionalProperties": s, "x-kubernetes-map-type": "atomic"},
            "st": {"type": "object", "x-kubernetes-map-type": "atomic",
                   "properties": {"x": s, "y": s}},
            "g": {"type": "object", "properties": {"x": s, "y": s,
                  "z": {"type": "object", "properties": {"p": s}}}},
            "items": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": s, "v": s, "w": i,
                          "sub": {"type": "object", "properties": {"q": s}}}}},
            "pairs": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["k1", "k2"],
                      "items": {"type": "object", "required": ["k1", "k2"], "properties": {
                          "k1": s, "k2": i, "v": s}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": s},
            "order": {"type": "array", "items": s},
            "objs": {"type": "array", "items": {"type": "object", "properties": {"name": s, "v": s}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }}
    }})
}

/// The CRD of `kind` (plural: lowercase, `s` added) with this schema.
fn crd(kind: &str, schema: &Value) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}
    })
}

// ---- generated sequences

/// One write of a sequence. The first one creates the object.
#[derive(Debug, Clone)]
enum Op {
    /// Server-side apply of `labels` and `spec` by `manager`.
    Apply {
        manager: &'static str,
        force: bool,
        labels: Value,
        spec: Value,
    },
    /// PUT (POST for the first op) of the live object with `spec`'s top-level fields set,
    /// `delete`'s removed and the labels replaced by `labels` when given; with `patch`, the
    /// same as a JSON merge patch (PATCH, the labels merged).
    Update {
        manager: &'static str,
        labels: Option<Value>,
        spec: Value,
        delete: Vec<&'static str>,
        patch: bool,
    },
    /// Server-side apply of the body dynapply's `server_side_apply_body` makes for this desired
    /// object (manager `hybrid`).
    Hybrid { force: bool, spec: Value },
    /// PUT (POST for the first op) of an object with this spec (the tables' updates).
    Put { manager: &'static str, spec: Value },
}

fn string() -> impl Strategy<Value = Value> {
    prop_oneof![Just(json!("a")), Just(json!("b"))]
}

fn int() -> impl Strategy<Value = Value> {
    prop_oneof![Just(json!(1)), Just(json!(2))]
}

fn name(names: &'static [&'static str]) -> impl Strategy<Value = Value> {
    proptest::sample::select(names).prop_map(|n| json!(n))
}

/// An object of the optional fields given.
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let (names, strategies): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    strategies
        .into_iter()
        .map(proptest::option::of)
        .collect::<Vec<_>>()
        .prop_map(move |vals| {
            let m: Map<String, Value> = names
                .iter()
                .zip(vals)
                .filter_map(|(n, v)| v.map(|v| ((*n).to_owned(), v)))
                .collect();
            Value::Object(m)
        })
        .boxed()
}

fn string_map(keys: &'static [&'static str]) -> BoxedStrategy<Value> {
    proptest::collection::btree_map(proptest::sample::select(keys), string(), 0..3)
        .prop_map(|m| json!(m))
        .boxed()
}

/// A list whose items are unique by `key` (the first of each kept).
fn keyed_list(item: BoxedStrategy<Value>, key: fn(&Value) -> Value) -> BoxedStrategy<Value> {
    proptest::collection::vec(item, 0..3)
        .prop_map(move |items| {
            let mut seen = vec![];
            let unique: Vec<Value> = items
                .into_iter()
                .filter(|i| {
                    let k = key(i);
                    let new = !seen.contains(&k);
                    seen.push(k);
                    new
                })
                .collect();
            Value::Array(unique)
        })
        .boxed()
}

/// Sometimes null instead (an applied null owns the field and clears it).
fn nullable(s: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![12 => s, 1 => Just(Value::Null)].boxed()
}

fn spec() -> BoxedStrategy<Value> {
    let item = object(vec![
        ("v", string().boxed()),
        ("w", int().boxed()),
        ("sub", object(vec![("q", string().boxed())])),
    ]);
    let item = (name(&["x", "y", "z"]), item)
        .prop_map(|(n, mut i)| {
            i["name"] = n;
            i
        })
        .boxed();
    let pair = (name(&["a", "b"]), int(), proptest::option::of(string()))
        .prop_map(|(k1, k2, v)| {
            let mut p = json!({"k1": k1, "k2": k2});
            if let Some(v) = v {
                p["v"] = v;
            }
            p
        })
        .boxed();
    let free = object(vec![
        ("k", string().boxed()),
        (
            "list",
            proptest::collection::vec(string(), 0..3)
                .prop_map(Value::Array)
                .boxed(),
        ),
        (
            "obj",
            nullable(object(vec![
                ("p", string().boxed()),
                ("r", string().boxed()),
            ])),
        ),
    ]);
    let fields: Vec<(&'static str, BoxedStrategy<Value>)> = vec![
        ("a", string().boxed()),
        ("n", int().boxed()),
        ("m", string_map(&["k1", "k2", "k3"])),
        ("am", string_map(&["k1", "k2"])),
        (
            "st",
            object(vec![("x", string().boxed()), ("y", string().boxed())]),
        ),
        (
            "g",
            object(vec![
                ("x", string().boxed()),
                ("y", string().boxed()),
                ("z", nullable(object(vec![("p", string().boxed())]))),
            ]),
        ),
        ("items", keyed_list(item, |i| i["name"].clone())),
        ("pairs", keyed_list(pair, |p| json!([p["k1"], p["k2"]]))),
        (
            "tags",
            keyed_list(name(&["a", "b", "c"]).boxed(), Value::clone),
        ),
        (
            "order",
            proptest::collection::vec(string(), 0..3)
                .prop_map(Value::Array)
                .boxed(),
        ),
        (
            "objs",
            proptest::collection::vec(
                object(vec![("name", string().boxed()), ("v", string().boxed())]),
                0..2,
            )
            .prop_map(Value::Array)
            .boxed(),
        ),
        ("free", free),
    ];
    object(fields.into_iter().map(|(n, s)| (n, nullable(s))).collect())
}

const SPEC_FIELDS: &[&str] = &[
    "a", "n", "m", "am", "st", "g", "items", "pairs", "tags", "order", "objs", "free",
];

fn op() -> BoxedStrategy<Op> {
    let labels = || string_map(&["l1", "l2"]);
    prop_oneof![
        4 => (proptest::sample::select(&["a", "b"][..]), proptest::bool::weighted(0.3), labels(), spec())
            .prop_map(|(manager, force, labels, spec)| Op::Apply { manager, force, labels, spec }),
        3 => (
            proptest::sample::select(&["u", "a"][..]),
            proptest::option::of(labels()),
            spec(),
            proptest::sample::subsequence(SPEC_FIELDS, 0..3),
            proptest::bool::ANY,
        )
            .prop_map(|(manager, labels, spec, delete, patch)| Op::Update { manager, labels, spec, delete, patch }),
        1 => (proptest::bool::weighted(0.3), spec()).prop_map(|(force, spec)| Op::Hybrid { force, spec }),
    ]
    .boxed()
}

fn sequence() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..7)
}

// ---- the two sides

/// What one step left: the object (its user fields), the managed fields and the conflicts.
#[derive(Debug, PartialEq)]
struct Outcome {
    object: Value,
    managed: Vec<(String, String, Value)>,
    conflicts: Vec<(String, String)>,
    error: Option<String>,
}

impl Outcome {
    fn show(&self) -> String {
        json!({"object": self.object, "managed": self.managed, "conflicts": self.conflicts,
            "error": self.error})
        .to_string()
    }
}

/// The object with its associative lists and sets (as `schema` declares them) sorted: the
/// harness's structured-merge-diff (4.1.2) appends the applied items a live list lacks, where
/// kube-apiserver 1.32's (4.4.2) and kmeta-apiserver follow the applied order (`merge_order` in
/// `src/ssa.rs`, tested there on the library's own cases), so only the items are compared here,
/// not their order.
fn unordered(mut o: Value, schema: &Value) -> Value {
    fn walk(v: &mut Value, s: &Value) {
        match v {
            Value::Object(m) => {
                for (k, child) in m.iter_mut() {
                    let sub = s
                        .get("properties")
                        .and_then(|p| p.get(k))
                        .or_else(|| s.get("additionalProperties"));
                    if let Some(sub) = sub {
                        walk(child, sub);
                    }
                }
            }
            Value::Array(a) => {
                if let Some(items) = s.get("items") {
                    for i in a.iter_mut() {
                        walk(i, items);
                    }
                }
                if matches!(
                    s.get("x-kubernetes-list-type").and_then(Value::as_str),
                    Some("set" | "map")
                ) {
                    a.sort_by_key(canonical);
                }
            }
            _ => {}
        }
    }
    if let (Some(spec), Some(s)) = (o.get_mut("spec"), schema.pointer("/properties/spec")) {
        walk(spec, s);
    }
    o
}

/// JSON text with sorted keys.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, String> =
                m.iter().map(|(k, v)| (k, canonical(v))).collect();
            let fields: Vec<String> = sorted.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// apiVersion, kind, metadata.name, labels and annotations, spec.
fn user_fields(o: &Value) -> Value {
    let mut out = json!({"apiVersion": o["apiVersion"], "kind": o["kind"]});
    let mut md = json!({"name": o["metadata"]["name"]});
    for k in ["labels", "annotations"] {
        if let Some(v) = o["metadata"].get(k) {
            md[k] = v.clone();
        }
    }
    out["metadata"] = md;
    if let Some(s) = o.get("spec") {
        out["spec"] = s.clone();
    }
    out
}

fn managed_of(entries: &Value) -> Vec<(String, String, Value)> {
    let mut out: Vec<_> = entries
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("manager"), s("operation"), e["fieldsV1"].clone())
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

struct Harness {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Harness {
    fn start(bin: &Path) -> Harness {
        let mut child = Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the structured-merge-diff harness");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Harness {
            child,
            stdin,
            stdout,
        }
    }

    /// The outcome of every step of `ops` (with the objects sent) under structured-merge-diff.
    fn run(&mut self, schema: &Value, ops: &[Value]) -> Vec<Outcome> {
        let req = json!({"schema": schema, "ops": ops});
        writeln!(self.stdin, "{req}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let ans: Value = serde_json::from_str(&line).expect("harness answer");
        assert!(ans.get("error").is_none(), "harness: {ans}");
        ans["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Outcome {
                object: unordered(user_fields(&s["object"]), schema),
                managed: managed_of(&s["managed"]),
                conflicts: conflict_pairs(s["conflicts"].as_array().into_iter().flatten().map(
                    |c| {
                        (
                            c["manager"].as_str().unwrap_or_default().to_owned(),
                            c["field"].as_str().unwrap_or_default().to_owned(),
                        )
                    },
                )),
                error: s["error"].as_str().map(str::to_owned),
            })
            .collect()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn conflict_pairs(it: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut v: Vec<_> = it.collect();
    v.sort();
    v
}

/// kmeta-apiserver's side: runs the ops one by one, returning the body each op sent (what the
/// harness gets) and the outcome.
struct Kmeta {
    api: Api<DynamicObject>,
    kind: String,
    schema: Value,
    subtrees: Vec<Vec<String>>,
}

impl Kmeta {
    /// Creates the CRD of `kind` with this schema.
    async fn new(client: kube::Client, kind: &str, schema: Value) -> Kmeta {
        let crds: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
                "customresourcedefinitions",
            ),
        );
        let obj: DynamicObject = serde_json::from_value(crd(kind, &schema)).unwrap();
        crds.create(&PostParams::default(), &obj).await.unwrap();
        let plural = format!("{}s", kind.to_lowercase());
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), &plural);
        Kmeta {
            api: Api::namespaced_with(client, "default", &ar),
            kind: kind.to_owned(),
            subtrees: dynapply::preserve_unknown_subtrees(&schema),
            schema,
        }
    }
}

fn base(kind: &str, name: &str, labels: Option<&Value>, spec: &Value) -> Value {
    let mut o = json!({"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}});
    if let Some(l) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
        o["metadata"]["labels"] = l.clone();
    }
    if spec.as_object().is_some_and(|m| !m.is_empty()) {
        o["spec"] = spec.clone();
    }
    o
}

impl Kmeta {
    async fn live(&self, name: &str) -> Option<Value> {
        self.api
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// The body of `op` against the live object, and whether it is an apply (force).
    fn body(&self, name: &str, live: Option<&Value>, op: &Op) -> (Value, Option<bool>) {
        match op {
            Op::Apply {
                force,
                labels,
                spec,
                ..
            } => (base(&self.kind, name, Some(labels), spec), Some(*force)),
            Op::Put { spec, .. } => (base(&self.kind, name, None, spec), None),
            Op::Update { patch: true, .. } if live.is_some() => {
                let mut o = live.map(user_fields).unwrap_or_default();
                json_patch::merge(&mut o, &merge_patch(op));
                (o, None)
            }
            Op::Update {
                labels,
                spec,
                delete,
                ..
            } => {
                let mut o =
                    live.map_or_else(|| base(&self.kind, name, None, &json!({})), user_fields);
                if let Some(l) = labels {
                    o["metadata"]["labels"] = l.clone();
                    if l.as_object().is_some_and(Map::is_empty) {
                        o["metadata"].as_object_mut().unwrap().remove("labels");
                    }
                }
                let mut s = o.get("spec").cloned().unwrap_or(json!({}));
                for (k, v) in spec.as_object().unwrap() {
                    s[k] = v.clone();
                }
                for k in delete {
                    s.as_object_mut().unwrap().remove(*k);
                }
                o.as_object_mut().unwrap().remove("spec");
                if !s.as_object().unwrap().is_empty() {
                    o["spec"] = s;
                }
                (o, None)
            }
            Op::Hybrid { force, spec } => {
                let desired = base(&self.kind, name, None, spec);
                let body = match live {
                    Some(l) => dynapply::server_side_apply_body(
                        l,
                        &desired,
                        &dynapply::Options::default(),
                        &self.subtrees,
                    )
                    .unwrap(),
                    None => {
                        dynapply::prepare_create(&desired, &dynapply::Options::default()).unwrap()
                    }
                };
                (body, Some(*force))
            }
        }
    }

    /// Runs `op`; the outcome and the object after it.
    async fn step(
        &self,
        name: &str,
        live: Option<&Value>,
        op: &Op,
        body: &Value,
    ) -> (Outcome, Option<Value>) {
        let manager = match op {
            Op::Apply { manager, .. } | Op::Update { manager, .. } | Op::Put { manager, .. } => {
                *manager
            }
            Op::Hybrid { .. } => "hybrid",
        };
        let force = match op {
            Op::Apply { force, .. } | Op::Hybrid { force, .. } => Some(*force),
            Op::Update { .. } | Op::Put { .. } => None,
        };
        let res = match (force, live) {
            (Some(force), _) => {
                let mut pp = PatchParams::apply(manager);
                pp.force = force;
                self.api.patch(name, &pp, &Patch::Apply(body)).await
            }
            (None, None) => {
                let pp = PostParams {
                    field_manager: Some(manager.to_owned()),
                    ..Default::default()
                };
                let o: DynamicObject = serde_json::from_value(body.clone()).unwrap();
                self.api.create(&pp, &o).await
            }
            (None, Some(_)) if matches!(op, Op::Update { patch: true, .. }) => {
                let pp = PatchParams {
                    field_manager: Some(manager.to_owned()),
                    ..Default::default()
                };
                self.api
                    .patch(name, &pp, &Patch::Merge(merge_patch(op)))
                    .await
            }
            (None, Some(l)) => {
                let pp = PostParams {
                    field_manager: Some(manager.to_owned()),
                    ..Default::default()
                };
                let mut b = body.clone();
                b["metadata"]["resourceVersion"] = l["metadata"]["resourceVersion"].clone();
                let o: DynamicObject = serde_json::from_value(b).unwrap();
                self.api.replace(name, &pp, &o).await
            }
        };
        let (conflicts, error) = match res {
            Ok(_) => (vec![], None),
            Err(kube::Error::Api(e)) if e.code == 409 && e.message.starts_with("Apply failed") => {
                (conflicts_of(&e.message), None)
            }
            Err(e) => (vec![], Some(e.to_string())),
        };
        let after = self.live(name).await;
        let shown = after.clone().unwrap_or(Value::Null);
        let outcome = Outcome {
            object: unordered(user_fields(&shown), &self.schema),
            managed: managed_of(&shown["metadata"]["managedFields"]),
            conflicts,
            error,
        };
        (outcome, after)
    }
}

/// The JSON merge patch of an update: its spec fields, null for those it deletes, its labels.
fn merge_patch(op: &Op) -> Value {
    let Op::Update {
        labels,
        spec,
        delete,
        ..
    } = op
    else {
        return json!({});
    };
    let mut s = spec.clone();
    for k in delete {
        s[*k] = Value::Null;
    }
    let mut p = json!({"spec": s});
    if let Some(l) = labels {
        p["metadata"] = json!({"labels": l});
    }
    p
}

/// (manager, field) of each conflict, from kube-apiserver's message
/// (`conflict with "a": .spec.x` or `conflicts with "a":\n- .spec.x\n- .spec.y`).
fn conflicts_of(message: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut manager = String::new();
    let body = message.split_once(": ").map_or("", |(_, b)| b);
    for line in body.lines() {
        let line = line.trim();
        if let Some(rest) = line
            .strip_prefix("conflict with ")
            .or_else(|| line.strip_prefix("conflicts with "))
        {
            let (m, field) = rest.split_once(':').unwrap_or((rest, ""));
            manager = m.split('"').nth(1).unwrap_or_default().to_owned();
            let field = field.trim();
            if !field.is_empty() {
                out.push((manager.clone(), field.to_owned()));
            }
        } else if let Some(field) = line.strip_prefix("- ") {
            out.push((manager.clone(), field.to_owned()));
        }
    }
    conflict_pairs(out.into_iter())
}

// ---- running

fn go_harness() -> Result<PathBuf, String> {
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        return Err("no `go` (Debian: apt-get install golang-go)".into());
    }
    let smd = Path::new("/usr/share/gocode/src/sigs.k8s.io/structured-merge-diff/go.mod");
    if !smd.exists() {
        return Err(
            "no structured-merge-diff (apt-get install golang-k8s-sigs-structured-merge-diff-dev)"
                .into(),
        );
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| here.join("../target"), PathBuf::from);
    let out = target.join("smd-harness");
    let status = Command::new("bash")
        .arg(here.join("tests/smd/build.sh"))
        .arg(&out)
        .status()
        .map_err(|e| format!("run build.sh: {e}"))?;
    if !status.success() {
        return Err(format!("tests/smd/build.sh failed: {status}"));
    }
    Ok(out.join("smd-harness"))
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `ops` through both sides; the first step whose outcomes differ is the error.
fn compare(
    rt: &tokio::runtime::Runtime,
    kmeta: &Kmeta,
    go: &mut Harness,
    name: &str,
    ops: &[Op],
) -> Result<(), String> {
    let mut bodies = vec![];
    let mut ours = vec![];
    let mut live: Option<Value> = None;
    for op in ops {
        let (body, force) = kmeta.body(name, live.as_ref(), op);
        let (outcome, after) = rt.block_on(kmeta.step(name, live.as_ref(), op, &body));
        let manager = match op {
            Op::Apply { manager, .. } | Op::Update { manager, .. } | Op::Put { manager, .. } => {
                manager
            }
            Op::Hybrid { .. } => "hybrid",
        };
        bodies.push(json!({
            "op": if force.is_some() { "apply" } else { "update" },
            "manager": manager, "force": force.unwrap_or(false), "object": body,
        }));
        ours.push(outcome);
        live = after;
    }
    let theirs = go.run(&kmeta.schema, &bodies);
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        if o != t {
            return Err(format!(
                "step {i} differs\nbodies: {}\nkmeta-apiserver:       {}\nstructured-merge-diff: {}",
                serde_json::to_string_pretty(&bodies[..=i]).unwrap(),
                o.show(),
                t.show()
            ));
        }
    }
    Ok(())
}

/// The harness, built once per test process; `None` (after saying SKIPPED) where it cannot be
/// built, a failure under `KMETA_CI`.
fn harness_or_skip(test: &str) -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    match BUILT.get_or_init(go_harness) {
        Ok(b) => Some(b.clone()),
        Err(why) => {
            assert!(
                !std::env::var("KMETA_CI").is_ok_and(|v| v == "1"),
                "{test} is required under CI (KMETA_CI=1) but cannot run: {why}"
            );
            eprintln!("SKIPPED: {test}: {why}");
            None
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn ssa_matches_structured_merge_diff_or_skips_without_go() {
    let Some(bin) = harness_or_skip("ssa_matches_structured_merge_diff") else {
        return;
    };
    let rt = runtime();
    let server = rt.block_on(TestServer::start()).unwrap();
    let kmeta = rt.block_on(Kmeta::new(server.client(), "Widget", schema()));
    let go = RefCell::new(Harness::start(&bin));
    let deep = std::env::var_os("KMETA_TEST_DEEP").is_some_and(|v| v == "1");
    let cases = env_u64("KMETA_SSA_DIFF_CASES", if deep { 2000 } else { 400 });
    let seed = env_u64("KMETA_SSA_DIFF_SEED", 37);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: u32::try_from(cases).unwrap(),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let counter = Cell::new(0u64);
    let started = std::time::Instant::now();
    let result = runner.run(&sequence(), |ops| {
        counter.set(counter.get() + 1);
        let name = format!("w{}", counter.get());
        compare(&rt, &kmeta, &mut go.borrow_mut(), &name, &ops).map_err(TestCaseError::fail)
    });
    eprintln!(
        "ssa_differential: {} sequences (seed {seed}) in {:.1} s",
        counter.get(),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("kmeta-apiserver and structured-merge-diff differ (smallest case):\n{e}");
    }
}

// ---- structured-merge-diff's own test tables

/// The situations of structured-merge-diff's `merge/*_test.go` tables that one API version of a
/// custom resource can express (not: several versions, unions, recursive types, schema
/// changes), as sequences of our own on schemas of the same shapes, under `spec`
/// (`tests/smd/tables.json`).
fn tables() -> Vec<(String, Value, Vec<Op>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/smd/tables.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let leak = |v: &Value| -> &'static str {
        Box::leak(v.as_str().unwrap_or_default().to_owned().into_boxed_str())
    };
    doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let props = &doc["schemas"][t["schema"].as_str().unwrap()];
            let schema = json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": props}}});
            let ops = t["ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    let (manager, spec) = (leak(&o["manager"]), o["spec"].clone());
                    match o["op"].as_str() {
                        Some("put") => Op::Put { manager, spec },
                        op => Op::Apply {
                            manager,
                            force: op == Some("force"),
                            labels: json!({}),
                            spec,
                        },
                    }
                })
                .collect();
            (t["name"].as_str().unwrap().to_owned(), schema, ops)
        })
        .collect()
}

#[test]
fn ssa_matches_structured_merge_diff_tables_or_skips_without_go() {
    let Some(bin) = harness_or_skip("ssa_matches_structured_merge_diff_tables") else {
        return;
    };
    let rt = runtime();
    let server = rt.block_on(TestServer::start()).unwrap();
    let mut go = Harness::start(&bin);
    let mut failed = vec![];
    for (i, (name, schema, ops)) in tables().into_iter().enumerate() {
        let kmeta = rt.block_on(Kmeta::new(server.client(), &format!("T{i}"), schema));
        if let Err(e) = compare(&rt, &kmeta, &mut go, "t", &ops) {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
