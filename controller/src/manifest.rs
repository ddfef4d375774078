//! Manifest files, read and applied as `kubectl apply --server-side` would: the YAML or JSON
//! documents of files and directories ([`load`]), sorted into apply phases ([`order`]: namespaces
//! and CRDs, then Metacontroller's controllers, then the rest) and applied in that order,
//! each CRD waited for until Established ([`apply_all`]); and kmeta's own CRDs installed
//! ([`install_crds`]). `kmeta dev` applies its `-f` files with it, and tests set up an API
//! server with it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

/// Field manager of the objects applied here (`kmeta dev`'s).
const FIELD_MANAGER: &str = "kmeta-dev";

/// Errors reading or applying manifests.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A manifest could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// File or directory.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A manifest is not valid YAML or not a Kubernetes object.
    #[error("{path}: {message}")]
    Manifest {
        /// File.
        path: PathBuf,
        /// What is wrong (document index and field).
        message: String,
    },
    /// The API server could not be read or written to.
    #[error("api server: {0}")]
    Server(String),
    /// An object was rejected.
    #[error("applying {what} from {path}: {message}")]
    Apply {
        /// `Kind namespace/name`.
        what: String,
        /// File.
        path: PathBuf,
        /// Server's answer.
        message: String,
    },
    /// Writing the lines of [`apply_all`] failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

/// A wait of [`apply_all_showing`] (a CRD to be Established).
pub type Wait<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), ManifestError>> + Send + 'a>>;

/// How [`apply_all_showing`]'s caller shows a wait that may take a while (`kmeta dev`: a
/// progress line on a terminal). `()` shows nothing.
pub trait ShowWait: Sync {
    /// Runs `wait`, showing `what` it waits for.
    fn during<'a>(&'a self, what: String, wait: Wait<'a>) -> Wait<'a>;
}

impl ShowWait for () {
    fn during<'a>(&'a self, _what: String, wait: Wait<'a>) -> Wait<'a> {
        wait
    }
}

/// A YAML parse error as one line, `what at line L, column C` (the parser's own rendering adds
/// an `error: ` prefix and a multi-line source snippet, which a one-line CLI error must not).
pub(crate) fn yaml_error(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// One object read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file it came from.
    pub path: PathBuf,
    /// The object.
    pub object: Value,
}

/// Apply order: namespaces and CRDs, then Metacontroller's controllers, then the rest.
fn phase(obj: &Value) -> u8 {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    match kind {
        "Namespace" | "CustomResourceDefinition" => 0,
        "CompositeController" | "DecoratorController" => 1,
        _ => 2,
    }
}

/// Sorts manifests into apply phases, keeping file order within a phase.
pub fn order(mut manifests: Vec<Manifest>) -> Vec<Manifest> {
    manifests.sort_by_key(|m| phase(&m.object));
    manifests
}

/// The manifest files named by `paths` (directories expanded, sorted by name).
pub fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| ManifestError::Read {
            path: p.clone(),
            source,
        })?;
        if !meta.is_dir() {
            out.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| ManifestError::Read {
            path: p.clone(),
            source,
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|f| {
                f.is_file()
                    && matches!(
                        f.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Parses the documents of one manifest file. Empty documents are skipped (and not counted in
/// error messages); every other document must be an object with `apiVersion`, `kind` and
/// `metadata.name` (or `generateName`).
pub fn parse_manifest(path: &Path, text: &str) -> Result<Vec<Manifest>, ManifestError> {
    let bad = |message: String| ManifestError::Manifest {
        path: path.to_owned(),
        message,
    };
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| bad(yaml_error(&e)))?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let Some(obj) = doc.as_object() else {
            return Err(bad(format!("document {}: not a mapping", i + 1)));
        };
        for field in ["apiVersion", "kind"] {
            if !obj.get(field).is_some_and(Value::is_string) {
                return Err(bad(format!("document {}: {field} is missing", i + 1)));
            }
        }
        let meta = obj.get("metadata");
        let named = ["name", "generateName"]
            .iter()
            .any(|f| meta.and_then(|m| m.get(f)).is_some_and(Value::is_string));
        if !named {
            return Err(bad(format!("document {}: metadata.name is missing", i + 1)));
        }
        out.push(Manifest {
            path: path.to_owned(),
            object: doc,
        });
    }
    Ok(out)
}

/// Reads and parses every manifest under `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Manifest>, ManifestError> {
    let mut all = Vec::new();
    for file in manifest_files(paths)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Read {
            path: file.clone(),
            source,
        })?;
        all.extend(parse_manifest(&file, &text)?);
    }
    Ok(all)
}

