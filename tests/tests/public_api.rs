//! The public API of every library crate users build on, as checked-in lists: `kmeta`,
//! `kmeta-apply`, `kmeta-hook`, `kmeta-wire` and `dynapply` (`<crate dir>/public-api.txt`). A
//! change to a public item — a new `pub`, a field, a method, a variant, a signature — fails this
//! test until the list is updated (rerun with `KMETA_BLESS_PUBLIC_API=1` and review the diff), so
//! every API change is seen in review and reflected in the version.
//!
//! The lists are read from rustdoc's HTML (`cargo doc --no-deps` of these crates, run here when
//! the documentation is older than the sources; `.ci/run` documents the workspace before the
//! tests): rustdoc knows exactly what is reachable from outside, re-exports and
//! `#[doc(hidden)]` included, which no reading of the sources can. cargo-public-api (rustdoc
//! JSON) needs a nightly toolchain and cargo-semver-checks a published baseline; neither is
//! available to this project's CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `html` without tags, entities decoded, whitespace runs made one space.
fn text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The contents of every `<{tag} class="{class}">…</{tag}>` in `html`.
fn all_between<'h>(html: &'h str, open: &str, close: &str) -> Vec<&'h str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

/// The lines of one item page: its declaration (`pub struct S { pub field: T, … }`, a function's
/// signature, an enum with its variants, a trait with its methods) and the inherent methods
/// documented on it (trait implementations are left out: deriving one more trait is not an
/// API the crate promises, and the auto traits change with private fields).
fn item_lines(path: &str, page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for decl in all_between(
        page,
        "<pre class=\"rust item-decl\"><code>",
        "</code></pre>",
    ) {
        // a long declaration folds its fields or variants under a "Show 19 fields" toggle
        let mut decl = decl.to_owned();
        while let (Some(i), Some(j)) = (decl.find("<summary"), decl.find("</summary>")) {
            if j < i {
                break;
            }
            decl.replace_range(i..j + "</summary>".len(), "");
        }
        out.push(format!("{path}: {}", text(&decl)));
    }
    // inherent methods only: up to the first of the trait, auto-trait and blanket implementations
    let inherent = page.find("id=\"implementations\"").map_or("", |i| {
        let end = [
            "trait-implementations",
            "synthetic-implementations",
            "blanket-implementations",
        ]
        .iter()
        .filter_map(|id| page[i..].find(&format!("id=\"{id}\"")))
        .min()
        .map_or(page.len(), |j| i + j);
        &page[i..end]
    });
    for header in all_between(inherent, "<h4 class=\"code-header\">", "</h4>") {
        out.push(format!("{path}:   {}", text(header)));
    }
    out
}

/// The recorded form of one crate's API, from `target/doc/<crate>/`: every item of `all.html`
/// (the index rustdoc writes of everything public) with its page's lines.
fn api_of(doc: &Path) -> anyhow::Result<String> {
    let all = std::fs::read_to_string(doc.join("all.html"))?;
    let mut pages = BTreeSet::new();
    for link in all_between(&all, "<a href=\"", "\"") {
        if link.ends_with(".html") && !link.starts_with("..") && !link.contains("://") {
            pages.insert(link.to_owned());
        }
    }
    let mut lines = Vec::new();
    for page in &pages {
        let html = std::fs::read_to_string(doc.join(page))?;
        // `ops/metrics/struct.Metrics.html` is `ops::metrics::Metrics`
        let (dir, file) = page.rsplit_once('/').unwrap_or(("", page));
        let name = file
            .trim_end_matches(".html")
            .split_once('.')
            .map_or(file, |(_, n)| n);
        let path = if dir.is_empty() {
            name.to_owned()
        } else {
            format!("{}::{name}", dir.replace('/', "::"))
        };
        lines.extend(item_lines(&path, &html));
    }
    Ok(lines.join("\n") + "\n")
}

/// The newest modification time under `dir` (the crate's sources).
fn newest(dir: &Path) -> anyhow::Result<SystemTime> {
    let mut t = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let m = entry.metadata()?;
        t = t.max(if m.is_dir() {
            newest(&entry.path())?
        } else {
            m.modified()?
        });
    }
    Ok(t)
}

/// The packages whose API is recorded: what [`document`] builds, and nothing else.
const PACKAGES: [&str; 5] = [
    "kmeta",
    "kmeta-apply",
    "kmeta-hook",
    "kmeta-wire",
    "dynapply",
];

