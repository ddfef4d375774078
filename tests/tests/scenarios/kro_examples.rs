//! kro's own `examples/kubernetes`, applied unchanged (`tests/data/kro/`, copied from kro with
//! their source named in a header): each RGD is served by `kmeta::kro::serve`, its instance file
//! created as `kubectl apply -f instance.yaml` would (in `default` when it names no namespace),
//! and the children and the instance's status are those kro's example, its README and its e2e
//! tests say. The test plays the controllers kro's examples rely on (a Deployment's
//! availableReplicas, a Job's completionTime, an Ingress's load balancer) by writing their status.

use anyhow::Context as _;
use kmeta::ManagerConfig;
use kmeta_tests::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Reads `tests/data/kro/<path>` (YAML). A key repeated in a mapping keeps its last value:
/// kro's `core-dns.yaml` repeats its Service's `selector`, which a strict reader refuses.
fn example(path: &str) -> anyhow::Result<Value> {
    let file = format!("{}/data/kro/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::LastWins,
    };
    serde_saphyr::from_str_with_options(&text, options).with_context(|| format!("parsing {file}"))
}

/// A scenario serving kro's examples: the RGD CRD installed, `kmeta::kro::serve` running (its
/// task aborted when dropped) and the controller running every CompositeController generated for
/// the RGDs named `rgds` (kro's examples carry no scenario label). The serving task ends with
/// the test's runtime when a scenario fails.
struct Kro {
    s: Running,
    serving: tokio::task::JoinHandle<()>,
}

impl Kro {
    async fn start(name: &str, rgds: &[&str]) -> anyhow::Result<Kro> {
        let mut s = Scenario::new(name).prepare().await?;
        s.create_crd(kmeta::kro::resource_graph_definition_crd())
            .await?;
        let client = s.client.clone();
        let serving = tokio::spawn(async move {
            if let Err(e) = kmeta::kro::serve(client).await {
                eprintln!("kro::serve: {e}");
            }
        });
        let selector = format!(
            "kro.run/resource-graph-definition-name in ({})",
            rgds.join(",")
        );
        s.start_controller_with(ManagerConfig::default().target_label_selector(Some(selector)));
        ensure_namespace(&s, "default").await?;
        Ok(Kro { s, serving })
    }

    /// Applies the RGD in `path` and waits until it is Active and its instance CRD Established;
    /// the RGD as served.
    async fn rgd(&mut self, path: &str) -> anyhow::Result<Value> {
        self.rgd_object(example(path)?).await
    }

    /// As [`Kro::rgd`], for an RGD written here.
    async fn rgd_object(&mut self, rgd: Value) -> anyhow::Result<Value> {
        let name = rgd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.s.create("resourcegraphdefinitions", rgd).await?;
        let rgds = self.s.api(
            "kro.run/v1alpha1",
            "ResourceGraphDefinition",
            "resourcegraphdefinitions",
            None,
        );
        let served = self
            .s
            .wait_for(&rgds, &name, &format!("RGD {name} Active"), |r| {
                r["status"]["state"] == "Active"
            })
            .await;
        let served = match served {
            Ok(r) => r,
            Err(e) => {
                let now = self.s.get(&rgds, &name).await?;
                anyhow::bail!("{e:#}; the RGD: {}", now.unwrap_or_default());
            }
        };
        let crds = self.s.api(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            None,
        );
        let kind = served["spec"]["schema"]["kind"]
            .as_str()
            .unwrap_or_default();
        let crd = format!("{}.kro.run", kmeta::kro::plural(kind));
        self.s
            .wait_for(&crds, &crd, "the instance CRD Established", |c| {
                condition(c, "Established").is_some_and(|c| c["status"] == "True")
            })
            .await?;
        Ok(served)
    }

    /// Creates the instance in `path` (in `default` when it names no namespace); its API.
    async fn instance(&self, path: &str) -> anyhow::Result<(Api<DynamicObject>, String)> {
        self.instance_in(path, "default").await
    }

    /// Creates the instance in `path` (in `ns` when it names no namespace); its API.
    async fn instance_in(
        &self,
        path: &str,
        ns: &str,
    ) -> anyhow::Result<(Api<DynamicObject>, String)> {
        let mut inst = example(path)?;
        if inst["metadata"]["namespace"].is_null() {
            inst["metadata"]["namespace"] = json!(ns);
        }
        let kind = inst["kind"].as_str().unwrap_or_default().to_owned();
        let ns = inst["metadata"]["namespace"].as_str().unwrap_or_default();
        let api = self.s.api(
            "kro.run/v1alpha1",
            &kind,
            &kmeta::kro::plural(&kind),
            Some(ns),
        );
        let name = inst["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        api.create(&PostParams::default(), &obj(inst)?)
            .await
            .with_context(|| format!("creating {kind} {name}"))?;
        Ok((api, name))
    }

    /// An API of `default` (where kro's examples live).
    fn api(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        self.s.api(api_version, kind, plural, Some("default"))
    }

    async fn wait(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
    ) -> anyhow::Result<Value> {
        self.s.wait_for(api, name, what, |_| true).await
    }

    /// Writes `status` as the object's controller would.
    async fn report(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        status: Value,
    ) -> anyhow::Result<()> {
        let patch = json!({ "status": status });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("writing the status of {name}"))?;
        Ok(())
    }

