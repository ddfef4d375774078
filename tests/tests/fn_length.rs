//! No production function of the workspace is longer than [`LIMIT`] lines.
//!
//! A function's length is counted as a reader meets it: from the line of `fn` to the line of its
//! closing brace, blank and comment lines included (its doc comment and attributes excluded). The
//! functions checked are those the workspace's libraries and binaries compile outside tests: every
//! member's `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`, and the modules they declare, followed
//! through `mod x;` — except modules, functions and impls marked `#[cfg(test)]` or `#[test]`.
//! A crate's `tests/`, `benches/` and `examples/` targets are test code and not counted. Free
//! functions, methods and trait methods with a default body count; a function nested in another
//! counts on its own (and within the outer one). Code inside a macro invocation is not parsed.
//!
//! `fn_length_allowlist.txt` (next to this file) names the functions allowed over the limit for
//! now, one `path::function` a line; an entry whose function is back under the limit, or gone,
//! fails too, so the list only shrinks. To see every function over a length, without failing:
//! `KMETA_FN_LENGTH_REPORT=60 cargo test -p kmeta-tests --test fn_length -- --nocapture`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// The longest a production function may be, in lines.
const LIMIT: usize = 80;

/// One production function: where it starts, what it is called, and how long it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    /// The file, relative to the workspace root (`apiserver/src/http/routing.rs`).
    file: String,
    /// The line of `fn`.
    line: usize,
    /// `name`, or `Type::name` for a method.
    name: String,
    /// Lines from `fn` to the closing brace.
    lines: usize,
}

impl Function {
    /// The allowlist's key: `apiserver/src/http/routing.rs::handle`.
    fn key(&self) -> String {
        format!("{}::{}", self.file, self.name)
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_owned()
}

/// The `members = [...]` of the workspace's `Cargo.toml`.
fn members(manifest: &str) -> Vec<String> {
    let start = manifest
        .find("members = [")
        .expect("Cargo.toml has a members list");
    let list = &manifest[start + "members = [".len()..];
    let list = &list[..list.find(']').expect("members list ends")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The crate roots of one member: its library, its main binary and the binaries in `src/bin`.
fn crate_roots(member: &Path) -> Vec<PathBuf> {
    let src = member.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        for entry in bins {
            let path = entry.expect("src/bin entry").path();
            let main = path.join("main.rs");
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            } else if main.is_file() {
                roots.push(main);
            }
        }
    }
    roots.sort();
    roots
}

/// `#[cfg(test)]` or `#[test]` (also `#[tokio::test]`) among `attrs`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The file a `mod name;` declared in `file` is read from: `name.rs` or `name/mod.rs`, next to
/// `file` for a crate root or a `mod.rs`, else in the folder named after `file`.
fn module_file(file: &Path, inline: &[String], name: &str) -> Option<PathBuf> {
    let dir = file.parent()?;
    let stem = file.file_stem()?.to_string_lossy();
    let mut base = if matches!(stem.as_ref(), "mod" | "lib" | "main") || is_bin_root(file) {
        dir.to_owned()
    } else {
        dir.join(stem.as_ref())
    };
    for m in inline {
        base.push(m);
    }
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// `src/bin/x.rs`: a crate root whose modules sit next to it.
fn is_bin_root(file: &Path) -> bool {
    file.parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "bin")
        && file
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .is_some_and(|d| d == "src")
}

/// Walks one file's syntax tree, collecting functions and the module files it declares.
struct Walk<'a> {
    file: &'a Path,
    shown: String,
    /// The inline `mod x { … }` blocks around the current item, outermost first.
    inline: Vec<String>,
    /// The type of the `impl` block around the current item.
    self_ty: Option<String>,
    functions: Vec<Function>,
    modules: Vec<PathBuf>,
}

impl Walk<'_> {
    fn function(&mut self, name: &syn::Ident, whole: proc_macro2::Span, sig: proc_macro2::Span) {
        let line = sig.start().line;
        let name = match &self.self_ty {
            Some(ty) => format!("{ty}::{name}"),
            None => name.to_string(),
        };
        self.functions.push(Function {
            file: self.shown.clone(),
            line,
            name,
            lines: whole.end().line - line + 1,
        });
    }
}

/// The last segment of a type's path (`Hooks` for `crate::server::Hooks<T>`, `str` for `&str`).
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map_or_else(String::new, |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "_".to_owned(),
    }
}

