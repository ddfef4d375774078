//! The `kmeta` binary's integration tests, one module per area, linked into one test binary:
//! each test file of its own would link kmeta and kmeta-apiserver again, and libtest runs the
//! tests of one binary side by side but the binaries one after another. The README's commands
//! have a binary of their own, `readme_commands` (`cargo test -p kmeta --test
//! readme_commands`). Run one area with a filter: `cargo test -p kmeta --test integration
//! sharding::`.

mod support;

mod demo;
mod deploy;
mod dev;
mod jsonnet_pool;
mod jsonnet_reference;
mod leader;
mod monitoring;
mod prometheus;
mod ratelimit;
mod rbac;
mod run;
mod sharding;
