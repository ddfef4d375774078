//! Admission webhooks as kube-apiserver calls them: the webhooks of the stored
//! `MutatingWebhookConfiguration`s and `ValidatingWebhookConfiguration`s
//! (`admissionregistration.k8s.io/v1`), which of them a request matches (`rules`, `scope`,
//! `namespaceSelector`, `objectSelector`), the `AdmissionReview` v1 sent, and what an answer
//! means (allowed, a JSONPatch, warnings, a denial and its wording, `failurePolicy`).
//!
//! Pure functions on JSON values; [`call`] is the one executor (an HTTP POST). The write path
//! runs them between passes of the engine (`http/admit.rs`,
//! docs/design/apiserver-admission.md).

pub(crate) mod call;
mod review;

pub(crate) use review::{denial, read_response, review_request};

use crate::selector::{LabelSelector, Requirement};
use k8s_openapi::api::admissionregistration::v1 as adm;
use serde_json::Value;
use std::time::Duration;

/// The annotation of a webhook configuration naming the local `host:port` its webhooks with a
/// `clientConfig.service` are called at (kmeta-apiserver runs no Services).
pub(crate) const SERVICE_ADDRESS_ANNOTATION: &str = "kmeta.dev/service-address";

/// What is wrong with a webhook configuration or a webhook's answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum WebhookError {
    /// The stored configuration does not decode as its type.
    #[error("{kind} {name:?} cannot be read: {reason}")]
    Config {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// The configuration's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The webhook could not be called, or answered something that is no AdmissionReview.
    #[error("failed calling webhook {webhook:?}: {reason}")]
    Call {
        /// The webhook's name.
        webhook: String,
        /// Why.
        reason: String,
    },
}

/// The operation of an admission request, as `AdmissionReview` and `rules` spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

impl Op {
    /// The upper-case name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
            Op::Delete => "DELETE",
        }
    }
}

/// What a request is about, for matching and for the review.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    /// The operation.
    pub(crate) op: Op,
    /// API group (`""` for core).
    pub(crate) group: String,
    /// API version.
    pub(crate) version: String,
    /// Kind.
    pub(crate) kind: String,
    /// Resource (plural).
    pub(crate) resource: String,
    /// Subresource (`status`, `scale`), or empty.
    pub(crate) subresource: String,
    /// Namespace of a namespaced object.
    pub(crate) namespace: Option<String>,
    /// Name (may be empty on create with `generateName`).
    pub(crate) name: String,
    /// `dryRun=All`.
    pub(crate) dry_run: bool,
    /// The requesting user and groups.
    pub(crate) user: Option<(String, Vec<String>)>,
    /// The field manager, for the review's `options`.
    pub(crate) field_manager: String,
}

/// Where a webhook is called.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`, resolved through [`SERVICE_ADDRESS_ANNOTATION`]: the URL with the
    /// service's DNS name (`name.namespace.svc`, the name its certificate is checked against),
    /// and the local address that name resolves to (`None` when the annotation is missing).
    Service {
        /// `https://name.namespace.svc:port/path`.
        url: String,
        /// `name.namespace.svc`.
        host: String,
        /// The configured `host:port`.
        address: Option<String>,
    },
}

/// One webhook of a stored configuration, ready to match and call.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    /// The configuration's name (webhooks are called in the order of configuration names).
    pub(crate) config: String,
    /// The webhook's name (`admission webhook "NAME" denied the request`).
    pub(crate) name: String,
    /// Mutating (else validating).
    pub(crate) mutating: bool,
    rules: Vec<adm::RuleWithOperations>,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    /// `failurePolicy: Ignore` (the default, `Fail`, refuses the request when the call fails).
    pub(crate) ignore_failure: bool,
    /// `timeoutSeconds` (default 10).
    pub(crate) timeout: Duration,
    /// `sideEffects` is `None` or `NoneOnDryRun`: the webhook may be called for a dry run.
    pub(crate) dry_run_safe: bool,
    /// `reinvocationPolicy: IfNeeded` (mutating only).
    pub(crate) reinvoke: bool,
    /// `matchConditions`: (name, CEL expression), all of which must hold.
    match_conditions: Vec<(String, String)>,
    /// Where it is called.
    pub(crate) target: Target,
    /// `clientConfig.caBundle`, PEM.
    pub(crate) ca_bundle: Option<Vec<u8>>,
}