impl<'ast> Visit<'ast> for Walk<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test(&m.attrs) {
            return;
        }
        let name = m.ident.to_string();
        match &m.content {
            None => {
                let path = module_file(self.file, &self.inline, &name);
                let path = path.unwrap_or_else(|| {
                    panic!("{}: `mod {name};` has no file", self.file.display())
                });
                self.modules.push(path);
            }
            Some(_) => {
                self.inline.push(name);
                syn::visit::visit_item_mod(self, m);
                self.inline.pop();
            }
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test(&i.attrs) {
            return;
        }
        let outer = self.self_ty.replace(type_name(&i.self_ty));
        syn::visit::visit_item_impl(self, i);
        self.self_ty = outer;
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if is_test(&t.attrs) {
            return;
        }
        let outer = self.self_ty.replace(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.self_ty = outer;
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        // a free function nested in a method is not the method's type's
        let outer = self.self_ty.take();
        self.function(&f.sig.ident, f.span(), f.sig.span());
        syn::visit::visit_item_fn(self, f);
        self.self_ty = outer;
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.function(&f.sig.ident, f.span(), f.sig.span());
        let outer = self.self_ty.take();
        syn::visit::visit_impl_item_fn(self, f);
        self.self_ty = outer;
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test(&f.attrs) || f.default.is_none() {
            return;
        }
        self.function(&f.sig.ident, f.span(), f.sig.span());
        let outer = self.self_ty.take();
        syn::visit::visit_trait_item_fn(self, f);
        self.self_ty = outer;
    }
}

/// Every production function of the workspace, in file order.
fn production_functions() -> Vec<Function> {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let mut queue: Vec<PathBuf> = members(&manifest)
        .iter()
        .flat_map(|m| crate_roots(&root.join(m)))
        .collect();
    let mut seen = BTreeSet::new();
    let mut functions = Vec::new();
    while let Some(file) = queue.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let syntax = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let shown = file
            .strip_prefix(&root)
            .expect("a source file of the workspace")
            .to_string_lossy()
            .into_owned();
        let mut walk = Walk {
            file: &file,
            shown,
            inline: Vec::new(),
            self_ty: None,
            functions: Vec::new(),
            modules: Vec::new(),
        };
        walk.visit_file(&syntax);
        functions.extend(walk.functions);
        queue.extend(walk.modules);
    }
    functions.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    functions
}

/// The allowlist's entries: one `path::function` a line; `#` starts a comment.
fn allowlist() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fn_length_allowlist.txt");
    let text = std::fs::read_to_string(&path).expect("read fn_length_allowlist.txt");
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn listing(functions: &[&Function]) -> String {
    functions
        .iter()
        .map(|f| format!("  {}:{}: {} ({} lines)\n", f.file, f.line, f.name, f.lines))
        .collect()
}

#[test]
fn no_production_function_is_longer_than_the_limit() {
    let functions = production_functions();
    if let Ok(at) = std::env::var("KMETA_FN_LENGTH_REPORT") {
        let at: usize = at
            .parse()
            .expect("KMETA_FN_LENGTH_REPORT is a number of lines");
        let mut long: Vec<&Function> = functions.iter().filter(|f| f.lines > at).collect();
        long.sort_by_key(|f| std::cmp::Reverse(f.lines));
        println!(
            "{} production functions, {} over {at} lines:\n{}",
            functions.len(),
            long.len(),
            listing(&long)
        );
    }
    let allowed = allowlist();
    let over: Vec<&Function> = functions.iter().filter(|f| f.lines > LIMIT).collect();
    let new: Vec<&Function> = over
        .iter()
        .copied()
        .filter(|f| !allowed.contains(&f.key()))
        .collect();
    let over_keys: BTreeSet<String> = over.iter().map(|f| f.key()).collect();
    let stale: Vec<&String> = allowed.difference(&over_keys).collect();
    assert!(
        new.is_empty(),
        "production functions over {LIMIT} lines: split them by what they do \
         (a decision, a step, an executor), not by trimming lines:\n{}",
        listing(&new)
    );
    assert!(
        stale.is_empty(),
        "tests/tests/fn_length_allowlist.txt names functions no longer over {LIMIT} lines \
         (or gone): remove them from the list\n  {stale:?}"
    );
}

#[test]
fn the_walk_sees_methods_and_skips_tests() {
    let functions = production_functions();
    let find = |file: &str, name: &str| {
        functions
            .iter()
            .find(|f| f.file == file && f.name == name)
            .cloned()
    };
    // a free function and a method of a crate root's module, found through `mod x;`
    assert!(find("sdk/src/server.rs", "router").is_some());
    assert!(find("sdk/src/server.rs", "Hooks::into_router").is_some());
    // a `#[cfg(test)] mod tests` is not production code
    assert!(find("sdk/src/server.rs", "hooks").is_none());
    assert!(find("sdk/src/server.rs", "sync_ok").is_none());
    // a binary under src/bin
    assert!(
        functions
            .iter()
            .any(|f| f.file == "tests/src/bin/kmeta-jsonnet-worker.rs"),
        "src/bin is walked"
    );
    // lines are counted from `fn` to the closing brace
    let router = find("sdk/src/server.rs", "router").expect("router");
    assert_eq!(router.lines, 3, "{router:?}");
}
