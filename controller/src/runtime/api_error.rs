//! An API error as a person reads it, for every message kmeta composes from one (events,
//! conditions, CLI errors): kube's own `Display` of an API server's answer appends the whole
//! `Status` struct in Rust debug form.

/// An API error as a person reads it: for an answer of the API server, its message with the
/// code and reason (`configmaps "x" already exists (409 AlreadyExists)`), never kube's
/// `ApiError: … (Status { … })` with the whole status struct dumped; any other error as it
/// displays itself.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let status = format!("{} {}", s.code, s.reason);
            match s.message.as_str() {
                "" => status.trim_end().to_owned(),
                m => format!("{m} ({})", status.trim_end()),
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod describe_tests {
    use super::describe;

    #[test]
    fn an_api_error_reads_as_its_message_code_and_reason() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 409, "reason": "AlreadyExists",
            "message": "configmaps \"x\" already exists",
            "details": {"name": "x", "kind": "configmaps"}}))
        .unwrap_or_default();
        let e = kube::Error::Api(Box::new(status));
        assert_eq!(
            describe(&e),
            "configmaps \"x\" already exists (409 AlreadyExists)"
        );
        assert!(e.to_string().contains("Status {"), "kube's own: {e}");
        let bare = kube::Error::Api(Box::new(kube::core::Status {
            code: 500,
            ..Default::default()
        }));
        assert_eq!(describe(&bare), "500");
    }
}
