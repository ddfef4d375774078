//! The `metacontroller.k8s.io/v1alpha1` API types: `CompositeController`,
//! `DecoratorController` and `ControllerRevision`, with Metacontroller v4.17's field names.

pub mod crds;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every kmeta/Metacontroller CRD.
pub const GROUP: &str = "metacontroller.k8s.io";
/// The served version.
pub const VERSION: &str = "v1alpha1";

/// A parent→children controller: kmeta watches `parentResource` objects, calls the sync hook with
/// each parent and its observed children, and applies the desired children it returns.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "metacontroller.k8s.io",
    version = "v1alpha1",
    kind = "CompositeController",
    doc = "CompositeController: a parent resource, its child resources and the webhooks that compute the desired children (Metacontroller v4.17 compatible).",
    plural = "compositecontrollers",
    singular = "compositecontroller",
    shortname = "cc",
    shortname = "cctl",
    status = "CompositeControllerStatus",
    annotation("api-approved.kubernetes.io", "unapproved, request not yet submitted")
)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerSpec {
    /// The parent resource this controller manages.
    pub parent_resource: CompositeControllerParentResourceRule,
    /// The kinds of children the sync hook may return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_resources: Option<Vec<CompositeControllerChildResourceRule>>,
    /// The webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<CompositeControllerHooks>,
    /// Per-host TLS and credentials shared by the hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_configs: Option<Vec<EndpointConfig>>,
    /// Re-sync every parent this often (seconds, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    /// Select children by `controller-uid=<parent uid>` instead of the parent's `spec.selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_selector: Option<bool>,
    /// kmeta extension (Metacontroller ignores it): the ServiceAccount whose identity kmeta takes
    /// (`Impersonate-User: system:serviceaccount:<namespace>:<name>`) for this controller's
    /// child or attachment writes, adoptions and releases, and the related reads its customize
    /// hook selects; kmeta's own identity keeps the watches, the parents' status and finalizers,
    /// events and Leases. Unset: kmeta's own identity, as Metacontroller (or `kmeta run
    /// --default-service-account`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// kmeta extension: the namespace of `serviceAccountName`. Default: the parent's namespace;
    /// required for cluster-scoped parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_namespace: Option<String>,
}

/// CompositeController status (empty in Metacontroller; kmeta writes conditions).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CompositeControllerStatus {
    /// kmeta extension: `FieldRulesAccepted=False` while a `fieldRules` path is refused, its
    /// message naming the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ControllerCondition>>,
}

/// A condition kmeta sets on a CompositeController or DecoratorController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerCondition {
    /// The condition type, e.g. `FieldRulesAccepted`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason, e.g. `FieldPathRefused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What is wrong, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `spec.parentResource`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerParentResourceRule {
    /// e.g. `ctl.example.com/v1`.
    pub api_version: String,
    /// The plural resource name, e.g. `things`.
    pub resource: String,
    /// Only parents matching this selector are handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Fields of the parent that identify a ControllerRevision (rolling updates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history: Option<CompositeControllerRevisionHistory>,
    /// Do not sync on parent updates that change only the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// `spec.parentResource.revisionHistory`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerRevisionHistory {
    /// Dot paths; default `["spec"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_paths: Option<Vec<String>>,
}

/// One entry of `spec.childResources`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerChildResourceRule {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// Plural resource name, e.g. `deployments`.
    pub resource: String,
    /// How existing children are updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<CompositeControllerChildUpdateStrategy>,
    /// kmeta extension (Metacontroller ignores it): what kmeta does when a child differs from
    /// what the hook wants. Default `Enforce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<DriftPolicy>,
    /// kmeta extension (Metacontroller ignores it): single fields of these children left to
    /// other writers (an HPA's `spec.replicas`, a VPA's
    /// `spec.template.spec.containers[name=app].resources`), addressed by merge key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_rules: Option<Vec<FieldRule>>,
}

