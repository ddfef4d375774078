//! The demo's steps, each a named method that prints what it shows and waits for a condition
//! against a deadline.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmeta_apiserver::{HookId, TestServer};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::fixtures::*;
use super::hook::*;
use super::*;
use crate::cli::progress::Progress;
use kmeta::ManagerConfig;

pub(super) struct Demo<'o> {
    out: &'o mut (dyn std::io::Write + Send),
    verbose: bool,
    deadline: Instant,
    /// The step under way, for the timeout error.
    progress: Arc<Mutex<&'static str>>,
    /// What a wait is waiting for, on a terminal.
    terminal: Progress,
    client: kube::Client,
}

impl<'o> Demo<'o> {
    pub(super) async fn run(
        opts: &DemoOptions,
        deadline: Instant,
        progress: Arc<Mutex<&'static str>>,
        out: &'o mut (dyn std::io::Write + Send),
    ) -> Result<(), DemoError> {
        let server = TestServer::start().await?;
        let mut demo = Demo {
            out,
            verbose: opts.verbose,
            deadline,
            progress,
            terminal: Progress::on_terminal(),
            client: server.client(),
        };
        demo.story(&server).await
    }

    /// Records the step under way.
    fn at(&self, step: &'static str) {
        if let Ok(mut p) = self.progress.lock() {
            *p = step;
        }
    }

    fn say(&mut self, text: &str) -> Result<(), DemoError> {
        writeln!(self.out, "{text}").map_err(DemoError::Output)
    }

    fn detail(&mut self, text: &str) -> Result<(), DemoError> {
        if self.verbose {
            writeln!(self.out, "     · {text}").map_err(DemoError::Output)?;
        }
        Ok(())
    }

    /// Prints `value` under `key` as an indented YAML excerpt.
    fn yaml(&mut self, key: &str, value: &Value) -> Result<(), DemoError> {
        let mut doc = Map::new();
        doc.insert(key.into(), value.clone());
        let text = serde_saphyr::to_string(&Value::Object(doc))
            .unwrap_or_else(|e| format!("# (could not render yaml: {e})\n"));
        for line in text.lines() {
            writeln!(self.out, "       {line}").map_err(DemoError::Output)?;
        }
        Ok(())
    }

    fn api(&self, api_version: &str, kind: &str, plural: &str, ns: bool) -> Api<DynamicObject> {
        let r = resource(api_version, kind, plural);
        if ns {
            Api::namespaced_with(self.client.clone(), NAMESPACE, &r)
        } else {
            Api::all_with(self.client.clone(), &r)
        }
    }

    /// Polls `check` until it yields a value, or fails naming `step`, `expected` and the last
    /// thing `check` found.
    async fn wait<T, F, Fut>(
        &self,
        step: &'static str,
        expected: &str,
        mut check: F,
    ) -> Result<T, DemoError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Result<T, String>, kube::Error>>,
    {
        self.at(step);
        let since = Instant::now();
        let deadline = self.deadline.min(since + STEP_WAIT);
        loop {
            let found = match check().await {
                Ok(Ok(v)) => {
                    self.terminal.clear();
                    return Ok(v);
                }
                Ok(Err(f)) => f,
                Err(e) => format!("api error: {e}"),
            };
            if Instant::now() + POLL >= deadline {
                self.terminal.clear();
                return Err(DemoError::Step {
                    step,
                    expected: expected.to_owned(),
                    found,
                });
            }
            self.terminal.show(expected, since);
            tokio::time::sleep(POLL).await;
        }
    }

    async fn create(
        &self,
        step: &'static str,
        api: &Api<DynamicObject>,
        obj: Value,
    ) -> Result<(), DemoError> {
        self.at(step);
        let dynamic: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(|e| DemoError::Step {
                step,
                expected: "a Kubernetes object".into(),
                found: e.to_string(),
            })?;
        api.create(&Default::default(), &dynamic)
            .await
            .map(drop)
            .map_err(|source| DemoError::Api {
                step,
                action: format!(
                    "creating {} {}",
                    obj["kind"].as_str().unwrap_or_default(),
                    obj.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                ),
                source,
            })
    }