    /// Waits until the instance's `state` is `state` and `ok` holds for it.
    async fn instance_where(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        state: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let what = format!("instance {name} {state}");
        let got = self
            .s
            .wait_for(api, name, &what, |i| i["status"]["state"] == state && ok(i))
            .await;
        match got {
            Ok(i) => Ok(i),
            Err(e) => {
                let now = self.s.get(api, name).await?;
                anyhow::bail!("{e:#}; the instance: {}", now.unwrap_or_default())
            }
        }
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.serving.abort();
        self.s.finish().await
    }
}

/// Creates namespace `name` unless it exists.
async fn ensure_namespace(s: &Running, name: &str) -> anyhow::Result<()> {
    let api = s.api("v1", "Namespace", "namespaces", None);
    if s.get(&api, name).await?.is_none() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        api.create(&PostParams::default(), &obj(ns)?).await?;
    }
    Ok(())
}

fn deployments(k: &Kro) -> Api<DynamicObject> {
    k.api("apps/v1", "Deployment", "deployments")
}

fn services(k: &Kro) -> Api<DynamicObject> {
    k.api("v1", "Service", "services")
}

fn ingresses(k: &Kro) -> Api<DynamicObject> {
    k.api("networking.k8s.io/v1", "Ingress", "ingresses")
}

fn config_maps(k: &Kro) -> Api<DynamicObject> {
    k.api("v1", "ConfigMap", "configmaps")
}

fn service_accounts(k: &Kro) -> Api<DynamicObject> {
    k.api("v1", "ServiceAccount", "serviceaccounts")
}

fn cluster_roles(k: &Kro) -> Api<DynamicObject> {
    k.s.api(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
        None,
    )
}

fn cluster_role_bindings(k: &Kro) -> Api<DynamicObject> {
    let av = "rbac.authorization.k8s.io/v1";
    k.s.api(av, "ClusterRoleBinding", "clusterrolebindings", None)
}

fn ready(i: &Value) -> bool {
    condition(i, "Ready").is_some_and(|c| c["status"] == "True")
}

/// `webapp`: the Deployment from the instance and the schema's defaults; the Service and the
/// Ingress (which read the Deployment and the Service) once the Deployment is ready
/// (`readyWhen`); the instance ACTIVE with its availableReplicas, and its url once the Ingress
/// has a load balancer (kro's README: `test-app ACTIVE`).
#[tokio::test]
async fn webapp() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-webapp", &["webapp.kro.run"]).await?;
    let rgd = k.rgd("webapp/rg.yaml").await?;
    assert_eq!(
        rgd["status"]["topologicalOrder"],
        json!(["deployment", "service", "ingress"])
    );
    let (webapps, name) = k.instance("webapp/instance.yaml").await?;
    let d = k
        .wait(&deployments(&k), "test-app", "the Deployment")
        .await?;
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (&c["name"], &c["image"], &c["ports"][0]["containerPort"]),
        (&json!("webapp-demo"), &json!("nginx"), &json!(80)),
        "{d}"
    );
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "default"
    );
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/name"],
        "test-app"
    );
    assert_eq!(d["metadata"]["labels"]["kro.run/node-id"], "deployment");
    // the Service reads the Deployment, which is not ready: it waits
    k.instance_where(&webapps, &name, "IN_PROGRESS", |_| true)
        .await?;
    assert!(k.s.get(&services(&k), "test-app").await?.is_none());

    k.report(
        &deployments(&k),
        "test-app",
        json!({"availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}]}),
    )
    .await?;
    let svc = k.wait(&services(&k), "test-app", "the Service").await?;
    assert_eq!(svc["spec"]["selector"], json!({"app": "test-app"}));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
    let ing = k.wait(&ingresses(&k), "test-app", "the Ingress").await?;
    let backend = &ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], "test-app", "{ing}");
    assert_eq!(
        ing["metadata"]["annotations"]["kubernetes.io/ingress.class"],
        "alb"
    );
    let i = k
        .instance_where(&webapps, &name, "ACTIVE", |i| {
            ready(i) && i["status"]["availableReplicas"] == 1
        })
        .await?;
    assert_eq!(i["status"]["deploymentConditions"][0]["type"], "Available");
    assert!(
        i["status"].get("url").is_none(),
        "no load balancer yet: {i}"
    );

    let lb = json!({"loadBalancer": {"ingress": [{"hostname": "test-app.elb.example"}]}});
    k.report(&ingresses(&k), "test-app", lb).await?;
    k.instance_where(&webapps, &name, "ACTIVE", |i| {
        i["status"]["url"] == "test-app.elb.example"
    })
    .await?;
    k.finish().await
}

