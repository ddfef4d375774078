//! The generated CRD manifests (`kmeta crds`, `deploy/crds/`).

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{CompositeController, DecoratorController};

/// Errors rendering or checking the CRD files.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// YAML serialization failed.
    #[error("rendering crd {name} as yaml: {message}")]
    Render {
        /// CRD name.
        name: String,
        /// Cause.
        message: String,
    },
    /// The built-in ControllerRevision CRD did not decode (a bug).
    #[error("building the controllerrevisions crd: {0}")]
    Build(#[from] serde_json::Error),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Files differ from the code.
    #[error(
        "crd files in {dir} are out of date ({files}); regenerate with `cargo run -p kmeta -- crds --write {dir}`"
    )]
    Drift {
        /// Directory.
        dir: String,
        /// The files that differ or are missing/extra.
        files: String,
    },
}

/// The ControllerRevision CRD (no spec: top-level `parentPatch` and `children`), written by hand
/// because the type has no `spec`.
pub fn controller_revision_crd() -> Result<CustomResourceDefinition, CrdError> {
    let v = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "controllerrevisions.metacontroller.k8s.io",
            "annotations": {"api-approved.kubernetes.io": "unapproved, request not yet submitted"}
        },
        "spec": {
            "group": "metacontroller.k8s.io",
            "names": {
                "kind": "ControllerRevision",
                "listKind": "ControllerRevisionList",
                "plural": "controllerrevisions",
                "singular": "controllerrevision"
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "description": "A Metacontroller ControllerRevision: the parent fields of one revision and the children it claims (rolling updates).",
                    "type": "object",
                    "required": ["children", "parentPatch"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "parentPatch": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "children": {"type": "array", "items": {
                            "type": "object",
                            "required": ["apiGroup", "kind", "names"],
                            "properties": {
                                "apiGroup": {"type": "string"},
                                "kind": {"type": "string"},
                                "names": {"type": "array", "items": {"type": "string"}}
                            }
                        }}
                    }
                }}
            }]
        }
    });
    Ok(serde_json::from_value(v)?)
}

/// Every CRD kmeta serves, in file order.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Ok(vec![
        CompositeController::crd(),
        DecoratorController::crd(),
        controller_revision_crd()?,
    ])
}

/// `(file name, YAML text)` for every CRD: `<plural>.<group>.yaml`.
pub(crate) fn rendered() -> Result<Vec<(String, String)>, CrdError> {
    all()?
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let text = serde_saphyr::to_string(&crd).map_err(|e| CrdError::Render {
                name: name.clone(),
                message: e.to_string(),
            })?;
            Ok((format!("{name}.yaml"), text))
        })
        .collect()
}

/// What `kmeta crds` prints: every file, separated by `---` lines.
pub fn rendered_stream() -> Result<String, CrdError> {
    let parts: Vec<String> = rendered()?.into_iter().map(|(_, t)| t).collect();
    Ok(parts.join("---\n"))
}

/// Writes one file per CRD into `dir` (created if needed).
pub fn write_dir(dir: &Path) -> Result<(), CrdError> {
    std::fs::create_dir_all(dir).map_err(|source| CrdError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    for (file, text) in rendered()? {
        let path = dir.join(&file);
        std::fs::write(&path, text).map_err(|source| CrdError::Io {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(())
}

/// Fails with [`CrdError::Drift`] naming every file in `dir` that differs from the code, is
/// missing, or is an extra `*.yaml` file.
pub fn check_dir(dir: &Path) -> Result<(), CrdError> {
    let expected = rendered()?;
    let mut bad = Vec::new();
    for (file, text) in &expected {
        match std::fs::read_to_string(dir.join(file)) {
            Ok(found) if &found == text => {}
            Ok(_) => bad.push(format!("{file} differs")),
            Err(_) => bad.push(format!("{file} missing")),
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml") && !expected.iter().any(|(f, _)| *f == name) {
                bad.push(format!("{name} is not generated"));
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(CrdError::Drift {
            dir: dir.display().to_string(),
            files: bad.join(", "),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn deploy_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
    }

    /// `deploy/crds/` must equal what the code generates (CI drift check).
    #[test]
    fn deploy_crds_match_code() {
        if let Err(e) = check_dir(&deploy_dir()) {
            panic!("{e}");
        }
    }

    #[test]
    fn composite_controller_crd_shape() {
        let crd = serde_json::to_value(CompositeController::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["cc", "cctl"])
        );
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["parentResource"]));
        let webhook = &spec["properties"]["hooks"]["properties"]["sync"]["properties"]["webhook"];
        for f in [
            "responseUnMarshallMode",
            "clientTLS",
            "caBundle",
            "basicAuth",
        ] {
            assert!(
                webhook["properties"].get(f).is_some(),
                "webhook schema lacks {f}: {webhook}"
            );
        }
        assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
    }

    #[test]
    fn rendered_yaml_round_trips() {
        for (file, text) in rendered().unwrap() {
            let back: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
            assert_eq!(
                Some(file.trim_end_matches(".yaml")),
                back.metadata.name.as_deref()
            );
        }
    }

    #[test]
    fn check_reports_drift_and_extra_files() {
        let dir = std::env::temp_dir().join(format!("kmeta-crds-{}", std::process::id()));
        write_dir(&dir).unwrap();
        check_dir(&dir).unwrap();
        let first = rendered().unwrap()[0].0.clone();
        std::fs::write(dir.join(&first), "changed").unwrap();
        std::fs::write(dir.join("extra.yaml"), "x").unwrap();
        let err = check_dir(&dir).unwrap_err().to_string();
        assert!(err.contains(&format!("{first} differs")), "{err}");
        assert!(err.contains("extra.yaml is not generated"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
