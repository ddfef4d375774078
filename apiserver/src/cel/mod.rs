//! CEL as kube-apiserver evaluates it, on the `cel` crate with the Kubernetes extension
//! libraries of `kube-cel` (strings, lists, sets, regex, urls, ip/cidr, semver, quantity,
//! format, math, base64): an [`Expression`] is compiled once and evaluated with
//! [`Bindings`] (variables as JSON values), each failure a typed [`CelError`].
//!
//! [`crd`] applies a CRD's `x-kubernetes-validations` to custom resources. Admission policies
//! (ValidatingAdmissionPolicy, MutatingAdmissionPolicy) and CEL hooks evaluate their expressions
//! through this module's API. Why these crates and what they do not cover:
//! docs/design/apiserver-admission.md.

pub(crate) mod crd;

pub(crate) use kmeta_cel::{Bindings, CelError, Expression};

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::too_many_lines)]
mod tests;
