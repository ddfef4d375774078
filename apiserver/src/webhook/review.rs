//! The `AdmissionReview` v1 a webhook is sent, and what its answer means.

use super::{Attributes, Op, WebhookError};
use crate::error::ApiError;
use base64::Engine as _;
use serde_json::{Value, json};

/// What a webhook answered, once read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    /// `response.allowed`.
    pub(crate) allowed: bool,
    /// `response.status`, on a denial.
    pub(crate) status: Option<Value>,
    /// `response.patch` (`patchType: JSONPatch`), decoded.
    pub(crate) patch: Option<json_patch::Patch>,
    /// `response.warnings`.
    pub(crate) warnings: Vec<String>,
}

/// The `AdmissionReview` v1 request for one call: `uid` identifies it (the answer must echo it),
/// `object` is absent on DELETE, `old` on CREATE.
pub(crate) fn review_request(
    a: &Attributes,
    uid: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let gvk = json!({"group": a.group, "version": a.version, "kind": a.kind});
    let gvr = json!({"group": a.group, "version": a.version, "resource": a.resource});
    let options_kind = match a.op {
        Op::Create => "CreateOptions",
        Op::Update => "UpdateOptions",
        Op::Delete => "DeleteOptions",
    };
    let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind});
    if a.op != Op::Delete && !a.field_manager.is_empty() {
        options["fieldManager"] = json!(a.field_manager);
    }
    let mut req = json!({
        "uid": uid,
        "kind": gvk, "resource": gvr,
        "requestKind": gvk, "requestResource": gvr,
        "name": a.name,
        "operation": a.op.as_str(),
        "userInfo": user_info(a),
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": options,
    });
    if !a.subresource.is_empty() {
        req["subResource"] = json!(a.subresource);
        req["requestSubResource"] = json!(a.subresource);
    }
    if let Some(ns) = &a.namespace {
        req["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

fn user_info(a: &Attributes) -> Value {
    match &a.user {
        Some((name, groups)) => json!({"username": name, "groups": groups}),
        None => {
            json!({"username": crate::authn::ANONYMOUS_USER, "groups": ["system:unauthenticated"]})
        }
    }
}

/// Reads a webhook's answer to the review `uid`: an `AdmissionReview` v1 whose `response.uid`
/// is `uid`; a patch only with `patchType: JSONPatch` and only from a mutating webhook.
pub(crate) fn read_response(
    webhook: &str,
    mutating: bool,
    uid: &str,
    body: &[u8],
) -> Result<Verdict, WebhookError> {
    let fail = |reason: String| WebhookError::Call {
        webhook: webhook.to_string(),
        reason,
    };
    let review: Value =
        serde_json::from_slice(body).map_err(|e| fail(format!("the answer is not JSON: {e}")))?;
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(fail(
            "expected response of kind AdmissionReview in version admission.k8s.io/v1".into(),
        ));
    }
    let resp = &review["response"];
    if resp["uid"].as_str() != Some(uid) {
        return Err(fail(format!(
            "expected response.uid={uid:?}, got {:?}",
            resp["uid"].as_str().unwrap_or_default()
        )));
    }
    let allowed = resp["allowed"].as_bool().unwrap_or(false);
    let patch = match (resp.get("patch").and_then(Value::as_str), mutating) {
        (None, _) => None,
        (Some(_), false) => return Err(fail("validating webhook may not return a patch".into())),
        (Some(p), true) => Some(decode_patch(p, resp.get("patchType")).map_err(fail)?),
    };
    let warnings = resp["warnings"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(Verdict {
        allowed,
        status: resp.get("status").filter(|s| !s.is_null()).cloned(),
        patch,
        warnings,
    })
}

fn decode_patch(p: &str, patch_type: Option<&Value>) -> Result<json_patch::Patch, String> {
    if patch_type.and_then(Value::as_str) != Some("JSONPatch") {
        return Err(format!(
            "unsupported patch type {:?}",
            patch_type.and_then(Value::as_str).unwrap_or_default()
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(p)
        .map_err(|e| format!("response.patch is not base64: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("response.patch is no JSONPatch: {e}"))
}

/// The error a denial answers, worded as kube-apiserver's: `admission webhook "NAME" denied the
/// request: MESSAGE` (the reason when no message, `without explanation` when neither), with the
/// webhook's code (400 when it gave none below 400) and reason.
pub(crate) fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = Value::Null;
    let s = status.unwrap_or(&empty);
    let code = s["code"].as_u64().unwrap_or(0);
    let code = if code < 400 { 400 } else { code.min(599) };
    let denied = format!("admission webhook {webhook:?} denied the request");
    let message = match (s["message"].as_str(), s["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied}: {r}"),
        _ => format!("{denied} without explanation"),
    };
    let reason = s["reason"].as_str().unwrap_or_default().to_string();
    let mut err = ApiError::new(code as u16, &reason, message);
    if let Some(d) = s.get("details").filter(|d| d.is_object()) {
        err.details = Some(Box::new(d.clone()));
    }
    err
}
