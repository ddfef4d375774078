//! The Jsonnet worker the scenarios' controller starts (`kmeta::hook::jsonnet::worker_main`, as
//! `kmeta jsonnet-worker` runs it): the scenarios run the controller in the test process, whose
//! executable is the test harness, not `kmeta`.

fn main() {
    std::process::exit(kmeta::hook::jsonnet::worker_main());
}