/// Runs `cargo doc --no-deps` for the [`PACKAGES`] once per test run (cargo does not hold its
/// build lock while tests run), with the `RUSTDOCFLAGS` of `.ci/run`'s documentation step
/// (`-D warnings`), so either reuses what the other built: cargo re-documents a package only when
/// its sources changed, and a change of `RUSTDOCFLAGS` would re-document every one. The other
/// workspace members (kmeta-apiserver, the tests, the examples) are not documented here: their
/// API is not recorded, and documenting them took most of this test's time.
fn document(root: &Path) -> anyhow::Result<()> {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *done {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.args(["doc", "--no-deps", "--quiet"]);
    // what cargo set for this test process only: build scripts that rerun when one changes
    // (ring's names CARGO_MANIFEST_DIR and CARGO_PKG_NAME) would run again with this test's
    // values, and the next `cargo test` would rebuild ring and everything above it
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name == "OUT_DIR"
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_BIN_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
            ]
            .contains(&&*name)
        {
            command.env_remove(&*name);
        }
    }
    for package in PACKAGES {
        command.args(["-p", package]);
    }
    let status = command
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(root)
        .status()?;
    anyhow::ensure!(
        status.success(),
        "cargo doc --no-deps -p {} failed: {status}",
        PACKAGES.join(" -p ")
    );
    *done = true;
    Ok(())
}

/// Compares the API of the crate documented as `doc_name` (sources in `src_dir`) with the list
/// at `list`.
fn check(doc_name: &str, src_dir: &str, list: &str) -> anyhow::Result<()> {
    let root = root().canonicalize()?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let doc = target.join("doc").join(doc_name);
    let index = doc.join("all.html");
    let stale = |index: &Path| -> anyhow::Result<bool> {
        let Ok(built) = std::fs::metadata(index).and_then(|m| m.modified()) else {
            return Ok(true);
        };
        Ok(built < newest(&root.join(src_dir))?)
    };
    if stale(&index).unwrap_or(true) {
        document(&root)?;
    }
    assert!(
        !stale(&index)?,
        "{} is still older than the sources in {src_dir} after `cargo doc`",
        index.display()
    );
    let now = api_of(&doc)?;
    let path = root.join(list);
    if std::env::var_os("KMETA_BLESS_PUBLIC_API").is_some() {
        std::fs::write(&path, &now)?;
        return Ok(());
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_default();
    if recorded != now {
        let was: BTreeSet<&str> = recorded.lines().collect();
        let is: BTreeSet<&str> = now.lines().collect();
        let gone: Vec<_> = was.difference(&is).collect();
        let new: Vec<_> = is.difference(&was).collect();
        panic!(
            "the public API of {doc_name} differs from {list}; if intended, rerun with \
             KMETA_BLESS_PUBLIC_API=1 and commit the list.\n--- gone ---\n{}\n--- new ---\n{}",
            gone.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            new.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    Ok(())
}

#[test]
fn kmeta_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check("kmeta", "controller/src", "controller/public-api.txt")
}

#[test]
fn kmeta_apply_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check("kmeta_apply", "apply/src", "apply/public-api.txt")
}

#[test]
fn kmeta_hook_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check("kmeta_hook", "sdk/src", "sdk/public-api.txt")
}

#[test]
fn kmeta_wire_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check("kmeta_wire", "wire/src", "wire/public-api.txt")
}

#[test]
fn dynapply_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check("dynapply", "dynapply/src", "dynapply/public-api.txt")
}

/// The reader sees what rustdoc shows: a declaration with its fields, and inherent methods but
/// not trait implementations.
#[test]
fn an_item_page_gives_its_declaration_and_inherent_methods() {
    let page = r#"<pre class="rust item-decl"><code>pub struct <a>S</a> {
    pub x: <a>Vec</a>&lt;u8&gt;,
}</code></pre><h2 id="implementations">Implementations</h2>
<h4 class="code-header">pub fn <a>get</a>(&amp;self) -&gt; u8</h4>
<h2 id="trait-implementations">Trait Implementations</h2>
<h4 class="code-header">fn <a>clone</a>(&amp;self) -&gt; S</h4>"#;
    assert_eq!(
        item_lines("m::S", page),
        [
            "m::S: pub struct S { pub x: Vec<u8>, }",
            "m::S:   pub fn get(&self) -> u8"
        ]
    );
}
