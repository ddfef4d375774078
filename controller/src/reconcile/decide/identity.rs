//! Which identity a controller's child writes and related reads are made as: kmeta's own, or a
//! ServiceAccount kmeta impersonates (`spec.serviceAccountName`, `--default-service-account`).

use std::fmt;

/// A ServiceAccount kmeta impersonates for one controller's writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ServiceAccountRef {
    /// The user name kube-apiserver gives it (`system:serviceaccount:<namespace>:<name>`), what
    /// `Impersonate-User` carries. Its groups (`system:serviceaccounts`,
    /// `system:serviceaccounts:<namespace>`) are added by the API server when no
    /// `Impersonate-Group` is sent, so kmeta sends none and needs no `impersonate` on groups.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

/// What a controller says about its ServiceAccount (`spec.serviceAccountName`,
/// `spec.serviceAccountNamespace`; an empty string counts as unset).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceAccountSpec<'a> {
    /// `spec.serviceAccountName`.
    pub name: Option<&'a str>,
    /// `spec.serviceAccountNamespace`.
    pub namespace: Option<&'a str>,
}

/// Why no identity can be chosen for a parent: nothing of it is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A cluster-scoped parent has no namespace to look the ServiceAccount up in.
    #[error(
        "{parent} is cluster-scoped: set spec.serviceAccountNamespace on the controller to say where ServiceAccount {name} is (kmeta writes nothing for it as its own identity{lockdown})"
    )]
    ClusterScoped {
        /// The parent (`Kind name`).
        parent: String,
        /// The ServiceAccount's name.
        name: String,
        /// Text naming `--default-service-account` when it chose the name.
        lockdown: &'static str,
    },
    /// `spec.serviceAccountNamespace` without a name to go with it.
    #[error(
        "spec.serviceAccountNamespace is {namespace:?} but spec.serviceAccountName is not set (and kmeta runs without --default-service-account)"
    )]
    NamespaceWithoutName {
        /// The namespace given.
        namespace: String,
    },
    /// The ServiceAccount's user name cannot be sent in `Impersonate-User`.
    #[error("impersonating {0}: its user name is not a valid HTTP header value")]
    Impersonation(String),
}

/// The identity the writes for a parent in `parent_namespace` (empty: cluster-scoped; `parent`
/// names it in errors) are made as: `None` for kmeta's own (no ServiceAccount named, no
/// `default` from `--default-service-account`, Metacontroller's behaviour); else the
/// ServiceAccount named by the controller, or `default`, in the controller's
/// `serviceAccountNamespace`, else the parent's namespace (as Flux's lockdown chooses it). A
/// cluster-scoped parent without `serviceAccountNamespace` is refused: kmeta never falls back to
/// its own identity where a ServiceAccount was asked for.
pub fn impersonation_for(
    spec: ServiceAccountSpec<'_>,
    parent: &str,
    parent_namespace: &str,
    default: Option<&str>,
) -> Result<Option<ServiceAccountRef>, IdentityError> {
    let set = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned);
    let namespace = set(spec.namespace);
    let (name, lockdown) = match (set(spec.name), set(default)) {
        (Some(n), _) => (n, ""),
        (None, Some(d)) => (d, " under --default-service-account"),
        (None, None) => {
            return match namespace {
                Some(namespace) => Err(IdentityError::NamespaceWithoutName { namespace }),
                None => Ok(None),
            };
        }
    };
    let namespace = match (namespace, parent_namespace) {
        (Some(ns), _) => ns,
        (None, "") => {
            return Err(IdentityError::ClusterScoped {
                parent: parent.to_owned(),
                name,
                lockdown,
            });
        }
        (None, ns) => ns.to_owned(),
    };
    Ok(Some(ServiceAccountRef { namespace, name }))
}

/// Whether a 403's message is an authorization refusal (RBAC, or any authorizer), which a role
/// can grant, rather than admission refusing the object (a webhook, a ValidatingAdmissionPolicy
/// whose binding asks for 403, a ResourceQuota), which no role changes. kube-apiserver words
/// every authorizer refusal `User "NAME" cannot VERB resource "PLURAL" ...`
/// (`k8s.io/apiserver/pkg/endpoints/handlers/responsewriters.forbiddenMessage`), and RBAC's
/// escalation check `user "NAME" (groups=...) is attempting to grant RBAC permissions not
/// currently held` (`k8s.io/kubernetes/pkg/registry/rbac/validation`).
pub fn is_authorization_refusal(message: &str) -> bool {
    if message.contains("is attempting to grant RBAC permissions not currently held") {
        return true;
    }
    message
        .split_once("User \"")
        .and_then(|(_, rest)| rest.split_once("\" cannot "))
        .is_some_and(|(_, rest)| rest.contains(" resource \"") || rest.contains(" path \""))
}

