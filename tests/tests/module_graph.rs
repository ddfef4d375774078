//! The workspace's module graphs, checked from the sources: no crate has an import cycle between
//! its modules (`crate::…` and `super::…` references), and in the layered crates — `kmeta`
//! (`controller/src/lib.rs`) and `kmeta-apiserver` (`apiserver/README.md`) — a module only
//! refers to modules of its own layer or below. `kmeta`'s layers are read from the table in
//! `controller/src/lib.rs`'s `//!` docs, the crate's only module map: a top-level module missing
//! from it, or a row naming no module, fails here. The modules a crate's `main.rs` declares
//! (`kmeta`'s `cli`) belong to its binary, which reaches the library only through its public API:
//! they are no layer of the library.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `kmeta`'s top-level modules by layer, lowest first, as the `| layer | modules | what |` table
/// of `lib_rs` (its `//!` docs) lists them: the names in backticks of each row's second column.
fn layers_of_lib_rs(lib_rs: &str) -> Vec<Vec<String>> {
    let mut layers: Vec<(usize, Vec<String>)> = Vec::new();
    for line in lib_rs.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(Ok(layer)) = cells.first().map(|c| c.parse::<usize>()) else {
            continue; // the header and its rule
        };
        let names: Vec<String> = cells
            .get(1)
            .map(|c| c.split('`').skip(1).step_by(2).map(str::to_owned).collect())
            .unwrap_or_default();
        assert!(!names.is_empty(), "lib.rs layer {layer} names no module");
        layers.push((layer, names));
    }
    layers.sort_by_key(|(l, _)| *l);
    layers.into_iter().map(|(_, m)| m).collect()
}

/// The top-level modules `lib_rs` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub(crate) mod ")
                .or_else(|| l.strip_prefix("pub mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            rest.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

fn kmeta_lib_rs() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../controller/src/lib.rs");
    std::fs::read_to_string(path).expect("read controller/src/lib.rs")
}

/// `kmeta-apiserver`'s top-level modules by layer, lowest first.
const APISERVER_LAYERS: &[&[&str]] = &[
    &[
        "error",
        "cel",
        "authn",
        "rbac",
        "store",
        "registry",
        "schema",
        "selector",
        "shard",
        "patch",
        "ssa",
        "convert",
        "typed",
        "proto",
        "metadata",
        "immutable",
        "strategy",
        "webhook",
        "policy",
        "hooks",
        "defaults",
    ],
    &["engine"],
    &["state"],
    &["http"],
    &["test_server", "tls"],
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

fn layer_of<L: AsRef<[S]>, S: AsRef<str>>(layers: &[L], top: &str) -> Option<usize> {
    layers
        .iter()
        .position(|l| l.as_ref().iter().any(|m| m.as_ref() == top))
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
    // the binary's own modules (`mod cli;` in main.rs) are another crate, not a layer
    let binary = std::fs::read_to_string(src.join("main.rs"))
        .map(|main_rs| declared_modules(&main_rs))
        .unwrap_or_default();
    let modules: Vec<(Vec<String>, String)> = files
        .iter()
        .filter(|f| {
            !matches!(
                f.file_name().and_then(|n| n.to_str()),
                Some("lib.rs" | "main.rs")
            )
        })
        .filter(|f| !binary.contains(&module_path(&src, f)[0]))
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

fn upward_references<L: AsRef<[S]>, S: AsRef<str>>(krate: &Crate, layers: &[L]) -> Vec<String> {
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
fn lib_rs_maps_every_kmeta_module_once() {
    let lib_rs = kmeta_lib_rs();
    let layers = layers_of_lib_rs(&lib_rs);
    assert!(
        layers.len() >= 5,
        "the lib.rs table has {} layers",
        layers.len()
    );
    let mapped: Vec<&String> = layers.iter().flatten().collect();
    let unique: BTreeSet<&String> = mapped.iter().copied().collect();
    assert_eq!(
        mapped.len(),
        unique.len(),
        "a module in two layers: {mapped:?}"
    );
    let declared = declared_modules(&lib_rs);
    let unique: BTreeSet<String> = unique.into_iter().cloned().collect();
    assert_eq!(
        declared, unique,
        "the modules lib.rs declares against those its //! table maps"
    );
}

#[test]
fn the_lib_rs_table_is_read_as_written() {
    let text = "//! | layer | modules | what |\n//! |---|---|---|\n\
                //! | 1 | `runtime` | watches, `queue` |\n//! | 0 | `object`, [`api`] | types |\n\
                pub mod api;\npub(crate) mod object;\nmod runtime;\n";
    assert_eq!(
        layers_of_lib_rs(text),
        vec![
            vec!["object".to_owned(), "api".to_owned()],
            vec!["runtime".to_owned()]
        ]
    );
    let declared: Vec<String> = declared_modules(text).into_iter().collect();
    assert_eq!(declared, ["api", "object", "runtime"]);
}

#[test]
fn kmeta_modules_refer_only_to_their_layer_or_below() {
    let krate = load("controller");
    let layers = layers_of_lib_rs(&kmeta_lib_rs());
    let violations = upward_references(&krate, &layers);
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