/// `defaults`: no resources; the instance CRD fills the SimpleSchema's defaults (a list, a
/// string, a bool, an integer, and inside `config: {}`) and requires `required`; the instance
/// is ACTIVE at once.
#[tokio::test]
async fn defaults() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-defaults", &["somethings.kro.run"]).await?;
    k.rgd("defaults/rg.yaml").await?;
    let (things, name) = k.instance("defaults/instance.yaml").await?;
    let i = k.instance_where(&things, &name, "ACTIVE", ready).await?;
    assert_eq!(
        i["spec"],
        json!({"name": "app3", "required": 15, "elements": ["a", "b", "c", "d"],
            "element": "e", "enabled": true, "number": 100,
            "config": {"field2": 200, "field3": 2002}}),
        "{i}"
    );
    let mut missing = example("defaults/instance.yaml")?;
    missing["metadata"] = json!({"name": "no-required", "namespace": "default"});
    missing["spec"]
        .as_object_mut()
        .map(|m| m.remove("required"));
    let refused = things.create(&PostParams::default(), &obj(missing)?).await;
    let err = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        err.contains("required"),
        "an instance without `required`: {err}"
    );
    k.finish().await
}

/// `job-example`: a Job and a Deployment side by side; the instance is ACTIVE only once the
/// Job has a completionTime (its `readyWhen`).
#[tokio::test]
async fn job_example() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-job", &["job-deployment.kro.run"]).await?;
    k.rgd("job-example/rgd.yaml").await?;
    let (jds, name) = k.instance("job-example/instance.yaml").await?;
    let jobs = k.api("batch/v1", "Job", "jobs");
    let job = k
        .wait(&jobs, "example-job-deployment-job", "the Job")
        .await?;
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], json!(["sleep", "20"]), "{job}");
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let d = k
        .wait(&deployments(&k), "example-job-deployment", "the Deployment")
        .await?;
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["selector"]["matchLabels"]["app"],
        "example-job-deployment"
    );
    k.instance_where(&jds, &name, "IN_PROGRESS", |_| true)
        .await?;

    let done = json!({"completionTime": "2026-01-01T00:00:20Z", "succeeded": 1});
    k.report(&jobs, "example-job-deployment-job", done).await?;
    k.instance_where(&jds, &name, "ACTIVE", ready).await?;
    k.finish().await
}

/// `additionalPrinterColumns`: the instance CRD carries the RGD's columns; the Service takes the
/// Deployment's selector once the Deployment exists; the status reads the Deployment's.
#[tokio::test]
async fn additional_printer_columns() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-columns", &["application"]).await?;
    let rgd = k.rgd("additionalPrinterColumns/rg.yaml").await?;
    let crds = k.s.api(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let crd = k
        .wait(&crds, "applications.kro.run", "the instance CRD")
        .await?;
    assert_eq!(
        crd["spec"]["versions"][0]["additionalPrinterColumns"],
        rgd["spec"]["schema"]["additionalPrinterColumns"]
    );
    let (apps, name) = k.instance("additionalPrinterColumns/instance.yaml").await?;
    let d = k
        .wait(&deployments(&k), "test-app", "the Deployment")
        .await?;
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        containers(&d),
        [("test-app".to_owned(), "nginx".to_owned())]
    );
    let svc = k
        .wait(&services(&k), "test-app-service", "the Service")
        .await?;
    assert_eq!(svc["spec"]["selector"], json!({"app": "test-app"}));
    k.report(
        &deployments(&k),
        "test-app",
        json!({"availableReplicas": 3}),
    )
    .await?;
    k.instance_where(&apps, &name, "ACTIVE", |i| {
        ready(i) && i["status"]["availableReplicas"] == 3
    })
    .await?;
    k.finish().await
}

