//! Times dynapply's child-update path on the workloads (the system allocator); see
//! `support/update_path.rs` and `benches/go/run.sh`.

#[path = "../benches/support/workload.rs"]
mod workload;

#[path = "support/update_path.rs"]
mod update_path;

fn main() -> anyhow::Result<()> {
    update_path::main()
}
