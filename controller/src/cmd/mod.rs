//! Layer 5, the command line: flags (`cli`), `kmeta run` (`run`), `kmeta rbac` (`rbac`), `kmeta reconcile`/`suspend`/`resume` (`steer`), and with the default
//! `embedded-apiserver` feature the one-process `kmeta demo` (`demo`) and `kmeta dev` (`dev`), with
//! progress lines on a terminal (`progress`).

pub mod cli;
#[cfg(feature = "embedded-apiserver")]
pub mod demo;
#[cfg(feature = "embedded-apiserver")]
pub mod dev;
#[cfg(feature = "embedded-apiserver")]
pub mod progress;
pub mod rbac;
pub mod render;
pub mod run;
pub mod steer;
pub mod trace;