/// `dogsvscats`: the vote, result and worker apps' RGDs served side by side, each instance's
/// Deployment with its environment, and the vote and result apps' Service and Ingress once
/// their Deployment is ready; every instance ACTIVE with its status.
#[tokio::test]
async fn dogsvscats() -> anyhow::Result<()> {
    let apps = ["vote-app", "result-app", "worker-app"];
    let names: Vec<String> = apps.iter().map(|a| format!("{a}.kro.run")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut k = Kro::start("kro-dogsvscats", &names).await?;
    let mut instances = Vec::new();
    for app in apps {
        k.rgd(&format!("dogsvscats/{app}/rg.yaml")).await?;
        instances.push(
            k.instance(&format!("dogsvscats/{app}/instance.yaml"))
                .await?,
        );
    }
    let vote = k
        .wait(
            &deployments(&k),
            "vote-app-demo-vote",
            "the vote Deployment",
        )
        .await?;
    assert_eq!(vote["spec"]["replicas"], 2);
    let env = &vote["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name": "REDIS_HOST", "value": "your-redis-endpoint-here"}])
    );
    let result = k
        .wait(
            &deployments(&k),
            "result-app-demo-result",
            "the result Deployment",
        )
        .await?;
    let env = &result["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env[2]["valueFrom"]["secretKeyRef"]["name"], "your-postgres-secret-name",
        "{env}"
    );
    let worker = k
        .wait(
            &deployments(&k),
            "worker-app-demo-worker",
            "the worker Deployment",
        )
        .await?;
    assert_eq!(
        containers(&worker),
        [("worker".to_owned(), "dogsvscats/worker:latest".to_owned())]
    );

    for (d, n) in [
        ("vote-app-demo-vote", 2),
        ("result-app-demo-result", 1),
        ("worker-app-demo-worker", 1),
    ] {
        k.report(&deployments(&k), d, json!({"availableReplicas": n}))
            .await?;
    }
    for app in ["vote-app-demo-vote", "result-app-demo-result"] {
        let svc = format!("{app}-service");
        k.wait(&services(&k), &svc, "the Service").await?;
        let ing = k
            .wait(&ingresses(&k), &format!("{app}-ingress"), "the Ingress")
            .await?;
        let backend = &ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"];
        assert_eq!(backend, &json!(svc));
    }
    for (i, (api, name)) in instances.iter().enumerate() {
        let inst = k.instance_where(api, name, "ACTIVE", ready).await?;
        if i < 2 {
            let svc = format!("{}-{}-service", name, ["vote", "result"][i]);
            assert_eq!(inst["status"]["serviceName"], json!(svc), "{inst}");
        }
    }
    k.finish().await
}

/// `cel-functions`: kro's own CEL libraries (`random`, `json`, `hash`) beside the Kubernetes
/// ones (strings, lists, quantity, base64) in the Deployment's environment and the Service's
/// labels; the status multiplies the Deployment's availableReplicas.
#[tokio::test]
async fn cel_functions() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-cel-functions", &["somethings.kro.run"]).await?;
    k.rgd("cel-functions/rg.yaml").await?;
    let (things, name) = k.instance("cel-functions/instance.yaml").await?;
    let d = k.wait(&deployments(&k), "app", "the Deployment").await?;
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "app-deployment");
    let env: std::collections::BTreeMap<String, String> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let v = e["value"].as_str().unwrap_or_default().to_owned();
            (e["name"].as_str().unwrap_or_default().to_owned(), v)
        })
        .collect();
    let want = [
        ("FULL_DNS_NAME", "a.b.c.d.example.com"),
        ("DNS_FIRST_PART", "a"),
        ("DNS_PARTIALS", "a"),
        ("LISTS_SUM", "600"),
        ("JSON_UNMARSHAL_EXAMPLE", "exampleJSONValue"),
        ("JSON_MARSHAL_EXAMPLE", r#"{"name":"app"}"#),
        ("QUANTITY_COMPARISON", "small"),
        ("HASH_FNV64A_BASE64", "50+nGQVqg4w="),
        (
            "HASH_SHA256_BASE64",
            "oXLO3K5HR0thXFTVEKXYSo3qMDLpWFh0MLQTU4vj8zM=",
        ),
    ];
    for (k, v) in want {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k} in {env:?}");
    }
    let random = env.get("RANDOM_SEEDED_STRING").cloned().unwrap_or_default();
    assert!(
        random.len() == 10
            && random
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
        "ten alphanumerics seeded by the instance's uid: {random:?}"
    );
    let svc = k.wait(&services(&k), "app", "the Service").await?;
    let labels = &svc["metadata"]["labels"];
    assert_eq!(
        (&labels["dns"], &labels["partials"], &labels["first_part"]),
        (&json!("a.b.c.d.example.com"), &json!("a.b.c"), &json!("a")),
        "{svc}"
    );
    k.report(&deployments(&k), "app", json!({"availableReplicas": 1}))
        .await?;
    k.instance_where(&things, &name, "ACTIVE", |i| {
        i["status"]["availableReplicas"] == 10
    })
    .await?;
    k.finish().await
}