/// The webhooks of one stored configuration of `kind` (`MutatingWebhookConfiguration` or
/// `ValidatingWebhookConfiguration`), in their order.
pub(crate) fn parse_configuration(
    kind: &'static str,
    obj: &Value,
) -> Result<Vec<Webhook>, WebhookError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let bad = |reason: String| WebhookError::Config {
        kind,
        name: name.clone(),
        reason,
    };
    let address = obj
        .pointer(&format!(
            "/metadata/annotations/{}",
            SERVICE_ADDRESS_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    // the fields both kinds' webhooks share (k8s-openapi has a type per kind, alike but for
    // the mutating one's reinvocationPolicy)
    macro_rules! common_of {
        ($w:expr) => {
            Common {
                name: $w.name,
                match_conditions: $w.match_conditions.unwrap_or_default(),
                rules: $w.rules.unwrap_or_default(),
                namespace_selector: $w.namespace_selector,
                object_selector: $w.object_selector,
                failure_policy: $w.failure_policy,
                timeout: $w.timeout_seconds,
                side_effects: $w.side_effects,
                client: $w.client_config,
            }
        };
    }
    let mutating = kind == "MutatingWebhookConfiguration";
    let mut out = Vec::new();
    if mutating {
        let c = adm::MutatingWebhookConfiguration::deserialize_from(obj).map_err(bad)?;
        for w in c.webhooks.unwrap_or_default() {
            let reinvoke = w.reinvocation_policy.as_deref() == Some("IfNeeded");
            let common = common_of!(w);
            out.push(common.build(&name, true, reinvoke, address).map_err(&bad)?);
        }
    } else {
        let c = adm::ValidatingWebhookConfiguration::deserialize_from(obj).map_err(bad)?;
        for w in c.webhooks.unwrap_or_default() {
            let common = common_of!(w);
            out.push(common.build(&name, false, false, address).map_err(&bad)?);
        }
    }
    Ok(out)
}

/// Decoding a stored object into its k8s-openapi type, the error as text.
trait DeserializeFrom: Sized {
    fn deserialize_from(obj: &Value) -> Result<Self, String>;
}

impl<T: serde::de::DeserializeOwned> DeserializeFrom for T {
    fn deserialize_from(obj: &Value) -> Result<Self, String> {
        T::deserialize(obj).map_err(|e| e.to_string())
    }
}

/// The fields mutating and validating webhooks share.
struct Common {
    name: String,
    match_conditions: Vec<adm::MatchCondition>,
    rules: Vec<adm::RuleWithOperations>,
    namespace_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    object_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    failure_policy: Option<String>,
    timeout: Option<i32>,
    side_effects: String,
    client: adm::WebhookClientConfig,
}

impl Common {
    fn build(
        self,
        config: &str,
        mutating: bool,
        reinvoke: bool,
        address: Option<&str>,
    ) -> Result<Webhook, String> {
        let target = target(&self.client, address)?;
        let ca_bundle = self.client.ca_bundle.map(|b| b.0);
        Ok(Webhook {
            config: config.to_string(),
            name: self.name,
            mutating,
            rules: self.rules,
            namespace_selector: self.namespace_selector.as_ref().map(label_selector),
            object_selector: self.object_selector.as_ref().map(label_selector),
            ignore_failure: self.failure_policy.as_deref() == Some("Ignore"),
            timeout: Duration::from_secs(self.timeout.unwrap_or(10).clamp(1, 30) as u64),
            dry_run_safe: matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun"),
            reinvoke,
            match_conditions: self
                .match_conditions
                .into_iter()
                .map(|c| (c.name, c.expression))
                .collect(),
            target,
            ca_bundle,
        })
    }
}

fn target(c: &adm::WebhookClientConfig, address: Option<&str>) -> Result<Target, String> {
    match (&c.url, &c.service) {
        (Some(url), None) => Ok(Target::Url(url.clone())),
        (None, Some(s)) => {
            let host = format!("{}.{}.svc", s.name, s.namespace);
            let port = s.port.unwrap_or(443);
            let path = s.path.clone().unwrap_or_default();
            Ok(Target::Service {
                url: format!("https://{host}:{port}{path}"),
                host,
                address: address.map(str::to_string),
            })
        }
        _ => Err("clientConfig: exactly one of url or service is required".into()),
    }
}

/// A `metav1.LabelSelector` as requirements (`matchLabels` and `matchExpressions`).
fn label_selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> LabelSelector {
    let mut reqs: Vec<Requirement> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| Requirement::Eq(k.clone(), v.clone()))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        reqs.push(match e.operator.as_str() {
            "In" => Requirement::In(e.key.clone(), values),
            "NotIn" => Requirement::NotIn(e.key.clone(), values),
            "Exists" => Requirement::Exists(e.key.clone()),
            _ => Requirement::NotExists(e.key.clone()),
        });
    }
    LabelSelector(reqs)
}

