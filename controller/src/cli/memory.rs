//! The binary's memory settings, chosen by measurement: transparent huge pages off and
//! mimalloc's purge delay at 10 ms (docs/design/sync-path-costs.md, docs/design/sizing-bench.md).

/// Transparent huge pages off for this process (Linux): mimalloc asks the kernel for 2 MiB pages
/// on the memory it maps, and each one partly used stays resident whole — a controller of 1000
/// parents × 10 children peaked at ~75 MiB with them and ~50 MiB without, at no measured cost in
/// CPU at 10 000 × 10 (docs/design/sync-path-costs.md). Where the call is refused (a seccomp
/// profile), a note says so and they stay on.
pub(crate) fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("note: transparent huge pages stay on ({e}): memory may peak higher");
    }
}

/// mimalloc's `mi_option_purge_delay`: its position in the `mi_option_t` enum of the mimalloc
/// v3 that libmimalloc-sys builds (the crate names no constant for it; a test checks the
/// option's default, 1000 ms, at this position).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps emptied pages before returning them to the OS: 10 ms, mimalloc v2's
/// default (v3 waits 1000 ms). A controller's work comes in bursts (a resync, a rollout), and
/// pages freed after one stayed resident: 50 workers over 1000 parents × 10 ConfigMaps peaked at
/// 52-53 MiB with 1000 ms and 50 MiB with 10 ms, at no measured CPU cost
/// (docs/design/sizing-bench.md).
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// The purge delay `kmeta` sets: [`PURGE_DELAY_MS`], or none when the operator chose one
/// (`operator`: `MIMALLOC_PURGE_DELAY`, which mimalloc reads itself).
fn purge_delay_to_set(operator: Option<&std::ffi::OsStr>) -> Option<std::ffi::c_long> {
    operator.is_none().then_some(PURGE_DELAY_MS)
}

/// Sets mimalloc's purge delay as [`purge_delay_to_set`] decides.
#[allow(unsafe_code)]
pub(crate) fn set_purge_delay() {
    let operator = std::env::var_os("MIMALLOC_PURGE_DELAY");
    if let Some(ms) = purge_delay_to_set(operator.as_deref()) {
        // SAFETY: `mi_option_set` stores a value in mimalloc's option table (callable from any
        // thread at any time); the option index is one of the linked mimalloc's (see above).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms) }
    }
}

#[cfg(test)]
mod tests {
    use super::{MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS, purge_delay_to_set, set_purge_delay};

    /// The option index is the purge delay's in the linked mimalloc: its default (1000 ms in
    /// mimalloc v3) or the value `MIMALLOC_PURGE_DELAY` gives it; `set_purge_delay` then sets
    /// it to 10 ms, unless the variable is set. (One test: the option is process-wide.)
    #[test]
    #[allow(unsafe_code)]
    fn purge_delay_index_is_mimallocs_and_set() {
        let operator = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        let before = match &operator {
            Some(v) => v.parse().expect("MIMALLOC_PURGE_DELAY is a number"),
            None => 1000,
        };
        // SAFETY: reads an option of mimalloc's table (any thread, any time).
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), before);
        set_purge_delay();
        assert_eq!(get(), if operator.is_some() { before } else { 10 });
    }

    #[test]
    fn an_operators_purge_delay_wins() {
        assert_eq!(purge_delay_to_set(None), Some(PURGE_DELAY_MS));
        assert_eq!(purge_delay_to_set(Some("0".as_ref())), None);
        assert_eq!(purge_delay_to_set(Some("".as_ref())), None);
    }
}