fn describe(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = s("/metadata/namespace");
    let name = match s("/metadata/name") {
        "" => s("/metadata/generateName"),
        n => n,
    };
    if ns.is_empty() {
        format!("{} {name}", s("/kind"))
    } else {
        format!("{} {ns}/{name}", s("/kind"))
    }
}

/// Applies manifests with server-side apply (as `kubectl apply --server-side`), in order, and
/// writes an `applied Kind namespace/name (file)` line for each to `out`; waits for each CRD to
/// be Established and refreshes discovery before the next phase.
pub async fn apply_all(
    client: &kube::Client,
    manifests: &[Manifest],
    out: &mut (dyn Write + Send),
) -> Result<(), ManifestError> {
    apply_all_showing(client, manifests, out, &()).await
}

/// [`apply_all`], showing each wait for a CRD through `show`.
pub async fn apply_all_showing(
    client: &kube::Client,
    manifests: &[Manifest],
    out: &mut (dyn Write + Send),
    show: &dyn ShowWait,
) -> Result<(), ManifestError> {
    let discover = || async {
        Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| ManifestError::Server(crate::runtime::kapi::describe(&e)))
    };
    let mut discovery = discover().await?;
    let mut last_phase = 0;
    for m in manifests {
        let p = phase(&m.object);
        if p != last_phase {
            discovery = discover().await?;
            last_phase = p;
        }
        apply_one(client, &discovery, m).await?;
        writeln!(
            out,
            "applied {} ({})",
            describe(&m.object),
            m.path.display()
        )?;
        if m.object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            let what = format!("{} to be Established", describe(&m.object));
            show.during(what, Box::pin(wait_established(client, &m.object)))
                .await?;
        }
    }
    Ok(())
}

async fn apply_one(
    client: &kube::Client,
    discovery: &Discovery,
    m: &Manifest,
) -> Result<(), ManifestError> {
    let obj = &m.object;
    let what = describe(obj);
    let fail = |message: String| ManifestError::Apply {
        what: what.clone(),
        path: m.path.clone(),
        message,
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = discovery.resolve_gvk(&gvk).ok_or_else(|| {
        let served: Vec<(String, String)> = discovery
            .groups()
            .flat_map(|g| {
                g.versions()
                    .flat_map(|v| g.versioned_resources(v))
                    .map(|(r, _)| (r.api_version, r.kind))
                    .collect::<Vec<_>>()
            })
            .collect();
        let hint = suggest_kind(&served, api_version, kind)
            .map(|s| format!("; did you mean {s}?"))
            .unwrap_or_default();
        fail(format!(
            "the server does not serve {kind} in {api_version}{hint}"
        ))
    })?;
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &ar),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let dynamic: DynamicObject =
        serde_json::from_value(obj.clone()).map_err(|e| fail(e.to_string()))?;
    match obj.pointer("/metadata/name").and_then(Value::as_str) {
        Some(name) => api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER)
                    .force()
                    .validation_strict(),
                &Patch::Apply(&dynamic),
            )
            .await
            .map(drop),
        None => api.create(&Default::default(), &dynamic).await.map(drop),
    }
    .map_err(|e| {
        fail(match e {
            // the server's message alone, not kube's debug rendering of the whole Status
            kube::Error::Api(status) => status.message.clone(),
            other => other.to_string(),
        })
    })
}

