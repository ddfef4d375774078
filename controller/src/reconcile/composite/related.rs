//! The composite side of related objects: the shared code in [`crate::reconcile::related`]
//! with a [`CompositeState`] as its [`RelatedSource`].

use serde_json::{Map, Value};

use super::build::CompositeState;
use crate::reconcile::core::{SyncError, Writer};
use crate::reconcile::related::{self, RelatedSource};

pub use crate::reconcile::related::{Used, cache_key};

/// Step: related objects chosen by the customize hook (cached per parent UID + generation).
pub(super) async fn call_customize(
    c: &CompositeState,
    parent: &Value,
    reader: &Writer,
    used: &mut Used,
) -> Result<Map<String, Value>, SyncError> {
    let source = RelatedSource {
        ctx: &c.ctx,
        controller: &c.cc_json,
        customize: c.hooks.customize.as_ref(),
        version: c.hooks.sync.version(),
        parent_namespaced: c.parent.namespaced,
        cache: &c.memory.customize_cache,
        watches: &c.memory.related,
        reader,
    };
    related::call_customize(&source, parent, used).await
}
