//! Opt-in server-side defaulting for built-in workload kinds, as mutating admission functions.
//!
//! The server stores objects schemaless and does not default by itself. Tests that need the
//! fields a real kube-apiserver fills in (so that a controller's apply logic must cope with them)
//! call [`register`]; the values are the upstream defaults of Kubernetes 1.32.

use crate::hooks::{Admission, AdmissionError, Operation};
use serde_json::{Map, Value, json};

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let m = v.as_object_mut()?;
    if !m.get(key).is_some_and(Value::is_object) {
        m.insert(key.to_string(), json!({}));
    }
    m.get_mut(key)?.as_object_mut()
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    // an image without a tag, or tagged :latest, is pulled Always; digests and other tags IfNotPresent
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        "IfNotPresent"
    } else {
        match name.rsplit_once(':') {
            None => "Always",
            Some((_, "latest")) => "Always",
            Some(_) => "IfNotPresent",
        }
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default(m, "imagePullPolicy", json!(image_pull_policy(&image)));
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    set_default(m, "resources", json!({}));
    if let Some(Value::Array(ports)) = m.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// Default a PodSpec in place. `restart_policy` is the kind's default (`Always` for pods and
/// workloads; jobs have none).
pub fn default_pod_spec(spec: &mut Value, restart_policy: Option<&str>) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = m.get_mut(list) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(rp) = restart_policy {
        set_default(m, "restartPolicy", json!(rp));
    }
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "securityContext", json!({}));
    set_default(m, "schedulerName", json!("default-scheduler"));
}

fn default_template(spec: &mut Map<String, Value>, restart_policy: Option<&str>) {
    if let Some(t) = spec.get_mut("template")
        && let Some(ps) = obj_mut(t, "spec")
    {
        let mut v = Value::Object(std::mem::take(ps));
        default_pod_spec(&mut v, restart_policy);
        if let Value::Object(m) = v {
            *ps = m;
        }
    }
}

/// Default an object of a built-in kind (`group`, `plural`) in place. Unknown kinds are untouched.
pub fn default_object(group: &str, plural: &str, obj: &mut Value) {
    if (group, plural) == ("", "pods") {
        if let Some(spec) = obj.get_mut("spec") {
            default_pod_spec(spec, Some("Always"));
        }
        return;
    }
    let default_spec: fn(&mut Map<String, Value>) = match (group, plural) {
        ("apps", "deployments") => deployment_spec,
        ("apps", "statefulsets") => statefulset_spec,
        ("apps", "daemonsets") => daemonset_spec,
        ("apps", "replicasets") => replicaset_spec,
        ("batch", "jobs") => job_spec,
        ("", "services") => service_spec,
        _ => return,
    };
    if let Some(s) = obj_mut(obj, "spec") {
        default_spec(s);
    }
}

fn deployment_spec(s: &mut Map<String, Value>) {
    set_default(s, "replicas", json!(1));
    set_default(s, "revisionHistoryLimit", json!(10));
    set_default(s, "progressDeadlineSeconds", json!(600));
    set_default(
        s,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
    );
    default_template(s, Some("Always"));
}

fn statefulset_spec(s: &mut Map<String, Value>) {
    set_default(s, "replicas", json!(1));
    set_default(s, "revisionHistoryLimit", json!(10));
    set_default(s, "podManagementPolicy", json!("OrderedReady"));
    set_default(
        s,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    set_default(
        s,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    default_template(s, Some("Always"));
}

fn daemonset_spec(s: &mut Map<String, Value>) {
    set_default(s, "revisionHistoryLimit", json!(10));
    set_default(
        s,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
    );
    default_template(s, Some("Always"));
}

fn replicaset_spec(s: &mut Map<String, Value>) {
    set_default(s, "replicas", json!(1));
    default_template(s, Some("Always"));
}

fn job_spec(s: &mut Map<String, Value>) {
    set_default(s, "parallelism", json!(1));
    set_default(s, "completions", json!(1));
    set_default(s, "backoffLimit", json!(6));
    set_default(s, "completionMode", json!("NonIndexed"));
    set_default(s, "suspend", json!(false));
    default_template(s, None);
}

fn service_spec(s: &mut Map<String, Value>) {
    set_default(s, "type", json!("ClusterIP"));
    set_default(s, "sessionAffinity", json!("None"));
    if let Some(Value::Array(ports)) = s.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
}

/// Kinds [`register`] defaults, as (group/version, plural).
pub const DEFAULTED: &[(&str, &str)] = &[
    ("v1", "pods"),
    ("v1", "services"),
    ("apps/v1", "deployments"),
    ("apps/v1", "statefulsets"),
    ("apps/v1", "daemonsets"),
    ("apps/v1", "replicasets"),
    ("batch/v1", "jobs"),
];

/// Register defaulting for the [`DEFAULTED`] kinds as mutating admission functions (on create and
/// update). Register them before other mutating functions to run first, as built-in defaulting
/// precedes webhooks on a real cluster.
pub fn register(adm: &Admission) {
    for (gv, plural) in DEFAULTED {
        let group = gv
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
            .to_string();
        let plural_owned = plural.to_string();
        adm.mutate(gv, plural, move |obj: &mut Value, _op: Operation| {
            default_object(&group, &plural_owned, obj);
            Ok::<(), AdmissionError>(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_defaults() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "r.io/x:1.2", "imagePullPolicy": "Never"}]}}}});
        default_object("apps", "deployments", &mut d);
        let cs = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs[0]["imagePullPolicy"], "Always");
        assert_eq!(cs[0]["ports"][0]["protocol"], "TCP");
        assert_eq!(cs[1]["imagePullPolicy"], "Never");
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        // idempotent
        let again = {
            let mut x = d.clone();
            default_object("apps", "deployments", &mut x);
            x
        };
        assert_eq!(again, d);
    }

    #[test]
    fn pull_policy_rules() {
        assert_eq!(image_pull_policy("nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
        assert_eq!(image_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(image_pull_policy("localhost:5000/nginx:1"), "IfNotPresent");
        assert_eq!(image_pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn service_defaults() {
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        default_object("", "services", &mut s);
        assert_eq!(
            s["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(s["spec"]["type"], "ClusterIP");
    }
}
