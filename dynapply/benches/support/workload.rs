//! The workload, shared by `benches/merge.rs` and `examples/update_path.rs`: a
//! pod-template custom resource with C containers x E env vars, each container with one port,
//! one volumeMount and three args; observed = last-applied + status + server fields (+ the
//! annotation); `desired(.., 1)` changes every env value of `desired(.., 0)`.

use dynapply::{Options, prepare_create};
use serde_json::{Value, json};

/// The C x E sizes of the issue.
pub const SIZES: [(usize, usize); 3] = [(1, 5), (5, 20), (20, 50)];

/// The desired object; `generation` changes every env value.
pub fn desired(containers: usize, envs: usize, generation: u32) -> Value {
    let containers: Vec<Value> = (0..containers)
        .map(|c| {
            let env: Vec<Value> = (0..envs)
                .map(|e| json!({"name": format!("VAR_{e}"), "value": format!("value-{c}-{e}-g{generation}")}))
                .collect();
            json!({
                "name": format!("container-{c}"),
                "image": format!("registry.example.com/app-{c}:1.0.0"),
                "args": ["--listen=:8080", format!("--id={c}"), "--verbose"],
                "ports": [{"containerPort": 8080 + c, "name": format!("http-{c}")}],
                "volumeMounts": [{"name": format!("data-{c}"), "mountPath": format!("/data/{c}")}],
                "env": env,
            })
        })
        .collect();
    json!({
        "apiVersion": "ctl.example.com/v1",
        "kind": "PodSet",
        "metadata": {"name": "bench", "namespace": "default", "labels": {"app": "bench", "tier": "backend"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": containers}
            }
        }
    })
}

/// The live object: last-applied as created (with the annotation), plus server fields and status.
pub fn observed(last: &Value) -> Value {
    let mut o = prepare_create(last, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let meta = &mut o["metadata"];
    meta["uid"] = json!("0d4f9f4e-5c3e-4b8e-9a57-1e0d2c3b4a59");
    meta["resourceVersion"] = json!("918273");
    meta["generation"] = json!(7);
    meta["creationTimestamp"] = json!("2026-11-01T10:00:00Z");
    meta["managedFields"] = json!([{"manager": "kmeta", "operation": "Update", "apiVersion": "ctl.example.com/v1", "time": "2026-11-01T10:00:00Z"}]);
    o["status"] = json!({
        "observedGeneration": 7,
        "replicas": 3,
        "readyReplicas": 3,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T10:01:00Z", "reason": "AllReady"}]
    });
    o
}
