//! The `kmeta` binary: parses the command line and runs the command (`cli`, the binary's own
//! modules, over the library's public API).

mod cli;

/// The allocator of the binary (chosen by measurement: docs/design/sync-path-costs.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // a Jsonnet worker (started by this binary's controller) serves stdin without a runtime
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("jsonnet-worker")) {
        std::process::exit(kmeta::hook::jsonnet::worker_main());
    }
    cli::memory::no_transparent_huge_pages();
    cli::memory::set_purge_delay();
    cli::main()
}
