//! The options of one apply.

use dynapply::{ListRules, Ordering};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::Error;

/// How [`dyn_apply`](crate::DynApply::dyn_apply) merges and writes. `Default` is what most
/// operators want: dynapply's annotation, the built-in list rules of the object's kind, kubectl's
/// list order, no field manager (the server derives one from the user agent), a real write, and
/// up to 5 attempts when another writer changes the object between read and write.
#[derive(Clone, Debug)]
pub struct DynApplyParams {
    /// The annotation holding the last-applied configuration. Default:
    /// [`dynapply::LAST_APPLIED_ANNOTATION`] (`metacontroller.k8s.io/last-applied-configuration`),
    /// so objects kmeta or Metacontroller managed are taken over seamlessly. Use a name of your
    /// own when two appliers manage disjoint parts of one object.
    pub annotation: String,
    /// List rules added on top of the built-in ones (they win where both name a path): a CRD's
    /// `x-kubernetes-list-type` markers ([`DynApplyParams::crd`]) or rules of your own.
    pub rules: ListRules,
    /// Start from [`ListRules::builtin`] for the object's `apiVersion`/`kind` (the Kubernetes
    /// types' patch-merge keys, e.g. containers by `name`). Default: true.
    pub builtin_rules: bool,
    /// List-map order after a merge. Default: [`Ordering::Desired`] (kubectl's).
    pub ordering: Ordering,
    /// `fieldManager` sent with the create or update.
    pub field_manager: Option<String>,
    /// Send `dryRun=All`: the server validates and admits the write and answers with what it
    /// would store, but stores nothing.
    pub dry_run: bool,
    /// How many writes to try in all when the server answers 409 Conflict (live changed since it
    /// was read, or was created meanwhile); each retry reads live again. Default: 5.
    pub max_conflicts: u32,
}

impl Default for DynApplyParams {
    fn default() -> Self {
        DynApplyParams {
            annotation: dynapply::LAST_APPLIED_ANNOTATION.to_owned(),
            rules: ListRules::new(),
            builtin_rules: true,
            ordering: Ordering::Desired,
            field_manager: None,
            dry_run: false,
            max_conflicts: 5,
        }
    }
}

impl DynApplyParams {
    /// Sets [`DynApplyParams::annotation`].
    pub fn annotation(mut self, name: impl Into<String>) -> Self {
        self.annotation = name.into();
        self
    }

    /// Adds list rules (over the built-in and any earlier ones).
    pub fn rules(mut self, rules: ListRules) -> Self {
        self.rules = std::mem::take(&mut self.rules).merge(rules);
        self
    }

    /// Adds the list rules of a CRD version's schema markers (`x-kubernetes-list-type`,
    /// `x-kubernetes-list-map-keys`); `version` `None` takes the storage version. For a
    /// `#[derive(CustomResource)]` type pass `&MyKind::crd()`.
    ///
    /// # Errors
    /// [`Error::InvalidDesired`] naming the CRD when it has no such version or no schema.
    pub fn crd(self, crd: &CustomResourceDefinition, version: Option<&str>) -> Result<Self, Error> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let invalid = |reason: String| Error::InvalidDesired {
            object: format!("CustomResourceDefinition {name}"),
            reason,
        };
        let value = serde_json::to_value(crd).map_err(|e| invalid(e.to_string()))?;
        let rules = ListRules::from_crd(&value, version).map_err(|e| invalid(e.to_string()))?;
        Ok(self.rules(rules))
    }

    /// Sets [`DynApplyParams::builtin_rules`].
    pub fn builtin_rules(mut self, on: bool) -> Self {
        self.builtin_rules = on;
        self
    }

    /// Sets [`DynApplyParams::ordering`].
    pub fn ordering(mut self, ordering: Ordering) -> Self {
        self.ordering = ordering;
        self
    }

    /// Sets [`DynApplyParams::field_manager`].
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// Sets [`DynApplyParams::dry_run`].
    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    /// Sets [`DynApplyParams::max_conflicts`] (at least 1 attempt is always made).
    pub fn max_conflicts(mut self, attempts: u32) -> Self {
        self.max_conflicts = attempts;
        self
    }

    pub(crate) fn post_params(&self) -> kube::api::PostParams {
        kube::api::PostParams {
            dry_run: self.dry_run,
            field_manager: self.field_manager.clone(),
        }
    }
}
