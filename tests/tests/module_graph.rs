//! The workspace's module graphs, checked from the sources: no crate has an import cycle between
//! its modules (`crate::…` and `super::…` references), and in the layered crates — `kmeta`
//! (`controller/src/lib.rs`) and `kmeta-apiserver` (`apiserver/README.md`) — a module only
//! refers to modules of its own layer or below.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `kmeta`'s top-level modules by layer, lowest first.
const KMETA_LAYERS: &[&[&str]] = &[
    &["object", "duration", "api"],
    &["runtime"],
    &["ops"],
    &["hook"],
    &["reconcile"],
    &["cmd", "embed"],
];

/// `kmeta-apiserver`'s top-level modules by layer, lowest first.
const APISERVER_LAYERS: &[&[&str]] = &[
    &[
        "error",
        "store",
        "registry",
        "schema",
        "selector",
        "patch",
        "ssa",
        "convert",
        "typed",
        "proto",
        "metadata",
        "immutable",
        "hooks",
        "defaults",
    ],
    &["engine"],
    &["state"],
    &["http"],
    &["test_server"],
];

/// Every library crate of the workspace, by its folder.
const CRATES: &[&str] = &[
    "controller",
    "apiserver",
    "dynapply",
    "wire",
    "sdk",
    "apply",
];

fn layer_of(layers: &[&[&str]], top: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&top))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `runtime/cache.rs` → `["runtime", "cache"]`, `reconcile/composite/mod.rs` →
/// `["reconcile", "composite"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Source without `//` comments and without `#[cfg(test)]` modules at the end of a file.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests") {
        Some(i) => &text[..i],
        None => match text.find("#[cfg(test)]\nmod tests") {
            Some(i) => &text[..i],
            None => text,
        },
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path a file refers to: `crate::a::b::{…}` and `super::x` (resolved), cut to the
/// longest prefix that is a known module.
fn references(
    module: &[String],
    code: &str,
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        // `super` of `a::b` is `a`, whether `b` is `a/b.rs` or `a/b/mod.rs`
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut start = 0;
        while let Some(i) = code[start..].find(prefix) {
            let at = start + i;
            start = at + prefix.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let path: Vec<String> = code[start..]
                .split("::")
                .map_while(|seg| {
                    let ident: String = seg
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    (!ident.is_empty() && ident.len() == seg.len()).then_some(ident)
                })
                .collect();
            let mut full = base.clone();
            full.extend(path);
            // the segment after the last full segment may still be a module (`crate::a::b;`)
            let tail: String = code[start..]
                .split("::")
                .nth(full.len() - base.len())
                .unwrap_or_default()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !tail.is_empty() {
                full.push(tail);
            }
            while !full.is_empty() && !known.contains(&full) {
                full.pop();
            }
            if !full.is_empty() && full != module {
                out.insert(full);
            }
        }
    }
    out
}

struct Crate {
    /// Module → modules it refers to.
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn load(krate: &str) -> Crate {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: Vec<(Vec<String>, String)> = files
        .iter()
        .filter(|f| {
            !matches!(
                f.file_name().and_then(|n| n.to_str()),
                Some("lib.rs" | "main.rs")
            )
        })
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read source");
            (module_path(&src, f), code_of(&text))
        })
        .collect();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    let edges = modules
        .iter()
        .map(|(m, code)| (m.clone(), references(m, code, &known)))
        .collect();
    Crate { edges }
}

fn upward_references(krate: &Crate, layers: &[&[&str]]) -> Vec<String> {
    let mut violations = Vec::new();
    for (module, refs) in &krate.edges {
        let Some(own) = layer_of(layers, &module[0]) else {
            violations.push(format!("module {} is in no layer", module.join("::")));
            continue;
        };
        for r in refs {
            let theirs = layer_of(layers, &r[0]).unwrap_or(0);
            if theirs > own {
                violations.push(format!(
                    "{} (layer {own}) -> {} (layer {theirs})",
                    module.join("::"),
                    r.join("::")
                ));
            }
        }
    }
    violations
}

fn module(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn kmeta_modules_refer_only_to_their_layer_or_below() {
    let krate = load("controller");
    let violations = upward_references(&krate, KMETA_LAYERS);
    assert!(
        violations.is_empty(),
        "upward references:\n{}",
        violations.join("\n")
    );
    // the check sees real references: the composite controller uses the runtime cache
    assert!(
        krate.edges[&module(&["reconcile", "composite"])].contains(&module(&["runtime", "cache"]))
    );
}

#[test]
fn apiserver_modules_refer_only_to_their_layer_or_below() {
    let krate = load("apiserver");
    let violations = upward_references(&krate, APISERVER_LAYERS);
    assert!(
        violations.is_empty(),
        "upward references:\n{}",
        violations.join("\n")
    );
    assert!(
        krate.edges[&module(&["http", "verbs"])]
            .iter()
            .any(|m| m[0] == "engine")
    );
}

fn cycles(krate: &Crate) -> Vec<String> {
    // a module's reference to its own descendants or ancestors is containment, not a cycle
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut found = Vec::new();
    for start in krate.edges.keys() {
        // depth-first search for a path back to `start`
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in krate.edges.get(&node).into_iter().flatten() {
                if related(&node, next) {
                    continue;
                }
                if next == start {
                    found.push(
                        path.iter()
                            .chain([next])
                            .map(|m| m.join("::"))
                            .collect::<Vec<_>>()
                            .join(" -> "),
                    );
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
}

#[test]
fn no_crate_has_module_cycles() {
    for name in CRATES {
        let krate = load(name);
        assert!(!krate.edges.is_empty(), "{name}: no modules read");
        let found = cycles(&krate);
        assert!(
            found.is_empty(),
            "{name}: module cycles:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let a = module(&["a"]);
    let b = module(&["b"]);
    let krate = Crate {
        edges: BTreeMap::from([
            (a.clone(), BTreeSet::from([b.clone()])),
            (b.clone(), BTreeSet::from([a.clone()])),
        ]),
    };
    assert_eq!(cycles(&krate).len(), 2);
}