/// `core-dns`: its namespaced instance makes, beside its ServiceAccount, ConfigMap, Deployment
/// and Service in `default`, a ClusterRole and a ClusterRoleBinding (cluster-scoped), which an
/// owner reference of a namespaced instance cannot hold: as kro does, kmeta ties them to the
/// instance by kro's labels (its UID in `kro.run/instance-id`), with no owner reference; the
/// children in the instance's namespace keep theirs. Every child carries kro's apply order.
#[tokio::test]
async fn core_dns_makes_its_cluster_scoped_children_tied_by_labels() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-coredns", &["coredns.kro.run"]).await?;
    k.rgd("core-dns/core-dns.yaml").await?;
    let (dns, name) = k.instance("core-dns/coredns-instance.yaml").await?;
    let i = k.instance_where(&dns, &name, "ACTIVE", ready).await?;
    let uid = i["metadata"]["uid"].clone();
    let role = k
        .wait(&cluster_roles(&k), "mynameis", "the ClusterRole")
        .await?;
    let binding = k
        .wait(
            &cluster_role_bindings(&k),
            "mynameis",
            "the ClusterRoleBinding",
        )
        .await?;
    for o in [&role, &binding] {
        let labels = &o["metadata"]["labels"];
        assert_eq!(labels["kro.run/instance-id"], uid, "{o}");
        assert_eq!(labels["kro.run/instance-name"], "mynameis", "{o}");
        assert_eq!(labels["kro.run/instance-namespace"], "default", "{o}");
        assert!(o["metadata"].get("ownerReferences").is_none(), "{o}");
    }
    assert_eq!(role["metadata"]["labels"]["k8s-app"], "kube-dns");
    assert_eq!(role["rules"][2]["resources"], json!(["nodes"]));
    assert_eq!(binding["roleRef"]["name"], "mynameis");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "mynameis", "namespace": "default"})
    );
    let d = k
        .wait(&deployments(&k), "mynameis", "the Deployment")
        .await?;
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "mynameis"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "coredns/coredns:1.11.3"
    );
    assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], uid, "{d}");
    // kro's apply order: the resources nothing reads first, then the ones they read
    assert_eq!(
        d["metadata"]["annotations"]["internal.kro.run/apply-order"],
        "2"
    );
    assert_eq!(
        role["metadata"]["annotations"]["internal.kro.run/apply-order"],
        "1"
    );
    let svc = k.wait(&services(&k), "mynameis", "the Service").await?;
    assert_eq!(svc["spec"]["clusterIP"], "10.100.123.45");
    k.wait(&config_maps(&k), "mynameis", "the ConfigMap")
        .await?;
    // `kmeta trace` lists the label-owned children beside the others
    let discovery = kmeta::steer::discover(&k.s.client).await?;
    let target = kmeta::steer::resolve_in(&discovery, "corednsdeployments/mynameis", "default")?;
    let t = kmeta::trace::trace_parent(&k.s.client, &discovery, &target).await?;
    let mut kinds: Vec<&str> = t.children.iter().map(|c| c.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Service",
            "ServiceAccount"
        ]
    );
    k.finish().await
}

/// Deleting a `core-dns` instance deletes its children as kro does, the last made first: the
/// ones nothing reads (ClusterRoleBinding, ConfigMap, Deployment, Service, apply order 2), and
/// only once they are gone the ClusterRole and the ServiceAccount they read (order 1); then
/// kro's finalizer leaves the instance. A finalizer of the test holds the ClusterRoleBinding
/// while the rest of its order is deleted: the ClusterRole waits for it.
#[tokio::test]
async fn core_dns_children_are_deleted_last_made_first() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-coredns-delete", &["coredns.kro.run"]).await?;
    k.rgd("core-dns/core-dns.yaml").await?;
    let (dns, name) = k.instance("core-dns/coredns-instance.yaml").await?;
    let i = k.instance_where(&dns, &name, "ACTIVE", ready).await?;
    assert!(
        i["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("kro.run/finalizer"))),
        "{i}"
    );
    let labels = &i["metadata"]["labels"];
    assert_eq!(labels["kro.run/owned"], "true", "{i}");
    assert_eq!(
        labels["kro.run/resource-graph-definition-name"],
        "coredns.kro.run"
    );
    assert!(
        labels["kro.run/resource-graph-definition-id"].is_string(),
        "{i}"
    );
    let bindings = cluster_role_bindings(&k);
    k.s.merge_patch(
        &bindings,
        "mynameis",
        json!({"metadata": {"finalizers": ["test.kmeta.dev/hold"]}}),
    )
    .await?;
    dns.delete(&name, &Default::default()).await?;
    k.s.wait_gone(&deployments(&k), "mynameis", "the Deployment deleted first")
        .await?;
    k.s.wait_gone(&config_maps(&k), "mynameis", "the ConfigMap deleted first")
        .await?;
    k.s.wait_for(
        &bindings,
        "mynameis",
        "the ClusterRoleBinding being deleted",
        |b| b["metadata"]["deletionTimestamp"].is_string(),
    )
    .await?;
    k.s.wait_gone(&services(&k), "mynameis", "the Service deleted first")
        .await?;
    // the whole first order is deleted but for the held binding: the next order waits for it
    assert!(k.s.get(&cluster_roles(&k), "mynameis").await?.is_some());
    assert!(k.s.get(&service_accounts(&k), "mynameis").await?.is_some());
    assert!(
        k.s.get(&dns, &name).await?.is_some(),
        "kro's finalizer holds it"
    );
    k.s.merge_patch(
        &bindings,
        "mynameis",
        json!({"metadata": {"finalizers": null}}),
    )
    .await?;
    k.s.wait_gone(
        &cluster_roles(&k),
        "mynameis",
        "the ClusterRole deleted next",
    )
    .await?;
    k.s.wait_gone(
        &service_accounts(&k),
        "mynameis",
        "the ServiceAccount deleted next",
    )
    .await?;
    k.s.wait_gone(&dns, &name, "the instance gone").await?;
    k.finish().await
}

