//! API errors rendered as Kubernetes `Status` objects.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

/// An error returned to API clients as a `Status` object with `status: Failure`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// HTTP status code, also written to `Status.code`.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: String,
    /// Human readable message.
    pub message: String,
    /// `Status.details` (name, group, kind, causes), if any.
    pub details: Option<Box<Value>>,
    /// Value for the `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

/// A validation failure of one field: its path and a message starting with the error type like
/// the real server's (`Invalid value: ...`, `Forbidden: ...`), answered as 422 Invalid.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Field path, e.g. `spec.selector`.
    pub field: String,
    /// Message, starting with the error type.
    pub message: String,
}

impl FieldError {
    /// A failure of `field`.
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        FieldError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// Describes the object an error is about, for `Status.details`.
#[derive(Debug, Clone, Default)]
pub struct Target<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Resource plural (used as `details.kind`, like the real server does).
    pub plural: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl ApiError {
    /// Build an error with an explicit code and reason.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    fn qualified(t: &Target<'_>) -> String {
        if t.group.is_empty() {
            t.plural.to_string()
        } else {
            format!("{}.{}", t.plural, t.group)
        }
    }

    fn details_of(t: &Target<'_>) -> Value {
        let mut d = json!({"name": t.name, "kind": t.plural});
        if !t.group.is_empty() {
            d["group"] = json!(t.group);
        }
        d
    }

    /// 404 NotFound for an object.
    pub fn not_found(t: Target<'_>) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", Self::qualified(&t), t.name),
        )
        .with_details(Self::details_of(&t))
    }

    /// 404 NotFound for an unknown path or resource type.
    pub fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (path {path})"),
        )
        .with_details(json!({}))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(t: Target<'_>) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", Self::qualified(&t), t.name),
        )
        .with_details(Self::details_of(&t))
    }

    /// 409 Conflict (optimistic concurrency or precondition failure).
    pub fn conflict(t: Target<'_>, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {why}",
                Self::qualified(&t),
                t.name
            ),
        )
        .with_details(Self::details_of(&t))
    }

    /// 409 Conflict for the standard stale resourceVersion case.
    pub fn stale(t: Target<'_>) -> Self {
        Self::conflict(
            t,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one field cause.
    pub fn invalid(kind: &str, group: &str, name: &str, field: &str, msg: &str) -> Self {
        Self::invalid_causes(kind, group, name, [("FieldValueInvalid", field, msg)])
    }

    /// 422 Invalid with several causes on one field (`errs`: cause reason and message body,
    /// e.g. `("FieldValueForbidden", "Forbidden: ...")`), worded like `errors.NewInvalid`.
    pub fn invalid_fields(
        kind: &str,
        group: &str,
        name: &str,
        field: &str,
        errs: &[(&str, String)],
    ) -> Self {
        Self::invalid_causes(
            kind,
            group,
            name,
            errs.iter()
                .map(|(reason, msg)| (*reason, field, msg.as_str())),
        )
    }

    /// 422 Invalid with one cause per `(reason, field, message body)`, worded like
    /// `errors.NewInvalid`: repeated `field: message` lines folded, several listed in brackets.
    pub fn invalid_causes<'a>(
        kind: &str,
        group: &str,
        name: &str,
        causes: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Self {
        let mut details_causes: Vec<Value> = vec![];
        let mut lines: Vec<String> = vec![];
        for (reason, field, msg) in causes {
            details_causes.push(json!({"reason": reason, "message": msg, "field": field}));
            let line = format!("{field}: {msg}");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        let mut details = json!({"name": name, "kind": kind, "causes": details_causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        let qualified = Self::qualified(&Target {
            group,
            plural: kind,
            name,
        });
        let list = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {list}"),
        )
        .with_details(details)
    }

    /// 504 Timeout for a resourceVersion newer than the server's
    /// (`storage.NewTooLargeResourceVersionError`): cause `ResourceVersionTooLarge`, and
    /// `retryAfterSeconds` / `Retry-After` when `retry_after` is not 0.
    pub fn resource_version_too_large(want: u64, current: u64, retry_after: u64) -> Self {
        let mut details = json!({"causes": [
            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
        ]});
        if retry_after > 0 {
            details["retryAfterSeconds"] = json!(retry_after);
        }
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {want}, current: {current}"),
        )
        .with_details(details);
        e.retry_after = (retry_after > 0).then_some(retry_after);
        e
    }

    /// 400 BadRequest.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    /// 403 Forbidden.
    pub fn forbidden(msg: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", msg)
    }

    /// 403 Forbidden about a resource or object, worded as `errors.NewForbidden`:
    /// `<resource>.<group> "<name>" is forbidden: <why>` (no name: `<resource>.<group> is
    /// forbidden: <why>`; no resource, as for a non-resource URL: `forbidden: <why>`).
    pub fn forbidden_on(t: Target<'_>, why: &str) -> Self {
        let message = if t.plural.is_empty() {
            format!("forbidden: {why}")
        } else if t.name.is_empty() {
            format!("{} is forbidden: {why}", Self::qualified(&t))
        } else {
            format!("{} \"{}\" is forbidden: {why}", Self::qualified(&t), t.name)
        };
        let mut details = Self::details_of(&t);
        if let Some(d) = details.as_object_mut() {
            d.retain(|_, v| v.as_str().is_none_or(|s| !s.is_empty()));
        }
        Self::new(403, "Forbidden", message).with_details(details)
    }

    /// 401 Unauthorized, as kube-apiserver answers a request it cannot authenticate.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({what})"),
        )
        .with_details(json!({}))
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(got: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({got}) - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 410 Expired (resourceVersion too old).
    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }

    /// 429 TooManyRequests with Retry-After.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        )
        .with_details(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 InternalError.
    pub fn internal(msg: impl Into<String>) -> Self {
        let msg = msg.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {msg}"),
        )
        .with_details(json!({"causes": [{"message": msg}]}))
    }

    /// 503 ServiceUnavailable.
    pub fn service_unavailable(msg: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", msg)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = (**d).clone();
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut resp = (code, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(ra) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&ra.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// Convenience alias for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_shape() {
        let e = ApiError::not_found(Target {
            group: "apps",
            plural: "deployments",
            name: "web",
        });
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(s["details"]["group"], "apps");
        assert_eq!(s["details"]["kind"], "deployments");
    }

    #[test]
    fn invalid_message_core_group() {
        let e = ApiError::invalid("ConfigMap", "", "Bad", "metadata.name", "nope");
        assert_eq!(
            e.message,
            "ConfigMap \"Bad\" is invalid: metadata.name: nope"
        );
        assert_eq!(e.code, 422);
    }
}