/// What a child write refused by the API server (403) adds to its `ChildWriteFailed` message:
/// the identity it was made as, with the verb and resource to grant it.
pub fn forbidden_hint(verb: &str, resource: &str, identity: Option<&ServiceAccountRef>) -> String {
    match identity {
        Some(sa) => format!(
            "written as {sa} (the controller's ServiceAccount): it may not {verb} {resource}; grant it that (kmeta rbac --controller prints its role) or change the hook"
        ),
        None => format!(
            "written as kmeta's own identity: it may not {verb} {resource}; grant it that (kmeta rbac prints its role)"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec<'a>(name: Option<&'a str>, namespace: Option<&'a str>) -> ServiceAccountSpec<'a> {
        ServiceAccountSpec { name, namespace }
    }

    fn sa(namespace: &str, name: &str) -> Option<ServiceAccountRef> {
        Some(ServiceAccountRef {
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    #[test]
    fn without_a_service_account_kmeta_writes_as_itself() {
        assert_eq!(
            impersonation_for(spec(None, None), "Thing p", "team", None),
            Ok(None)
        );
        // an empty name is unset, as a Pod's serviceAccountName
        assert_eq!(
            impersonation_for(spec(Some(""), None), "Thing p", "team", Some("")),
            Ok(None)
        );
    }

    #[test]
    fn a_named_service_account_is_in_the_parents_namespace_unless_one_is_given() {
        assert_eq!(
            impersonation_for(spec(Some("bot"), None), "Thing p", "team", None),
            Ok(sa("team", "bot"))
        );
        assert_eq!(
            impersonation_for(spec(Some("bot"), Some("ops")), "Thing p", "team", None),
            Ok(sa("ops", "bot"))
        );
        // the controller's own name wins over the lockdown's
        assert_eq!(
            impersonation_for(spec(Some("bot"), None), "Thing p", "team", Some("lock")),
            Ok(sa("team", "bot"))
        );
        assert_eq!(
            sa("team", "bot").unwrap().username(),
            "system:serviceaccount:team:bot"
        );
    }

    #[test]
    fn the_default_service_account_makes_impersonation_mandatory() {
        assert_eq!(
            impersonation_for(spec(None, None), "Thing p", "team", Some("lock")),
            Ok(sa("team", "lock"))
        );
        assert_eq!(
            impersonation_for(spec(None, Some("ops")), "Thing p", "team", Some("lock")),
            Ok(sa("ops", "lock"))
        );
    }

    #[test]
    fn a_cluster_scoped_parent_needs_the_namespace_and_is_refused_without_it() {
        assert_eq!(
            impersonation_for(spec(Some("bot"), Some("ops")), "Cluster c", "", None),
            Ok(sa("ops", "bot"))
        );
        let e = impersonation_for(spec(Some("bot"), None), "Cluster c", "", None).unwrap_err();
        assert!(e.to_string().contains("Cluster c is cluster-scoped"), "{e}");
        assert!(
            e.to_string().contains("spec.serviceAccountNamespace"),
            "{e}"
        );
        let e = impersonation_for(spec(None, None), "Cluster c", "", Some("lock")).unwrap_err();
        assert!(e.to_string().contains("--default-service-account"), "{e}");
    }

    #[test]
    fn a_namespace_without_a_name_is_an_error_not_kmetas_identity() {
        let e = impersonation_for(spec(None, Some("ops")), "Thing p", "team", None).unwrap_err();
        assert_eq!(
            e,
            IdentityError::NamespaceWithoutName {
                namespace: "ops".into()
            }
        );
    }

    #[test]
    fn a_refused_write_names_the_identity_verb_and_resource() {
        let hint = forbidden_hint(
            "create",
            "clusterrolebindings.rbac.authorization.k8s.io",
            sa("team", "bot").as_ref(),
        );
        assert!(hint.contains("ServiceAccount team/bot"), "{hint}");
        assert!(
            hint.contains("create clusterrolebindings.rbac.authorization.k8s.io"),
            "{hint}"
        );
        assert!(forbidden_hint("patch", "configmaps", None).contains("kmeta's own identity"));
    }

    #[test]
    fn only_an_authorizer_refusal_is_one_a_role_can_grant() {
        let rbac = r#"configmaps "c" is forbidden: User "system:serviceaccount:team:bot" cannot create resource "configmaps" in API group "" in the namespace "team""#;
        assert!(is_authorization_refusal(rbac));
        let cluster = r#"User "kmeta" cannot patch resource "widgets" in API group "example.com" at the cluster scope"#;
        assert!(is_authorization_refusal(cluster));
        let escalation = r#"clusterrolebindings.rbac.authorization.k8s.io "b" is forbidden: user "system:serviceaccount:team:writer" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#;
        assert!(is_authorization_refusal(escalation));
        for admission in [
            r#"admission webhook "deny.example.com" denied the request: no sidecars here"#,
            r#"configmaps "c" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: size"#,
            r#"configmaps "c" is forbidden: exceeded quota: q, requested: count/configmaps=1"#,
            r#"admission webhook "x" denied the request: User "a" cannot be trusted"#,
        ] {
            assert!(!is_authorization_refusal(admission), "{admission}");
        }
    }
}