impl Webhook {
    /// Whether a rule of the webhook covers the request: operation, group, version, resource
    /// (`*`, `*/*`, `pods/*`, `*/status`, `pods/status`) and scope.
    pub(crate) fn rule_matches(&self, a: &Attributes, namespaced: bool) -> bool {
        self.rules.iter().any(|r| rule_matches(r, a, namespaced))
    }

    /// Whether the selectors admit the request: `objectSelector` on the object's or the old
    /// object's labels, `namespaceSelector` on the labels of the object's namespace (a
    /// Namespace's own; cluster-scoped objects always match).
    pub(crate) fn selectors_match(
        &self,
        object: Option<&Value>,
        old: Option<&Value>,
        ns_labels: Option<&Value>,
    ) -> bool {
        let objects_ok = self
            .object_selector
            .as_ref()
            .is_none_or(|s| [object, old].into_iter().flatten().any(|o| s.matches(o)));
        let ns_ok = match (&self.namespace_selector, ns_labels) {
            (Some(s), Some(labels)) => {
                s.matches(&serde_json::json!({"metadata": {"labels": labels}}))
            }
            _ => true,
        };
        objects_ok && ns_ok
    }
}

impl Webhook {
    /// `matchConditions` (CEL with `object`, `oldObject` and `request`): whether all hold; an
    /// error names the condition that could not be evaluated (the `failurePolicy` decides).
    pub(crate) fn conditions_hold(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, WebhookError> {
        if self.match_conditions.is_empty() {
            return Ok(true);
        }
        let b = crate::cel::Bindings::default()
            .with("object", object.cloned().unwrap_or(Value::Null))
            .with("oldObject", old.cloned().unwrap_or(Value::Null))
            .with("request", cel_request(a));
        for (name, src) in &self.match_conditions {
            let held = crate::cel::Expression::compile(src).and_then(|e| e.evaluate_bool(&b));
            match held {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(WebhookError::Call {
                        webhook: self.name.clone(),
                        reason: format!("failed to evaluate matchCondition {name:?}: {e}"),
                    });
                }
            }
        }
        Ok(true)
    }
}

/// `request` as CEL sees it in `matchConditions` and admission policies (the AdmissionRequest's
/// fields).
pub(crate) fn cel_request(a: &Attributes) -> Value {
    let (user, groups) = a.user.clone().unwrap_or_default();
    serde_json::json!({
        "kind": {"group": a.group, "version": a.version, "kind": a.kind},
        "resource": {"group": a.group, "version": a.version, "resource": a.resource},
        "subResource": a.subresource,
        "requestKind": {"group": a.group, "version": a.version, "kind": a.kind},
        "requestResource": {"group": a.group, "version": a.version, "resource": a.resource},
        "requestSubResource": a.subresource,
        "name": a.name,
        "namespace": a.namespace.clone().unwrap_or_default(),
        "operation": a.op.as_str(),
        "userInfo": {"username": user, "groups": groups},
        "dryRun": a.dry_run,
    })
}

fn listed(list: &Option<Vec<String>>, v: &str) -> bool {
    list.iter().flatten().any(|x| x == "*" || x == v)
}

fn rule_matches(r: &adm::RuleWithOperations, a: &Attributes, namespaced: bool) -> bool {
    let ops_ok = listed(&r.operations, a.op.as_str());
    let scope_ok = match r.scope.as_deref() {
        Some("Cluster") => !namespaced,
        Some("Namespaced") => namespaced,
        _ => true,
    };
    ops_ok
        && scope_ok
        && listed(&r.api_groups, &a.group)
        && listed(&r.api_versions, &a.version)
        && r.resources
            .iter()
            .flatten()
            .any(|res| resource_matches(res, &a.resource, &a.subresource))
}

/// `resources` entries as kube-apiserver's rule matcher reads them: `*` every resource (no
/// subresources), `*/*` everything, `pods/*` pods and all their subresources, `*/status` the
/// status of every resource.
fn resource_matches(pattern: &str, resource: &str, sub: &str) -> bool {
    let (pr, ps) = pattern.split_once('/').unwrap_or((pattern, ""));
    let res_ok = pr == "*" || pr == resource;
    res_ok && (ps == "*" || ps == sub)
}

/// The webhooks to call for a request, in kube-apiserver's order: configurations by name, then
/// each configuration's webhooks in order.
pub(crate) fn ordered(mut hooks: Vec<Webhook>) -> Vec<Webhook> {
    hooks.sort_by(|a, b| a.config.cmp(&b.config));
    hooks
}

/// Labels of a stored Namespace, for `namespaceSelector`.
pub(crate) fn labels_of(obj: &Value) -> Value {
    obj.pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
