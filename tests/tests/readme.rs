//! The root README's claims about the Rust examples: the line counts it states are the files'.

use std::path::Path;

/// Lines of `file` before its `#[cfg(test)]` unit tests.
fn lines_without_tests(file: &Path) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(file)?;
    Ok(text
        .lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count())
}

#[test]
fn the_use_from_rust_line_counts_are_the_examples() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `src/lib.rs` without its unit tests |"))
        .ok_or_else(|| anyhow::anyhow!("README: no line-count row"))?;
    let counts: Vec<usize> = row
        .split('|')
        .filter_map(|cell| cell.trim().strip_suffix(" lines"))
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let want = [
        lines_without_tests(&root.join("examples/kube-rs-operator/src/lib.rs"))?,
        lines_without_tests(&root.join("examples/in-process-operator/src/lib.rs"))?,
    ];
    assert_eq!(counts, want, "README line counts vs the examples");
    Ok(())
}
