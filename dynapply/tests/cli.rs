//! The `dynapply` binary: exact interface, exit codes, output shape.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dynapply"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running dynapply: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", p.display()))
}

#[test]
fn diff_on_the_shipped_examples_shows_the_image_change_and_keeps_the_sidecar() {
    let (obs, des) = (example("observed.yaml"), example("desired.yaml"));
    let o = run(&[
        "diff",
        "--observed",
        path_str(&obs),
        "--desired",
        path_str(&des),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("-        image: nginx:1.25"), "{out}");
    assert!(out.contains("+        image: nginx:1.27"), "{out}");
    assert!(out.contains("+        - name: WORKERS"), "{out}");
    assert!(
        out.contains("  spec.template.spec.containers[name=log-uploader]\n"),
        "{out}"
    );
    assert!(out.contains("  spec.replicas\n"), "{out}");
    // the sidecar is never a removed line
    assert!(
        !out.lines()
            .any(|l| l.starts_with('-') && l.contains("log-uploader")),
        "{out}"
    );
    // not a terminal: no colour
    assert!(!out.contains('\u{1b}'), "{out}");
    let o = run(&[
        "diff",
        "--observed",
        path_str(&obs),
        "--desired",
        path_str(&des),
        "--color",
        "always",
    ]);
    assert!(stdout(&o).contains("\u{1b}[32m+        image: nginx:1.27\u{1b}[0m"));
}

#[test]
fn apply_then_diff_and_apply_again_report_no_change() {
    let (obs, des) = (example("observed.yaml"), example("desired.yaml"));
    let o = run(&[
        "apply",
        "--observed",
        path_str(&obs),
        "--desired",
        path_str(&des),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("apply output is not JSON: {e}"));
    assert_eq!(v["changed"], Value::Bool(true));
    let containers = &v["object"]["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "nginx:1.27");
    assert_eq!(containers[1]["name"], "log-uploader");
    assert_eq!(v["object"]["status"]["readyReplicas"], 5);

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let written = dir.path().join("written.json");
    std::fs::write(&written, v["object"].to_string()).unwrap_or_else(|e| panic!("write: {e}"));
    let o = run(&[
        "apply",
        "--observed",
        path_str(&written),
        "--desired",
        path_str(&des),
    ]);
    let again: Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(again["changed"], Value::Bool(false));
    assert_eq!(again["object"], v["object"]);
    let o = run(&[
        "diff",
        "--observed",
        path_str(&written),
        "--desired",
        path_str(&des),
    ]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("No changes"), "{}", stdout(&o));
}

#[test]
fn merge_uses_the_annotation_or_an_explicit_last_applied() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let w = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("write: {e}"));
        p
    };
    let observed = w("o.yaml", "a: 1\nb: 2\nc: 3\n");
    let desired = w("d.json", r#"{"a": 10}"#);
    let last = w("l.yaml", "a: 1\nb: 2\n");
    // no annotation, no --last-applied: nothing removed
    let o = run(&[
        "merge",
        "--observed",
        path_str(&observed),
        "--desired",
        path_str(&desired),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(v, serde_json::json!({"a": 10, "b": 2, "c": 3}));
    let o = run(&[
        "merge",
        "--observed",
        path_str(&observed),
        "--desired",
        path_str(&desired),
        "--last-applied",
        path_str(&last),
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(v, serde_json::json!({"a": 10, "c": 3}));
    // from the annotation
    let annotated = w(
        "annotated.yaml",
        "metadata:\n  annotations:\n    metacontroller.k8s.io/last-applied-configuration: '{\"b\":2}'\nb: 2\nc: 3\n",
    );
    let o = run(&[
        "merge",
        "--observed",
        path_str(&annotated),
        "--desired",
        path_str(&desired),
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(v["c"], 3);
    assert_eq!(v["a"], 10);
    assert!(v.get("b").is_none(), "{v}");
}

#[test]
fn errors_are_one_line_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "a: [1, 2\nb: : c\n").unwrap_or_else(|e| panic!("write: {e}"));
    let list = dir.path().join("list.yaml");
    std::fs::write(&list, "- 1\n- 2\n").unwrap_or_else(|e| panic!("write: {e}"));
    let corrupt = dir.path().join("corrupt.yaml");
    std::fs::write(
        &corrupt,
        "metadata:\n  annotations:\n    metacontroller.k8s.io/last-applied-configuration: '{oops'\n",
    )
    .unwrap_or_else(|e| panic!("write: {e}"));
    let des = example("desired.yaml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "merge",
                "--observed",
                path_str(&bad),
                "--desired",
                path_str(&des),
            ],
            "bad.yaml: invalid YAML",
        ),
        (
            vec![
                "merge",
                "--observed",
                "/no/such/file",
                "--desired",
                path_str(&des),
            ],
            "reading observed file /no/such/file",
        ),
        (
            vec![
                "apply",
                "--observed",
                path_str(&list),
                "--desired",
                path_str(&des),
            ],
            "must be a single object",
        ),
        (
            vec![
                "apply",
                "--observed",
                path_str(&corrupt),
                "--desired",
                path_str(&des),
            ],
            "corrupt last-applied configuration",
        ),
        (
            vec![
                "diff",
                "--observed",
                path_str(&corrupt),
                "--desired",
                path_str(&des),
            ],
            "corrupt last-applied configuration",
        ),
    ];
    for (args, want) in cases {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("dynapply: error: "), "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(stdout(&o).is_empty());
    }
}