/// A served kind close to `kind` in `api_version` that was not found: the same name in other
/// case, or at most two edits away; else the same kind in another apiVersion. Shown as
/// `apiVersion Kind`.
fn suggest_kind(served: &[(String, String)], api_version: &str, kind: &str) -> Option<String> {
    let show = |(av, k): &(String, String)| format!("{av} {k}");
    let same_version = served.iter().filter(|(av, _)| av == api_version);
    let close = same_version
        .map(|s| {
            let d = if s.1.eq_ignore_ascii_case(kind) {
                0
            } else {
                strsim::levenshtein(&s.1.to_ascii_lowercase(), &kind.to_ascii_lowercase())
            };
            (d, s)
        })
        .filter(|(d, _)| *d <= 2)
        .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.1.cmp(&b.1.1)));
    if let Some((_, s)) = close {
        return Some(show(s));
    }
    let mut elsewhere: Vec<&(String, String)> = served.iter().filter(|(_, k)| k == kind).collect();
    elsewhere.sort();
    elsewhere.first().map(|s| show(s))
}

async fn wait_established(client: &kube::Client, crd: &Value) -> Result<(), ManifestError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let established = api
            .get_opt(name)
            .await
            .map_err(|e| ManifestError::Server(crate::runtime::kapi::describe(&e)))?
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ManifestError::Server(format!(
                "CustomResourceDefinition {name} not Established after 10s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Installs the CompositeController/DecoratorController/ControllerRevision CRDs.
pub async fn install_crds(client: &kube::Client) -> Result<(), ManifestError> {
    let crds = crate::api::crds::all().map_err(|e| ManifestError::Server(e.to_string()))?;
    let manifests: Vec<Manifest> = crds
        .into_iter()
        .map(|crd| {
            Ok(Manifest {
                path: PathBuf::from("<kmeta crds>"),
                object: serde_json::to_value(crd)
                    .map_err(|e| ManifestError::Server(e.to_string()))?,
            })
        })
        .collect::<Result<_, ManifestError>>()?;
    apply_all(client, &manifests, &mut std::io::sink()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_document_files_parse_and_name_bad_documents() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: X\n";
        let e = parse_manifest(Path::new("f.yaml"), text).expect_err("second doc invalid");
        assert_eq!(e.to_string(), "f.yaml: document 2: apiVersion is missing");
        let ok = parse_manifest(
            Path::new("f.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {generateName: s-}\n",
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
    }

    #[test]
    fn a_kind_typo_or_a_wrong_api_version_gets_a_suggestion() {
        let served: Vec<(String, String)> = [
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "DaemonSet"),
        ]
        .iter()
        .map(|(a, k)| ((*a).to_owned(), (*k).to_owned()))
        .collect();
        let s = |av: &str, k: &str| suggest_kind(&served, av, k);
        assert_eq!(s("v1", "Configmap").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(s("v1", "ConfigMaps").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(
            s("apps/v1", "Deployemnt").as_deref(),
            Some("apps/v1 Deployment")
        );
        assert_eq!(s("apps/v1", "ConfigMap").as_deref(), Some("v1 ConfigMap"));
        assert_eq!(s("v1", "Gadget"), None);
    }

    #[test]
    fn a_yaml_syntax_error_is_one_line_with_its_position() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n";
        let e = parse_manifest(Path::new("f.yaml"), text).expect_err("unclosed bracket");
        assert_eq!(
            e.to_string(),
            "f.yaml: unclosed bracket '{' at line 3, column 11"
        );
    }

    #[test]
    fn crds_first_then_controllers_then_the_rest() {
        let m = |kind: &str| Manifest {
            path: PathBuf::from(kind),
            object: json!({"kind": kind}),
        };
        let ordered = order(vec![
            m("WebApp"),
            m("CompositeController"),
            m("CustomResourceDefinition"),
            m("ConfigMap"),
            m("Namespace"),
        ]);
        let kinds: Vec<_> = ordered
            .iter()
            .map(|m| m.path.display().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "Namespace",
                "CompositeController",
                "WebApp",
                "ConfigMap"
            ]
        );
    }
}
