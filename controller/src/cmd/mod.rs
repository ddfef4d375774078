//! Layer 5, what the commands do: `kmeta run`'s flags, typed and checked by clap, and their
//! validation into a config (`cli`), `kmeta run` (`run`), `kmeta rbac` (`rbac`), `kmeta render`
//! (`render`), `kmeta trace` (`trace`), `kmeta reconcile`/`suspend`/`resume` (`steer`), and with
//! the default `embedded-apiserver` feature the one-process `kmeta demo` (`demo`) and `kmeta dev`
//! (`dev`), with progress lines on a terminal (`progress`). The other subcommands' flags, the
//! output and the exit codes are the binary's (`controller/src/cli/`).

pub mod cli;
#[cfg(feature = "embedded-apiserver")]
pub mod demo;
#[cfg(feature = "embedded-apiserver")]
pub mod dev;
#[cfg(feature = "embedded-apiserver")]
pub mod progress;
pub mod run;