/// One entry of `childResources[].fieldRules` or `attachments[].fieldRules` (kmeta extension):
/// a field of the children left to another writer (docs/design/field-handoff.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldRule {
    /// The field, from the object's top, list items selected by merge key:
    /// `spec.replicas`, `spec.template.spec.containers[name=app].resources`,
    /// `metadata.annotations[example.com/owner]`. Positions (`containers[0]`) are refused.
    pub path: String,
    /// `HandOff` (default): set when the child (or the list item holding the field) is created,
    /// never changed afterwards. `Ignore`: never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FieldRuleMode>,
    /// The name reports give the rule (e.g. `hpa`); default: the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `fieldRules[].mode`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FieldRuleMode {
    /// kmeta sets the field when it creates the child, or the list item holding the field, and
    /// never changes or removes it afterwards. The default.
    #[default]
    HandOff,
    /// kmeta never sends the field, not even on create.
    Ignore,
}

/// `childResources[].driftPolicy` (kmeta extension).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftPolicy {
    /// Restore what the hook wants on every sync (under server-side apply, with force; the
    /// fields taken from other managers are named in a `ChildFieldsTaken` event). The default.
    #[default]
    Enforce,
    /// Write what the hook changes, but never overwrite others' changes: a drifted child (or,
    /// under server-side apply, a conflict) is reported in a `ChildDrift` event and condition
    /// and the `kmeta_child_drift` gauge, and left as it is.
    Report,
    /// Create children only; never update (or recreate) an existing one.
    Ignore,
}

/// `childResources[].updateStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerChildUpdateStrategy {
    /// Default `OnDelete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ChildUpdateMethod>,
    /// Gates for rolling updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_checks: Option<ChildUpdateStatusChecks>,
}

/// Update methods for children.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ChildUpdateMethod {
    /// Never update an existing child (the default).
    #[default]
    OnDelete,
    /// Delete a changed child; it is recreated on a later sync.
    Recreate,
    /// Update the child in place (PUT of the merged object).
    InPlace,
    /// Recreate, one child at a time, gated by status checks.
    RollingRecreate,
    /// InPlace, one child at a time, gated by status checks.
    RollingInPlace,
}

/// `updateStrategy.statusChecks`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildUpdateStatusChecks {
    /// Conditions a child must have before the rollout moves on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<StatusConditionCheck>>,
}

/// One status condition check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusConditionCheck {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Required status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Required reason, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `spec.hooks` of a CompositeController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerHooks {
    /// Called to select related objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
    /// Called for every sync of a live parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<Hook>,
    /// Called instead of sync while the parent is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
    /// Accepted for compatibility; unused by Metacontroller and kmeta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_update_child: Option<Hook>,
    /// Accepted for compatibility; unused by Metacontroller and kmeta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_update_child: Option<Hook>,
}

/// A hook: version plus transport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// Wire version; default `v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<HookVersion>,
    /// The webhook to call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// kmeta: a Jsonnet program evaluated by kmeta instead of a webhook (exactly one of the two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonnet: Option<JsonnetHook>,
    /// kmeta: a kro resource graph evaluated by kmeta with CEL instead of a webhook (exactly one
    /// of `webhook`, `jsonnet` and `cel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<CelHook>,
}

/// `cel` of a hook (kmeta): a kro ResourceGraphDefinition's graph, evaluated in-process for each
/// parent (an instance): its resources' templates and `${...}` expressions give the desired
/// children, its status expressions the parent's status. What kmeta generates for a
/// ResourceGraphDefinition it serves; docs/design/cel-hooks.md.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelHook {
    /// The `spec` of a kro.run/v1alpha1 ResourceGraphDefinition (`schema` and `resources`).
    #[schemars(schema_with = "preserve_unknown_object")]
    pub resource_graph: serde_json::Value,
    /// Go duration string bounding one evaluation; default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// An object of any fields, kept whole by the API server.
fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// `jsonnet` of a hook (kmeta): the program whose top-level function is called with the hook
/// request as its argument `request`, as Metacontroller's `jsonnetd` calls it. Exactly one of
/// `source` and `configMapRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonnetHook {
    /// The program, inline (it can import nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The program in a ConfigMap key; the ConfigMap's other keys are importable by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<JsonnetConfigMapRef>,
    /// Go duration string bounding one evaluation; default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// `loose` (v1 default) or `strict` (v2 default), as a webhook's.
    #[serde(
        default,
        rename = "responseUnMarshallMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_unmarshall_mode: Option<ResponseUnmarshallMode>,
}

/// `jsonnet.configMapRef`: the ConfigMap key holding a Jsonnet hook program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonnetConfigMapRef {
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// The key of the main program.
    pub key: String,
}

