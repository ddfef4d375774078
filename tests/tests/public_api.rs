//! The public API of the crates kube-rs users build on, as checked-in lists: `kmeta-apply`
//! (`apply/public-api.txt`) and `kmeta::embed` (`controller/public-api-embed.txt`). A change to
//! a public signature fails this test until the list is updated (run it with
//! `KMETA_BLESS_PUBLIC_API=1` and review the diff), so API changes are seen in review and
//! reflected in the version. cargo-public-api needs a nightly toolchain and cargo-semver-checks
//! a published baseline; neither is available to this project's CI, hence the list.

use std::path::{Path, PathBuf};

/// The public item lines of one source file, before its unit tests: each `pub` item (not
/// `pub(crate)`/`pub(super)`) with its signature joined onto one line up to its body, the
/// variants of a `pub enum` and the methods of a `pub trait`.
fn public_items(file: &Path, root: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(file)?;
    let name = file.strip_prefix(root)?.display().to_string();
    let mut out = Vec::new();
    let mut lines = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]"));
    let mut inside: Option<&str> = None; // "enum" or "trait", until its closing brace
    while let Some(line) = lines.next() {
        let t = line.trim();
        if line == "}" {
            inside = None;
            continue;
        }
        let member = line.starts_with("    ") && !line.starts_with("        ");
        let item = match inside {
            Some("enum") if member && t.starts_with(|c: char| c.is_ascii_uppercase()) => true,
            Some("trait") if member && t.starts_with("fn ") => true,
            _ => t.starts_with("pub "),
        };
        if !item {
            continue;
        }
        if t.starts_with("pub enum ") && t.ends_with('{') {
            inside = Some("enum");
        } else if t.starts_with("pub trait ") && t.ends_with('{') {
            inside = Some("trait");
        }
        let function = t.contains("fn ");
        let mut sig = t.to_owned();
        let done =
            |s: &str| s.ends_with('{') || s.ends_with(';') || (!function && s.ends_with(','));
        let variant = inside == Some("enum") && !t.starts_with("pub ");
        while !variant && !done(&sig) {
            let Some(more) = lines.next() else { break };
            sig.push(' ');
            sig.push_str(more.trim());
        }
        let sig = sig
            .trim_end_matches(['{', ';', ','])
            .trim()
            .replace("( ", "(")
            .replace(", )", ")")
            .replace(" )", ")");
        out.push(format!("{name}: {sig}"));
    }
    Ok(out)
}

fn check(list: &str, files: &[&str]) -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize()?;
    let mut items = Vec::new();
    for f in files {
        items.extend(public_items(&root.join(f), &root)?);
    }
    let now = items.join("\n") + "\n";
    let path = root.join(list);
    if std::env::var_os("KMETA_BLESS_PUBLIC_API").is_some() {
        std::fs::write(&path, &now)?;
        return Ok(());
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        recorded == now,
        "the public API differs from {list}; if intended, rerun with KMETA_BLESS_PUBLIC_API=1 \
         and commit the list.\n--- now ---\n{now}"
    );
    Ok(())
}

#[test]
fn kmeta_apply_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check(
        "apply/public-api.txt",
        &[
            "apply/src/lib.rs",
            "apply/src/params.rs",
            "apply/src/error.rs",
            "apply/src/plan.rs",
        ],
    )
}

#[test]
fn kmeta_embed_public_api_is_the_recorded_one() -> anyhow::Result<()> {
    check(
        "controller/public-api-embed.txt",
        &["controller/src/embed.rs"],
    )
}
