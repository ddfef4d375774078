//! What a failed child write means for the sync.

// ---------------------------------------------------------------------------------------------
// child write failures

/// What a failed child write means for the sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// Resolved by itself: the next watch event brings the newer or missing object and its
    /// parent is synced again (an update's Conflict, a NotFound on update or delete, a create
    /// whose name is already held by a child of this parent that the cache has not seen yet).
    LeftToNextSync,
    /// Needs someone to act: reported on the parent (event, condition), retried with backoff.
    /// The explanation, when there is more to say than the API error.
    Failed(Option<String>),
}

/// Classifies a failed child write: `op` is `create`, `update` or `delete`, `code` the HTTP
/// status, `holder` (creates answered 409 only) the controller UID of the object that holds the
/// name (`Some("")` when it has no controller, `None` when unknown), `parent_uid` this parent's.
pub fn child_write_failure(
    op: &str,
    code: Option<u16>,
    holder: Option<Option<String>>,
    parent_uid: &str,
) -> WriteFailure {
    match (op, code) {
        ("create", Some(409)) => match holder.flatten() {
            Some(uid) if uid == parent_uid => WriteFailure::LeftToNextSync,
            Some(uid) if uid.is_empty() => WriteFailure::Failed(Some(
                "the name is held by an object no controller owns (it is adopted only if it matches the parent's selector)".into(),
            )),
            Some(_) => WriteFailure::Failed(Some(
                "the name is held by an object another controller owns".into(),
            )),
            None => WriteFailure::LeftToNextSync,
        },
        ("create", Some(404)) => WriteFailure::Failed(Some(
            "the namespace does not exist".into(),
        )),
        ("update", Some(409)) | ("update" | "delete", Some(404)) => WriteFailure::LeftToNextSync,
        _ => WriteFailure::Failed(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn child_write_failures_that_need_a_person_are_failures() {
        use WriteFailure::*;
        let ours = Some(Some("p1".to_owned()));
        assert_eq!(
            child_write_failure("create", Some(409), ours, "p1"),
            LeftToNextSync
        );
        assert!(matches!(
            child_write_failure("create", Some(409), Some(Some("other".into())), "p1"),
            Failed(Some(_))
        ));
        assert!(matches!(
            child_write_failure("create", Some(409), Some(Some(String::new())), "p1"),
            Failed(Some(_))
        ));
        assert_eq!(
            child_write_failure("create", Some(409), None, "p1"),
            LeftToNextSync
        );
        assert!(matches!(
            child_write_failure("create", Some(404), None, "p1"),
            Failed(Some(_))
        ));
        assert_eq!(
            child_write_failure("update", Some(409), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("update", Some(404), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("delete", Some(404), None, "p1"),
            LeftToNextSync
        );
        assert_eq!(
            child_write_failure("create", Some(422), None, "p1"),
            Failed(None)
        );
        assert_eq!(
            child_write_failure("update", Some(403), None, "p1"),
            Failed(None)
        );
    }
}