impl Hook {
    /// The ConfigMap this hook's Jsonnet program is read from, if any.
    pub fn jsonnet_config_map(&self) -> Option<&JsonnetConfigMapRef> {
        self.jsonnet
            .as_ref()
            .and_then(|j| j.config_map_ref.as_ref())
    }
}

/// Hook wire versions.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HookVersion {
    /// Relative object keys, loose decoding.
    #[default]
    #[serde(rename = "v1")]
    V1,
    /// Uniform `namespace/name` keys, strict decoding.
    #[serde(rename = "v2")]
    V2,
}

/// How strictly a hook response is decoded.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResponseUnmarshallMode {
    /// Unknown fields are ignored.
    Loose,
    /// Unknown or duplicate fields are an error.
    Strict,
}

/// A webhook endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// Full URL; wins over `service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Go duration string, e.g. `10s`, `500ms`; default 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// ETag caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<WebhookEtagConfig>,
    /// Path appended to the service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// In-cluster service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    /// `loose` (v1 default) or `strict` (v2 default).
    #[serde(
        default,
        rename = "responseUnMarshallMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_unmarshall_mode: Option<ResponseUnmarshallMode>,
    /// CA bundle to verify the hook's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// Client certificate (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clientTLS")]
    pub client_tls: Option<ClientTls>,
    /// `Authorization` header from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Basic auth from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
}

/// `webhook.etag`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEtagConfig {
    /// Send `If-None-Match` and replay cached bodies on 304/412.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Cache entry lifetime; default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_timeout_seconds: Option<i32>,
    /// Cache sweep interval; default 300s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_cleanup_seconds: Option<i32>,
}

/// `webhook.service`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    /// Service name.
    pub name: String,
    /// Service namespace.
    pub namespace: String,
    /// Port; default 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// `http` (default) or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// A reference to one key of a Secret or ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyReference {
    /// Object name.
    pub name: String,
    /// Object namespace.
    pub namespace: String,
    /// Key; the default depends on the use (`ca.crt`, `token`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A reference to a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
}

/// A CA bundle: exactly one of inline PEM, a Secret key or a ConfigMap key (key default `ca.crt`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundle {
    /// PEM text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// From a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyReference>,
    /// From a ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyReference>,
}

/// Client certificate for mTLS (keys default `tls.crt` / `tls.key`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// The Secret holding the pair.
    pub secret_ref: SecretReference,
    /// Certificate key; default `tls.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    /// Private key key; default `tls.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_key: Option<String>,
}

/// `Authorization: <type> <credentials>` with the credentials from a Secret key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// Scheme; default `Bearer` (`Basic` is rejected: use `basicAuth`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
    /// The credentials.
    pub secret_ref: KeyReference,
}

/// HTTP basic auth (keys default `username` / `password`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The Secret.
    pub secret_ref: SecretReference,
    /// Username key; default `username`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    /// Password key; default `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

/// `spec.endpointConfigs[]`: TLS and credentials for every hook whose URL host matches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConfig {
    /// Host (optionally `host:port`), matched case-insensitively.
    pub host: String,
    /// CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// Client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clientTLS")]
    pub client_tls: Option<ClientTls>,
    /// Authorization header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Basic auth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
}

/// Attaches objects to existing resources (types only in this release).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "metacontroller.k8s.io",
    version = "v1alpha1",
    kind = "DecoratorController",
    doc = "DecoratorController: attaches children to existing objects of the selected resources (Metacontroller v4.17 compatible).",
    plural = "decoratorcontrollers",
    singular = "decoratorcontroller",
    shortname = "dec",
    shortname = "decorators",
    status = "DecoratorControllerStatus",
    annotation("api-approved.kubernetes.io", "unapproved, request not yet submitted")
)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerSpec {
    /// The resources to decorate.
    pub resources: Vec<DecoratorControllerResourceRule>,
    /// The attachment kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<DecoratorControllerAttachmentRule>>,
    /// The webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<DecoratorControllerHooks>,
    /// Per-host TLS and credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_configs: Option<Vec<EndpointConfig>>,
    /// Periodic resync (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    /// kmeta extension (Metacontroller ignores it): the ServiceAccount whose identity kmeta takes
    /// (`Impersonate-User: system:serviceaccount:<namespace>:<name>`) for this controller's
    /// child or attachment writes, adoptions and releases, and the related reads its customize
    /// hook selects; kmeta's own identity keeps the watches, the targets' status and finalizers,
    /// events and Leases. Unset: kmeta's own identity, as Metacontroller (or `kmeta run
    /// --default-service-account`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// kmeta extension: the namespace of `serviceAccountName`. Default: the target's namespace;
    /// required for cluster-scoped targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_namespace: Option<String>,
}