/// `saas-multi-tenant`: an RGD whose resources are instances of two other RGDs (the Tenant makes
/// its TenantEnvironment and TenantApplication), and what kro's README says they make: the
/// tenant's Namespace (cluster-scoped) with its ResourceQuota and NetworkPolicy, and the
/// application's Deployment and Service in the tenant's namespace — all tied to their
/// instances by label, none of which an owner reference could hold.
#[tokio::test]
async fn saas_multi_tenant_makes_the_tenant_namespace_and_its_children() -> anyhow::Result<()> {
    let rgds = [
        "tenantenvironment.kro.run",
        "tenantapplication.kro.run",
        "tenant.kro.run",
    ];
    let mut k = Kro::start("kro-saas", &rgds).await?;
    for f in [
        "tenant-environment-rgd",
        "tenant-application-rgd",
        "tenant-rgd",
    ] {
        k.rgd(&format!("saas-multi-tenant/{f}.yaml")).await?;
    }
    let (tenants, name) = k.instance("saas-multi-tenant/tenant-instance.yaml").await?;
    let envs = k.api(
        "kro.run/v1alpha1",
        "TenantEnvironment",
        "tenantenvironments",
    );
    let apps = k.api(
        "kro.run/v1alpha1",
        "TenantApplication",
        "tenantapplications",
    );
    let env = k.wait(&envs, "tenant001", "the TenantEnvironment").await?;
    assert_eq!(env["spec"]["tenantId"], "tenant001");
    let app = k.wait(&apps, "tenant001", "the TenantApplication").await?;
    assert_eq!(
        (&app["spec"]["image"], &app["spec"]["replicas"]),
        (&json!("nginx"), &json!(2)),
        "the Tenant's defaults reach it: {app}"
    );
    let namespaces = k.s.api("v1", "Namespace", "namespaces", None);
    let ns = k
        .wait(&namespaces, "tenant001", "the tenant's Namespace")
        .await?;
    assert_eq!(ns["metadata"]["labels"]["name"], "tenant001");
    assert_eq!(
        ns["metadata"]["labels"]["kro.run/instance-id"],
        env["metadata"]["uid"]
    );
    let in_tenant =
        |av: &str, kind: &str, plural: &str| k.s.api(av, kind, plural, Some("tenant001"));
    let quota = in_tenant("v1", "ResourceQuota", "resourcequotas");
    let q = k
        .wait(&quota, "tenant001-quota", "the ResourceQuota")
        .await?;
    assert_eq!(q["spec"]["hard"]["limits.cpu"], "2");
    let policies = in_tenant("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies");
    k.wait(&policies, "tenant001-isolation", "the NetworkPolicy")
        .await?;
    let deployments = in_tenant("apps/v1", "Deployment", "deployments");
    let d = k
        .wait(
            &deployments,
            "tenant001-deployment",
            "the tenant's Deployment",
        )
        .await?;
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx"
    );
    assert_eq!(
        d["metadata"]["labels"]["kro.run/instance-id"],
        app["metadata"]["uid"]
    );
    assert!(d["metadata"].get("ownerReferences").is_none(), "{d}");
    let services = in_tenant("v1", "Service", "services");
    k.wait(&services, "tenant001-service", "the tenant's Service")
        .await?;
    for api in [&envs, &apps] {
        k.instance_where(api, "tenant001", "ACTIVE", ready).await?;
    }
    k.instance_where(&tenants, &name, "ACTIVE", ready).await?;
    k.finish().await
}

