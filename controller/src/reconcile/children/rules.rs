//! The list rules a child type is merged with: dynapply's table, or the API server's OpenAPI
//! schema where served (`kmeta.dev/schema-atomic-lists`).

use super::*;

/// The annotation on a CompositeController or DecoratorController that makes `atomic` in the
/// API server's OpenAPI v3 documents authoritative for its children's lists, as kubectl and
/// server-side apply treat it: `"true"`. Without it such a list whose items carry a conventional
/// merge key is merged by that key, as Metacontroller does (see [`served_rules`]).
pub const SCHEMA_ATOMIC_ANNOTATION: &str = "kmeta.dev/schema-atomic-lists";

/// Whether a controller object's `annotations` carry `kmeta.dev/schema-atomic-lists: "true"`.
pub fn schema_atomic_lists(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(SCHEMA_ATOMIC_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// CRD groups always contain a dot; built-in groups have none or end in `.k8s.io`.
fn is_crd_group(group: &str) -> bool {
    group.contains('.') && !group.ends_with(".k8s.io")
}

/// The rules a child kind is merged with when the API server serves its schema (`served`, from
/// [`dynapply::ListRules::from_openapi_v3`]). With `schema_atomic` (the controller's opt-in), or
/// for a custom resource (whose CRD's markers kmeta has always followed), they are the schema's.
/// Otherwise an `atomic` list of the schema does not override the merge-key convention: the
/// rules are kmeta's built-in table of the kind (as before kmeta read OpenAPI documents) plus
/// the schema's maps and sets. A list item another actor added is then kept wherever
/// Metacontroller's convention keeps it (an EndpointSlice's `ports`, keyed by `port`).
pub fn served_rules(
    api_version: &str,
    kind: &str,
    group: &str,
    served: dynapply::ListRules,
    schema_atomic: bool,
) -> dynapply::ListRules {
    if schema_atomic || is_crd_group(group) {
        return served;
    }
    dynapply::ListRules::builtin(api_version, kind).merge(served.without_atomic())
}

/// The list markers of a child type could not be read (see [`list_rules`]).
#[derive(Debug, thiserror::Error)]
#[error("reading the list markers of {resource}: {}", crate::runtime::kapi::describe(.source))]
pub struct SchemaReadError {
    /// What was read: the CustomResourceDefinition `<plural>.<group>`, or the OpenAPI v3
    /// document of the child's group-version.
    pub resource: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl SchemaReadError {
    /// A failed read of the OpenAPI v3 document of `api_version`.
    fn openapi(api_version: &str, source: kube::Error) -> Self {
        SchemaReadError {
            resource: format!(
                "the OpenAPI v3 document /openapi/v3/{}",
                crate::ops::openapi::group_version_path(api_version)
            ),
            source,
        }
    }
}

/// The list rules dynapply merges a child type with: from the API server's OpenAPI v3 document
/// of its group-version (`x-kubernetes-list-type`/`list-map-keys`, the patch merge keys, the
/// preserve-unknown-fields subtrees), for built-in kinds, CRDs and aggregated APIs alike; read
/// once per build, the documents cached ([`crate::ops::openapi`]). A server that does not serve
/// the kind's schema gets the fallback (logged once): kmeta's built-in table of the kind, plus
/// the markers of its CRD's schema. A document or CRD that cannot be read fails the build, to be
/// tried again: merging without its markers would treat its lists and preserve-unknown subtrees
/// wrongly — under server-side apply a pod template's containers would be sent without the live
/// ones, and a sidecar another writer injected would be lost.
///
/// `schema_atomic` is the controller's `kmeta.dev/schema-atomic-lists` opt-in: see
/// [`served_rules`].
pub async fn list_rules(
    ctx: &Context,
    r: &Resolved,
    schema_atomic: bool,
) -> Result<dynapply::ListRules, SchemaReadError> {
    let served = ctx
        .openapi
        .list_rules(
            &ctx.client,
            &ctx.wiring.metrics,
            ctx.resources.generation(),
            &r.api.api_version,
            &r.api.kind,
        )
        .await
        .map_err(|source| SchemaReadError::openapi(&r.api.api_version, source))?;
    match served {
        Ok(rules) => {
            return Ok(served_rules(
                &r.api.api_version,
                &r.api.kind,
                &r.api.group,
                rules,
                schema_atomic,
            ));
        }
        Err(why) => ctx.openapi.log_fallback(&r.watch_key(), &why),
    }
    let builtin = dynapply::ListRules::builtin(&r.api.api_version, &r.api.kind);
    if !is_crd_group(&r.api.group) {
        return Ok(builtin);
    }
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(ctx.client.clone());
    let resource = format!("{}.{}", r.api.plural, r.api.group);
    let crd = crds
        .get_opt(&resource)
        .await
        .map_err(|source| SchemaReadError {
            resource: format!("the CustomResourceDefinition {resource}"),
            source,
        })?;
    let Some(crd) = crd else {
        return Ok(builtin);
    };
    match serde_json::to_value(crd)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            dynapply::ListRules::from_crd(&v, Some(&r.api.version)).map_err(|e| e.to_string())
        }) {
        Ok(from_schema) => Ok(builtin.merge(from_schema)),
        Err(e) => {
            tracing::warn!(resource = %r.watch_key(), error = %e, "ignoring crd list markers");
            Ok(builtin)
        }
    }
}

/// A `fieldRules[]` entry of a child type that kmeta refuses: its path does not parse, names
/// no field of the kind, or names one kmeta cannot leave to others. The controller is not
/// started (a `CreateError` event and log line name the path).
#[derive(Debug, thiserror::Error)]
#[error("fieldRules of {resource}: {source}")]
pub struct FieldRuleError {
    /// The child resource, `<apiVersion> <resource>`.
    pub resource: String,
    /// What is wrong, naming the path.
    #[source]
    pub source: dynapply::Error,
}

/// Fields that identify a child or tie it to its parent: never left to others.
const OWN_FIELDS: [&str; 5] = [
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.ownerReferences",
];

/// The field rules of a child type (`api_version`, `kind`) as dynapply takes them, each path
/// parsed and, where `doc` (the group-version's OpenAPI v3 document) has the kind's schema,
/// checked to name a field of it ([`dynapply::FieldPath::check_openapi_v3`]).
pub fn field_rules(
    spec: &[crate::api::FieldRule],
    doc: Option<&Value>,
    api_version: &str,
    kind: &str,
) -> Result<Vec<dynapply::FieldRule>, dynapply::Error> {
    let mut out = Vec::with_capacity(spec.len());
    for rule in spec {
        let path = dynapply::FieldPath::parse(&rule.path)?;
        let text = path.to_string();
        // the field itself, a field inside it, or a map holding it (`metadata`)
        if let Some(own) = OWN_FIELDS.iter().find(|f| {
            text == **f
                || text.starts_with(&format!("{f}."))
                || text.starts_with(&format!("{f}["))
                || f.starts_with(&format!("{text}."))
        }) {
            return Err(dynapply::Error::InvalidFieldPath {
                path: rule.path.clone(),
                message: format!(
                    "`{own}` identifies the child or ties it to its parent; kmeta keeps it"
                ),
            });
        }
        if let Some(doc) = doc {
            path.check_openapi_v3(doc, api_version, kind)?;
        }
        out.push(dynapply::FieldRule {
            name: rule.name.clone().unwrap_or_else(|| rule.path.clone()),
            path,
            mode: match rule.mode.unwrap_or_default() {
                crate::api::FieldRuleMode::HandOff => dynapply::FieldMode::HandOff,
                crate::api::FieldRuleMode::Ignore => dynapply::FieldMode::Ignore,
            },
        });
    }
    Ok(out)
}

/// [`field_rules`] for the resolved child type `r`, with the OpenAPI v3 document the API server
/// serves for it (none served: the paths are only parsed). A document that cannot be read is
/// a [`SchemaReadError`], tried again.
pub async fn checked_field_rules(
    ctx: &Context,
    r: &Resolved,
    spec: &[crate::api::FieldRule],
) -> Result<Vec<dynapply::FieldRule>, FieldRulesError> {
    if spec.is_empty() {
        return Ok(Vec::new());
    }
    let doc = ctx
        .openapi
        .group_version(
            &ctx.client,
            &ctx.wiring.metrics,
            ctx.resources.generation(),
            &r.api.api_version,
        )
        .await
        .map_err(|source| SchemaReadError::openapi(&r.api.api_version, source))?;
    field_rules(spec, doc.as_deref().ok(), &r.api.api_version, &r.api.kind).map_err(|source| {
        FieldRulesError::Refused(FieldRuleError {
            resource: format!("{} {}", r.api.api_version, r.api.plural),
            source,
        })
    })
}

/// Why a child type's field rules are not taken: its schema could not be read (tried again),
/// or a rule is refused.
#[derive(Debug, thiserror::Error)]
pub enum FieldRulesError {
    /// The OpenAPI v3 document could not be read.
    #[error(transparent)]
    Schema(#[from] SchemaReadError),
    /// A rule is refused.
    #[error(transparent)]
    Refused(#[from] FieldRuleError),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use dynapply::{ListRule, ListRules};

    /// An EndpointSlice's rules as its schema gives them: `ports` and `endpoints` atomic.
    fn slice_schema() -> ListRules {
        let mut rules = ListRules::new();
        rules.set("ports", ListRule::Atomic);
        rules.set("endpoints", ListRule::Atomic);
        rules.set("endpoints.addresses", ListRule::Set);
        rules
    }

    #[test]
    fn schema_atomic_lists_is_opt_in() {
        assert!(!schema_atomic_lists(None));
        let mut a = BTreeMap::new();
        assert!(!schema_atomic_lists(Some(&a)));
        a.insert(SCHEMA_ATOMIC_ANNOTATION.to_owned(), "yes".to_owned());
        assert!(!schema_atomic_lists(Some(&a)));
        a.insert(SCHEMA_ATOMIC_ANNOTATION.to_owned(), "true".to_owned());
        assert!(schema_atomic_lists(Some(&a)));
    }

    #[test]
    fn atomic_from_the_schema_applies_only_when_opted_in() {
        let av = "discovery.k8s.io/v1";
        let by_default = served_rules(
            av,
            "EndpointSlice",
            "discovery.k8s.io",
            slice_schema(),
            false,
        );
        // the convention decides (`port` keys the ports), sets stay
        assert_eq!(by_default.get("ports"), None);
        assert_eq!(by_default.get("endpoints"), None);
        assert_eq!(by_default.get("endpoints.addresses"), Some(&ListRule::Set));
        assert_eq!(by_default.get("metadata.finalizers"), Some(&ListRule::Set));
        let opted_in = served_rules(
            av,
            "EndpointSlice",
            "discovery.k8s.io",
            slice_schema(),
            true,
        );
        assert_eq!(opted_in.get("ports"), Some(&ListRule::Atomic));
    }

    #[test]
    fn by_default_the_table_keeps_its_rules() {
        // Kubernetes 1.37 marks a ServiceAccount's imagePullSecrets and a RoleBinding's subjects
        // atomic; kmeta merged the first by `name` and replaced the second before it read schemas
        let mut schema = ListRules::new();
        schema.set("imagePullSecrets", ListRule::Atomic);
        schema.set("secrets", ListRule::Map(vec!["name".to_owned()]));
        let sa = served_rules("v1", "ServiceAccount", "", schema.clone(), false);
        assert_eq!(
            sa.get("imagePullSecrets"),
            Some(&ListRule::Map(vec!["name".to_owned()]))
        );
        let sa = served_rules("v1", "ServiceAccount", "", schema, true);
        assert_eq!(sa.get("imagePullSecrets"), Some(&ListRule::Atomic));
        let mut schema = ListRules::new();
        schema.set("subjects", ListRule::Atomic);
        let rb = "rbac.authorization.k8s.io";
        let binding = served_rules(&format!("{rb}/v1"), "RoleBinding", rb, schema, false);
        assert_eq!(binding.get("subjects"), Some(&ListRule::Atomic));
    }

    #[test]
    fn a_custom_resource_keeps_its_schema_atomic_lists() {
        let mut schema = ListRules::new();
        schema.set("spec.hosts", ListRule::Atomic);
        let rules = served_rules("example.com/v1", "Thing", "example.com", schema, false);
        assert_eq!(rules.get("spec.hosts"), Some(&ListRule::Atomic));
    }

    #[test]
    fn field_rules_are_parsed_named_and_own_fields_refused() {
        let rule = |path: &str| crate::api::FieldRule {
            path: path.to_owned(),
            mode: None,
            name: None,
        };
        let mut hpa = rule("spec.replicas");
        hpa.name = Some("hpa".to_owned());
        let rules = field_rules(&[hpa], None, "apps/v1", "Deployment").unwrap();
        assert_eq!(rules[0].name, "hpa");
        assert_eq!(rules[0].mode, dynapply::FieldMode::HandOff);
        for bad in [
            "metadata.name",
            "kind",
            "metadata.ownerReferences[uid=x]",
            "metadata",
        ] {
            let err = field_rules(&[rule(bad)], None, "apps/v1", "Deployment").unwrap_err();
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
        let err = field_rules(&[rule("spec.containers[0]")], None, "v1", "Pod").unwrap_err();
        assert!(err.to_string().contains("position"), "{err}");
        // checked against the schema where one is served
        let doc = serde_json::json!({"components": {"schemas": {"D": {
            "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
            "properties": {"spec": {"properties": {"replicas": {"type": "integer"}}}}}}}});
        let err = field_rules(&[rule("spec.replica")], Some(&doc), "apps/v1", "Deployment")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`spec.replica`") && err.contains("no field"),
            "{err}"
        );
    }
}
