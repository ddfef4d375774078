//! Times dynapply's child-update path on the workloads (mimalloc as the global allocator, like the `kmeta` binary); see
//! `support/update_path.rs` and `benches/go/run.sh`.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/support/workload.rs"]
mod workload;

#[path = "support/update_path.rs"]
mod update_path;

fn main() -> anyhow::Result<()> {
    update_path::main()
}