/// A label-owned child (here in another namespace than its instance) no longer desired is
/// deleted, as a child owned by reference is; an object at a child's name that carries another
/// instance's UID is never taken: the sync fails naming it and leaves it as it is.
#[tokio::test]
async fn a_label_owned_child_no_longer_desired_is_deleted_and_anothers_never_taken()
-> anyhow::Result<()> {
    let mut k = Kro::start("kro-label-owned", &["mirrors.kro.run"]).await?;
    ensure_namespace(&k.s, "elsewhere").await?;
    let rgd = json!({"apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": "mirrors.kro.run"},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "Mirror",
            "spec": {"copy": "boolean | default=true", "target": "string | default=elsewhere"}},
        "resources": [{"id": "copy", "includeWhen": ["${schema.spec.copy}"],
            "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.metadata.name}",
                    "namespace": "${schema.spec.target}"},
                "data": {"from": "${schema.metadata.namespace}"}}}]}});
    k.rgd_object(rgd).await?;
    let mirrors = k.api("kro.run/v1alpha1", "Mirror", "mirrors");
    let make = |name: &str| {
        json!({"apiVersion": "kro.run/v1alpha1", "kind": "Mirror",
        "metadata": {"name": name, "namespace": "default"}, "spec": {}})
    };
    mirrors
        .create(&PostParams::default(), &obj(make("one"))?)
        .await?;
    let elsewhere = k.s.api("v1", "ConfigMap", "configmaps", Some("elsewhere"));
    let copy = k
        .wait(&elsewhere, "one", "the copy in another namespace")
        .await?;
    assert_eq!(copy["data"]["from"], "default");
    k.s.merge_patch(&mirrors, "one", json!({"spec": {"copy": false}}))
        .await?;
    k.s.wait_gone(&elsewhere, "one", "the copy no longer desired deleted")
        .await?;

    // another instance's object at the name of this one's child
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "two", "namespace": "elsewhere",
            "labels": {"kro.run/instance-id": "someone-else", "kro.run/instance-name": "two",
                "kro.run/instance-namespace": "default"}},
        "data": {"from": "them"}});
    elsewhere
        .create(&PostParams::default(), &obj(theirs)?)
        .await?;
    mirrors
        .create(&PostParams::default(), &obj(make("two"))?)
        .await?;
    let what = "the sync failing on the object it does not own";
    let i =
        k.s.wait_for(&mirrors, "two", what, |i| {
            condition(i, "Synced").is_some_and(|c| c["status"] == "False")
        })
        .await?;
    let msg = condition(&i, "Synced").map(|c| c["message"].to_string());
    let msg = msg.unwrap_or_default();
    assert!(
        msg.contains("two") && msg.contains("another controller owns"),
        "{msg}"
    );
    let kept = k.s.get(&elsewhere, "two").await?.unwrap_or_default();
    assert_eq!(kept["data"]["from"], "them", "never taken: {kept}");
    assert_eq!(
        kept["metadata"]["labels"]["kro.run/instance-id"],
        "someone-else"
    );
    // deleting this instance never deletes the other's object
    mirrors.delete("two", &Default::default()).await?;
    k.s.wait_gone(&mirrors, "two", "the instance gone").await?;
    assert!(k.s.get(&elsewhere, "two").await?.is_some());
    k.finish().await
}

/// kro's e2e test `check-external-references`, its files unchanged: the instance (in the
/// scenario's namespace, as chainsaw's own) reads a ConfigMap in `default` through
/// `externalRef`; while it does not exist the instance is IN_PROGRESS and neither it nor the
/// owned ConfigMap is made; once it is created the instance is ACTIVE and Ready and the owned
/// ConfigMap carries its value. kmeta reads it as a related object, so a later change of it
/// reaches the owned ConfigMap too.
#[tokio::test]
async fn external_references_are_read_and_waited_for() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-external", &["check-external-references"]).await?;
    k.rgd("e2e/check-external-references/rgd.yaml").await?;
    let ns = k.s.ns.clone();
    let (tests, name) = k
        .instance_in("e2e/check-external-references/instance.yaml", &ns)
        .await?;
    let i = k
        .instance_where(&tests, &name, "IN_PROGRESS", |_| true)
        .await?;
    assert_eq!(i["spec"]["name"], "foobar");
    let owned = k.s.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let input = k.api("v1", "ConfigMap", "configmaps");
    assert!(
        k.s.get(&owned, "config").await?.is_none(),
        "the owned ConfigMap waits"
    );
    assert!(
        k.s.get(&input, "check-external-references")
            .await?
            .is_none()
    );

    let cm = example("e2e/check-external-references/configmap.yaml")?;
    input.create(&PostParams::default(), &obj(cm)?).await?;
    k.instance_where(&tests, &name, "ACTIVE", ready).await?;
    let config = k.wait(&owned, "config", "the owned ConfigMap").await?;
    assert_eq!(config["data"]["ECHO_VALUE"], "Hello, World!");
    assert!(
        k.s.get(&input, "check-external-references")
            .await?
            .is_some_and(|c| { c["metadata"].get("ownerReferences").is_none() }),
        "the external ConfigMap is read, never adopted"
    );

    let changed = json!({"data": {"ECHO_VALUE": "Hello again"}});
    k.s.merge_patch(&input, "check-external-references", changed)
        .await?;
    k.s.wait_for(&owned, "config", "the owned ConfigMap follows", |c| {
        c["data"]["ECHO_VALUE"] == "Hello again"
    })
    .await?;
    k.finish().await
}

