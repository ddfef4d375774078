//! URL paths of the Kubernetes API parsed into a [`Route`].

/// Parsed request path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/readyz`, `/livez`
    Health,
    /// `/api`
    Api,
    /// `/apis`
    Apis,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    GroupVersion(String, String),
    /// `/openapi/...`
    OpenApi,
    /// A resource request.
    Resource {
        /// Group.
        group: String,
        /// Version.
        version: String,
        /// Namespace from the URL.
        ns: Option<String>,
        /// Plural.
        plural: String,
        /// Name.
        name: Option<String>,
        /// Subresource.
        sub: Option<String>,
    },
    /// Unknown.
    NotFound,
}

/// Parse a URL path into a route.
pub(crate) fn parse_path(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["openapi", ..] => return Route::OpenApi,
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let s = |x: &&str| x.to_string();
    let r = |ns: Option<&&str>, plural: &&str, name: Option<&&str>, sub: Option<&&str>| {
        Route::Resource {
            group: group.to_string(),
            version: version.to_string(),
            ns: ns.map(s),
            plural: plural.to_string(),
            name: name.map(s),
            sub: sub.map(s),
        }
    };
    match rest {
        [] => Route::GroupVersion(group.to_string(), version.to_string()),
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            match tail {
                [] => r(Some(ns), plural, None, None),
                [name] => r(Some(ns), plural, Some(name), None),
                [name, sub] => r(Some(ns), plural, Some(name), Some(sub)),
                _ => Route::NotFound,
            }
        }
        [plural] => r(None, plural, None, None),
        [plural, name] => r(None, plural, Some(name), None),
        [plural, name, sub] => r(None, plural, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/api/v1/namespaces"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: None,
                plural: "namespaces".into(),
                name: None,
                sub: None
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/foo/status"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: None,
                plural: "namespaces".into(),
                name: Some("foo".into()),
                sub: Some("status".into())
            }
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/foo/configmaps/x"),
            Route::Resource {
                group: "".into(),
                version: "v1".into(),
                ns: Some("foo".into()),
                plural: "configmaps".into(),
                name: Some("x".into()),
                sub: None
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1/namespaces/a/deployments/d/scale"),
            Route::Resource {
                group: "apps".into(),
                version: "v1".into(),
                ns: Some("a".into()),
                plural: "deployments".into(),
                name: Some("d".into()),
                sub: Some("scale".into())
            }
        );
        assert_eq!(
            parse_path("/apis/apps/v1"),
            Route::GroupVersion("apps".into(), "v1".into())
        );
        assert_eq!(parse_path("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(
            parse_path("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:x"),
            Route::Resource {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                ns: None,
                plural: "clusterroles".into(),
                name: Some("system:x".into()),
                sub: None
            }
        );
        assert_eq!(parse_path("/nope"), Route::NotFound);
    }
}
