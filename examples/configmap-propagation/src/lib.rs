//! The configmap-propagation example is YAML plus a Python hook (`hook.py`, standard library
//! only); this crate only carries its end-to-end test. The paths below locate its files.

/// The Python hook.
pub const HOOK_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/hook.py");
/// The ConfigMapPropagation CRD.
pub const CRD_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crd.yaml");
/// The CompositeController.
pub const CONTROLLER_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/controller.yaml");
/// Sample objects: target namespaces, the source ConfigMap, a ConfigMapPropagation.
pub const PARENT_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/parent.yaml");
