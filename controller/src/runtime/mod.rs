//! Layer 1, the controller runtime: shared watches of any resource ([`cache`]), the work queue
//! ([`queue`]), discovery ([`resources`]), typed-less API calls ([`kapi`]) and label selectors
//! ([`selector`]). Nothing here knows about hooks or controller kinds.

pub(crate) mod api_error;
pub mod cache;
pub mod compact;
pub mod kapi;
pub mod queue;
pub mod resources;
pub mod selector;
pub mod shard_watch;
pub mod watched;