/// Not one of kro's files: an `externalRef` by `metadata.selector` (kro's external collection)
/// across every namespace, read as a list; the owned ConfigMap lists the selected ConfigMaps
/// (by namespace, then name) and follows when one more is labelled.
#[tokio::test]
async fn external_collections_are_read_by_selector() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-external-selector", &["team-index"]).await?;
    let rgd = json!({"apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": "team-index"},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "TeamIndex",
                "spec": {"team": "string"}, "status": {"members": "${size(peers)}"}},
            "resources": [
                {"id": "peers", "externalRef": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"selector": {"matchLabels": {"team": "${schema.spec.team}"}}}}},
                {"id": "index", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${schema.metadata.name}-index"},
                    "data": {"names": "${peers.map(p, p.metadata.name).join(',')}"}}}]}});
    k.rgd_object(rgd).await?;
    let ns = k.s.ns.clone();
    let labelled = |ns: &str, name: &str, team: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"team": team}}})
    };
    let here = k.s.api("v1", "ConfigMap", "configmaps", Some(&ns));
    let default = k.api("v1", "ConfigMap", "configmaps");
    here.create(&PostParams::default(), &obj(labelled(&ns, "b-here", "a"))?)
        .await?;
    default
        .create(
            &PostParams::default(),
            &obj(labelled("default", "a-there", "a"))?,
        )
        .await?;
    default
        .create(
            &PostParams::default(),
            &obj(labelled("default", "other", "b"))?,
        )
        .await?;
    let inst = json!({"apiVersion": "kro.run/v1alpha1", "kind": "TeamIndex",
        "metadata": {"name": "ix", "namespace": ns}, "spec": {"team": "a"}});
    let indexes =
        k.s.api("kro.run/v1alpha1", "TeamIndex", "teamindexes", Some(&ns));
    indexes.create(&PostParams::default(), &obj(inst)?).await?;
    // sorted by namespace, then name: `default` before the scenario's `t-...`
    k.s.wait_for(&here, "ix-index", "the index of team a", |c| {
        c["data"]["names"] == "a-there,b-here"
    })
    .await?;
    k.instance_where(&indexes, "ix", "ACTIVE", |i| i["status"]["members"] == 2)
        .await?;
    here.create(&PostParams::default(), &obj(labelled(&ns, "c-new", "a"))?)
        .await?;
    k.s.wait_for(&here, "ix-index", "the index follows a new member", |c| {
        c["data"]["names"] == "a-there,b-here,c-new"
    })
    .await?;
    k.finish().await
}

/// kro's custom status conditions, as kro's integration test `instance_custom_conditions_test.go`
/// ("writes author-defined conditions to status.conditions") writes its RGD, plus a `Ready` of
/// the author's composing kro's own `ResourcesReady` as kro's docs show: the author's conditions
/// replace kro's four on the wire, each stamped with `lastTransitionTime` and
/// `observedGeneration`; `state` stays kro's.
#[tokio::test]
async fn custom_status_conditions_replace_kros_own() -> anyhow::Result<()> {
    let mut k = Kro::start("kro-conditions", &["test-cc-happy"]).await?;
    let rgd = json!({"apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
        "metadata": {"name": "test-cc-happy"},
        "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "TestCcHappy",
                "spec": {"name": "string"},
                "status": {"conditions": [
                    "${runtime.newCondition({type: 'PrimaryReady', status: 'True', reason: 'OK',\n  message: 'always healthy in this test'})}",
                    "${runtime.newCondition({type: 'AppReady', status: 'False', reason: 'Init', message: ''})}",
                    "${runtime.newCondition({type: 'Ready', status: runtime.condition(schema, 'ResourcesReady').status == 'True' && configmap.data.foo == schema.spec.name ? 'True' : 'False', reason: 'Composed', message: ''})}",
                ]}},
            "resources": [{"id": "configmap", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.spec.name}"}, "data": {"foo": "${schema.spec.name}"}}}]}});
    k.rgd_object(rgd).await?;
    let ns = k.s.ns.clone();
    let inst = json!({"apiVersion": "kro.run/v1alpha1", "kind": "TestCcHappy",
        "metadata": {"name": "demo", "namespace": ns}, "spec": {"name": "demo"}});
    let api = k.s.api(
        "kro.run/v1alpha1",
        "TestCcHappy",
        "testcchappies",
        Some(&ns),
    );
    api.create(&PostParams::default(), &obj(inst)?).await?;
    let i = k
        .instance_where(&api, "demo", "ACTIVE", |i| {
            condition(i, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await?;
    let primary = condition(&i, "PrimaryReady").cloned().unwrap_or_default();
    assert_eq!(
        (&primary["status"], &primary["reason"], &primary["message"]),
        (
            &json!("True"),
            &json!("OK"),
            &json!("always healthy in this test")
        ),
        "{i}"
    );
    assert!(primary["lastTransitionTime"].is_string());
    assert_eq!(primary["observedGeneration"], i["metadata"]["generation"]);
    let app = condition(&i, "AppReady").cloned().unwrap_or_default();
    assert_eq!(
        (&app["status"], &app["reason"]),
        (&json!("False"), &json!("Init"))
    );
    for kros in ["InstanceManaged", "GraphResolved", "ResourcesReady"] {
        assert!(
            condition(&i, kros).is_none(),
            "{kros} is kro's, off the wire: {i}"
        );
    }
    k.finish().await
}