/// DecoratorController status (empty in Metacontroller; kmeta writes conditions).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DecoratorControllerStatus {
    /// kmeta extension: `FieldRulesAccepted=False` while a `fieldRules` path is refused, its
    /// message naming the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ControllerCondition>>,
}

/// `spec.resources[]` of a DecoratorController.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerResourceRule {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// Plural resource.
    pub resource: String,
    /// Label filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Annotation filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    /// Ignore status-only updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// Selector over annotations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Exact matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_annotations: Option<std::collections::BTreeMap<String, String>>,
    /// Expressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

/// `spec.attachments[]` of a DecoratorController.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerAttachmentRule {
    /// e.g. `v1`.
    pub api_version: String,
    /// Plural resource.
    pub resource: String,
    /// Update strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<DecoratorControllerAttachmentUpdateStrategy>,
    /// kmeta extension (Metacontroller ignores it): single fields of these attachments left to
    /// other writers, addressed by merge key (as `childResources[].fieldRules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_rules: Option<Vec<FieldRule>>,
}

/// Attachment update strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerAttachmentUpdateStrategy {
    /// Default `OnDelete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ChildUpdateMethod>,
}

/// `spec.hooks` of a DecoratorController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerHooks {
    /// Related-object selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
    /// Sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<Hook>,
    /// Finalize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
}

/// A Metacontroller ControllerRevision (rolling updates): no spec, top-level `parentPatch` and
/// `children`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevision {
    /// `metacontroller.k8s.io/v1alpha1`.
    pub api_version: String,
    /// `ControllerRevision`.
    pub kind: String,
    /// Object metadata.
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// The parent fields at this revision.
    pub parent_patch: serde_json::Value,
    /// The children claimed by this revision.
    #[serde(default)]
    pub children: Vec<ControllerRevisionChildren>,
}

/// Children of one group/kind claimed by a revision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevisionChildren {
    /// API group ("" for core).
    pub api_group: String,
    /// Kind.
    pub kind: String,
    /// Names.
    pub names: Vec<String>,
}

impl CompositeControllerSpec {
    /// The declared child rules (empty when absent).
    pub fn child_rules(&self) -> &[CompositeControllerChildResourceRule] {
        self.child_resources.as_deref().unwrap_or_default()
    }
    /// The sync hook, if any.
    pub fn sync_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.sync.as_ref())
    }
    /// The finalize hook, if any.
    pub fn finalize_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.finalize.as_ref())
    }
    /// The customize hook, if any.
    pub fn customize_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.customize.as_ref())
    }
    /// The ConfigMaps the Jsonnet hooks are read from (a change to one rebuilds the controller).
    pub fn jsonnet_config_maps(&self) -> Vec<JsonnetConfigMapRef> {
        let hooks = [
            self.sync_hook(),
            self.finalize_hook(),
            self.customize_hook(),
        ];
        config_maps(hooks.into_iter().flatten())
    }
}

impl DecoratorControllerSpec {
    /// The ConfigMaps the Jsonnet hooks are read from (a change to one rebuilds the controller).
    pub fn jsonnet_config_maps(&self) -> Vec<JsonnetConfigMapRef> {
        let Some(h) = &self.hooks else {
            return Vec::new();
        };
        config_maps([&h.sync, &h.finalize, &h.customize].into_iter().flatten())
    }
}

/// The distinct ConfigMaps `hooks` read Jsonnet programs from, in order.
fn config_maps<'a>(hooks: impl Iterator<Item = &'a Hook>) -> Vec<JsonnetConfigMapRef> {
    let mut out: Vec<JsonnetConfigMapRef> = Vec::new();
    for r in hooks.filter_map(Hook::jsonnet_config_map) {
        if !out
            .iter()
            .any(|o| o.namespace == r.namespace && o.name == r.name)
        {
            out.push(r.clone());
        }
    }
    out
}