    async fn merge_patch(
        &self,
        step: &'static str,
        api: &Api<DynamicObject>,
        name: &str,
        patch: Value,
    ) -> Result<(), DemoError> {
        self.at(step);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| DemoError::Api {
                step,
                action: format!("patching {name} with {patch}"),
                source,
            })?;
        Ok(())
    }

    async fn create_crd(&self, step: &'static str, crd: Value) -> Result<(), DemoError> {
        let crds = self.api(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        );
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.create(step, &crds, crd).await?;
        self.wait(step, &format!("CRD {name} Established"), || async {
            let crd =
                serde_json::to_value(crds.get(&name).await?).map_err(kube::Error::SerdeError)?;
            Ok(if established(&crd) {
                Ok(())
            } else {
                Err(format!("CRD {name} without Established=True"))
            })
        })
        .await
    }

    /// The whole tour, top-down: setup, then the four numbered steps.
    async fn story(&mut self, server: &TestServer) -> Result<(), DemoError> {
        self.introduce(server)?;
        self.create_world().await?;
        // the simulated mutating admission webhook: a sidecar injector for Deployments
        let injector = server.admission().mutate("apps/v1", "deployments", inject);
        let hook = self.start_hook().await?;
        let controller = self.start_controller(&hook.url).await?;
        let apis = self.create_parent().await?;
        self.sidecar_injected(&apis, &hook).await?;
        let d = self.image_update(&apis, &hook).await?;
        self.status_settles(&apis).await?;
        self.resync_writes_nothing(server, &apis, &hook, &d).await?;
        self.shutdown(server, injector, controller, hook).await
    }

    /// Setup: the opening lines.
    fn introduce(&mut self, server: &TestServer) -> Result<(), DemoError> {
        self.say(
            "kmeta demo — a Metacontroller-style controller that does not fight other writers.",
        )?;
        self.say("")?;
        self.say(
            "Setting up, all inside this process: an in-memory Kubernetes API server, the kmeta",
        )?;
        self.say(
            "controller, and a small sync hook (an HTTP server) for a WebApp custom resource.",
        )?;
        self.detail(&format!("api server: {}", server.url()))
    }

    /// Setup: the world — a namespace, kmeta's CRDs, the WebApp CRD.
    async fn create_world(&mut self) -> Result<(), DemoError> {
        let namespaces = self.api("v1", "Namespace", "namespaces", false);
        self.create(
            SETUP,
            &namespaces,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        )
        .await?;
        for crd in kmeta::api::crds::all()? {
            let crd = serde_json::to_value(crd).map_err(|e| DemoError::Api {
                step: SETUP,
                action: "encoding kmeta's crds".into(),
                source: kube::Error::SerdeError(e),
            })?;
            self.create_crd(SETUP, crd).await?;
        }
        self.create_crd(SETUP, webapp_crd()).await
    }

    /// Setup: the sync hook, an HTTP server on 127.0.0.1.
    async fn start_hook(&mut self) -> Result<HookServer, DemoError> {
        let state = Arc::new(HookState::default());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(DemoError::Hook)?;
        let hook_addr = listener.local_addr().map_err(DemoError::Hook)?;
        let stop = CancellationToken::new();
        let app = axum::Router::new()
            .route("/sync", axum::routing::post(serve_sync))
            .with_state(state.clone());
        let task = {
            let stop = stop.clone();
            AbortOnDrop(tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            }))
        };
        let url = format!("http://{hook_addr}/sync");
        self.detail(&format!("sync hook: {url}"))?;
        Ok(HookServer {
            state,
            url,
            stop,
            task,
        })
    }

    /// Setup: the CompositeController, and the controller itself started in the background.
    async fn start_controller(&mut self, hook_url: &str) -> Result<Controller, DemoError> {
        let ccs = self.api(
            "metacontroller.k8s.io/v1alpha1",
            "CompositeController",
            "compositecontrollers",
            false,
        );
        self.create(SETUP, &ccs, composite_controller(hook_url))
            .await?;
        let stop = CancellationToken::new();
        // a demo cut short (timeout, error) still stops the controller
        let stop_on_drop = stop.clone().drop_guard();
        let config = ManagerConfig::default()
            .discovery_interval(Duration::from_secs(1))
            .workers(2);
        let manager = tokio::spawn(kmeta::reconcile::manager::run(
            self.client.clone(),
            config,
            stop.clone(),
        ));
        Ok(Controller {
            stop,
            _stop_on_drop: stop_on_drop,
            manager,
        })
    }

    /// Setup: explains the controller and creates the WebApp.
    async fn create_parent(&mut self) -> Result<Apis, DemoError> {
        self.say("")?;
        self.say(&format!(
            "The CompositeController {CONTROLLER} makes one Deployment per WebApp, from the WebApp's"
        ))?;
        self.say("embedded pod template, with updateStrategy InPlace (Metacontroller's default,")?;
        self.say("OnDelete, would never update the Deployment). The WebApp we create:")?;
        let parent = parent();
        self.yaml("spec", &parent["spec"])?;
        let apis = Apis {
            webapps: self.api(PARENT_API_VERSION, "WebApp", "webapps", true),
            deployments: self.api("apps/v1", "Deployment", "deployments", true),
        };
        self.create(SETUP, &apis.webapps, parent).await?;
        Ok(apis)
    }

    /// Step 1: the child, with the injected sidecar.
    async fn sidecar_injected(&mut self, apis: &Apis, hook: &HookServer) -> Result<(), DemoError> {
        let deployments = &apis.deployments;
        let d = self
            .wait(
                S1,
                &format!("Deployment {PARENT} with containers app (nginx:1.27) and {SIDECAR}"),
                || async {
                    let Some(d) = get_value(deployments, PARENT).await? else {
                        return Ok(Err(format!("no Deployment {PARENT}")));
                    };
                    let cs = containers(&d);
                    let ok = cs.len() == 2
                        && cs[0].0 == APP_CONTAINER
                        && cs[0].1 == "nginx:1.27"
                        && cs[1].0 == SIDECAR;
                    Ok(if ok { Ok(d) } else { Err(describe(&cs)) })
                },
            )
            .await?;
        self.say("")?;
        self.say("1. kmeta called the hook and created the Deployment. On the way into the API")?;
        self.say(&format!(
            "   server, a mutating admission webhook (simulated here) injected the {SIDECAR} sidecar,"
        ))?;
        self.say("   as a service mesh does. The Deployment's containers:")?;
        self.yaml("containers", &d["spec"]["template"]["spec"]["containers"])?;
        self.detail(&format!(
            "hook calls so far: {}",
            hook.state.calls.load(Ordering::SeqCst)
        ))
    }

    /// Step 2: an image update reaches the Deployment and the sidecar stays; returns the
    /// Deployment.
    async fn image_update(&mut self, apis: &Apis, hook: &HookServer) -> Result<Value, DemoError> {
        self.merge_patch(
            S2,
            &apis.webapps,
            PARENT,
            json!({"spec": {"image": "nginx:1.28"}}),
        )
        .await?;
        let deployments = &apis.deployments;
        let d = self
            .wait(
                S2,
                &format!("Deployment {PARENT} with app (nginx:1.28) and {SIDECAR} still there"),
                || async {
                    let d = get_value(deployments, PARENT).await?.unwrap_or_default();
                    let cs = containers(&d);
                    let ok = cs
                        .first()
                        .is_some_and(|c| c.0 == APP_CONTAINER && c.1 == "nginx:1.28")
                        && cs.iter().any(|c| c.0 == SIDECAR);
                    Ok(if ok { Ok(d) } else { Err(describe(&cs)) })
                },
            )
            .await?;
        self.say("")?;
        self.say(
            "2. We changed the WebApp's spec.image to nginx:1.28. The hook knows nothing about",
        )?;
        self.say("   the sidecar; the containers it asked for:")?;
        let desired = hook
            .state
            .desired
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        self.yaml("containers", &desired)?;
        self.say(
            "   kmeta merged three ways (what it applied last time, what the hook wants now,",
        )?;
        self.say(
            "   what is live): only the image changed and the sidecar stayed. The Deployment:",
        )?;
        self.yaml("containers", &d["spec"]["template"]["spec"]["containers"])?;
        self.say(&format!(
            "   A plain replace with the hook's Deployment would have dropped {SIDECAR} (and the"
        ))?;
        self.say("   injector only runs on create, so it would not come back).")?;
        Ok(d)
    }

    /// Step 2, settling: the parent's status reflects the update.
    async fn status_settles(&mut self, apis: &Apis) -> Result<(), DemoError> {
        let webapps = &apis.webapps;
        let generation = get_value(webapps, PARENT)
            .await
            .map_err(|source| DemoError::Api {
                step: S2,
                action: format!("reading WebApp {PARENT}"),
                source,
            })?
            .and_then(|p| p.pointer("/metadata/generation").cloned())
            .unwrap_or(Value::Null);
        let status = self
            .wait(
                S2,
                &format!(
                    "WebApp {PARENT} status with observedGeneration {generation} and both containers"
                ),
                || async {
                    let p = get_value(webapps, PARENT).await?.unwrap_or_default();
                    let s = p.get("status").cloned().unwrap_or(Value::Null);
                    let running = s["containers"].as_array().map_or(0, Vec::len);
                    let ok = s["observedGeneration"] == generation
                        && running == 2
                        && s["containers"][0]["image"] == "nginx:1.28";
                    Ok(if ok { Ok(s) } else { Err(format!("status {s}")) })
                },
            )
            .await?;
        let mut hooks = status.clone();
        let record = hooks.as_object_mut().and_then(|m| m.remove("kmeta"));
        self.say("   The WebApp's status, written by kmeta from the hook's answer:")?;
        self.yaml("status", &hooks)?;
        if let Some(change) = record.as_ref().and_then(deployment_update) {
            self.say("   kmeta's record of the sync that updated the Deployment (status.kmeta):")?;
            self.yaml("change", &change)?;
            self.say(&format!(
                "   On a cluster, `kmeta trace webapps/{PARENT} -n {NAMESPACE} --history` prints it with the"
            ))?;
            self.say("   earlier syncs that wrote something, each with what triggered it.")?;
        }
        Ok(())
    }

    /// Step 3: forced resyncs call the hook again, and Deployment `d` is not written.
    async fn resync_writes_nothing(
        &mut self,
        server: &TestServer,
        apis: &Apis,
        hook: &HookServer,
        d: &Value,
    ) -> Result<(), DemoError> {
        let rv = d["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let calls = hook.state.calls.load(Ordering::SeqCst);
        let before = server.counters();
        self.force_resyncs(apis, hook).await?;
        let after = get_value(&apis.deployments, PARENT)
            .await
            .map_err(|source| DemoError::Api {
                step: S3,
                action: format!("reading Deployment {PARENT}"),
                source,
            })?
            .unwrap_or_default();
        let writes = server.counters().since(&before).writes_to("deployments");
        let new_calls = hook.state.calls.load(Ordering::SeqCst) - calls;
        if after["metadata"]["resourceVersion"] != rv.as_str() || writes != 0 {
            return Err(DemoError::Step {
                step: S3,
                expected: format!(
                    "Deployment {PARENT} unchanged at resourceVersion {rv}, no writes"
                ),
                found: format!(
                    "resourceVersion {} after {writes} write(s) to deployments",
                    after["metadata"]["resourceVersion"]
                ),
            });
        }
        self.say("")?;
        self.say("3. Controllers resync all the time (relists, restarts, unrelated changes). We")?;
        self.say(&format!(
            "   annotated the WebApp twice to force resyncs; the hook was called {new_calls} more time(s)"
        ))?;
        self.say("   with the same answer, and kmeta wrote nothing: the Deployment is still at")?;
        self.say(&format!(
            "   resourceVersion {rv}, so no rollout, no tug-of-war with the injector."
        ))?;
        self.detail(&format!(
            "api server writes to deployments during the resyncs: {writes}"
        ))
    }

    /// Step 3, forcing: annotates the parent twice, each time waiting for the hook to see it.
    async fn force_resyncs(&mut self, apis: &Apis, hook: &HookServer) -> Result<(), DemoError> {
        for touch in ["1", "2"] {
            self.merge_patch(
                S3,
                &apis.webapps,
                PARENT,
                json!({"metadata": {"annotations": {TOUCH: touch}}}),
            )
            .await?;
            let seen = hook.state.clone();
            self.wait(
                S3,
                &format!("a hook call for the parent annotated {TOUCH}={touch}"),
                || {
                    let seen = seen.clone();
                    async move {
                        let touches = seen.touches.lock().map(|t| t.clone()).unwrap_or_default();
                        Ok(if touches.iter().any(|t| t == touch) {
                            Ok(())
                        } else {
                            Err(format!("hook calls with touches {touches:?}"))
                        })
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Step 4: removes the injector, stops the controller, then the hook server.
    async fn shutdown(
        &mut self,
        server: &TestServer,
        injector: HookId,
        controller: Controller,
        hook: HookServer,
    ) -> Result<(), DemoError> {
        self.at(S4);
        server.admission().remove(injector);
        controller.stop.cancel();
        match tokio::time::timeout(SHUTDOWN, controller.manager).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(DemoError::Controller(format!("stopped with: {e}"))),
            Ok(Err(e)) => return Err(DemoError::Controller(format!("task failed: {e}"))),
            Err(_) => {
                return Err(DemoError::Controller(format!(
                    "did not stop within {SHUTDOWN:?} ({S4})"
                )));
            }
        }
        hook.stop.cancel();
        let mut hook_task = hook.task;
        let _ = tokio::time::timeout(SHUTDOWN, &mut hook_task.0).await;
        self.say("")?;
        self.say(&format!(
            "4. Done: the Deployment got the new image, kept the {SIDECAR} sidecar, and a resync wrote nothing."
        ))?;
        self.say("   Next: write your own hook (see the README) and try it with `kmeta dev`.")?;
        Ok(())
    }
}

/// The controller, running in the background.
pub(super) struct Controller {
    /// Stops it.
    stop: CancellationToken,
    /// A demo cut short (timeout, error) still stops the controller.
    _stop_on_drop: DropGuard,
    /// Its task.
    manager: tokio::task::JoinHandle<Result<(), kube::Error>>,
}

/// The namespaced APIs the steps use.
pub(super) struct Apis {
    /// The parents.
    webapps: Api<DynamicObject>,
    /// The children.
    deployments: Api<DynamicObject>,
}

/// The object `name` as JSON, `None` when it does not exist.
async fn get_value(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, kube::Error> {
    let obj = api.get_opt(name).await?;
    Ok(obj.and_then(|o| serde_json::to_value(o).ok()))
}

/// The record, in kmeta's `status.kmeta` (`lastSync`, then `history`), of the last sync that
/// updated the Deployment.
fn deployment_update(kmeta: &Value) -> Option<Value> {
    let earlier = kmeta["history"].as_array().into_iter().flatten();
    std::iter::once(&kmeta["lastSync"])
        .chain(earlier)
        .find(|r| {
            r["children"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["kind"] == "Deployment" && c["action"] == "Updated")
            })
        })
        .cloned()
}
