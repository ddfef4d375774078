//! Helpers for the tests that drive the `kmeta-apiserver` binary with the real kubectl.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(20);

pub fn kubectl_path() -> Option<PathBuf> {
    let candidates = [
        PathBuf::from("/usr/bin/kubectl"),
        PathBuf::from("/usr/local/bin/kubectl"),
    ];
    candidates.into_iter().find(|p| p.exists())
}

pub struct Server {
    child: Child,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start() -> Server {
    start_with(&[])
}

/// Start the binary with more flags (paths in them are the caller's).
pub fn start_with(flags: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kmeta-apiserver"))
        .args(["--port", "0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let url = rx.recv_timeout(WAIT).expect("server printed its address");
    assert!(
        url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:"),
        "{url}"
    );
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains(&format!("server: {}", url.trim())), "{kc}");
    Server {
        child,
        kubeconfig,
        _dir: dir,
    }
}

pub fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(kubectl_path().unwrap());
    cmd.arg("--kubeconfig")
        .arg(kc)
        .arg("--request-timeout=15s")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn ok(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let (success, out, err) = kubectl(kc, args, stdin);
    assert!(success, "kubectl {args:?} failed: {err}\n{out}");
    out
}

pub fn get_json(kc: &Path, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&ok(kc, &a, None)).unwrap()
}

/// Whether kubectl is installed; without it a test is skipped with a message, except under CI
/// (`CI` set, as CI services do), where it fails: the kubectl checks must not vanish silently.
pub fn have_kubectl() -> bool {
    if kubectl_path().is_some() {
        return true;
    }
    assert!(
        std::env::var("KMETA_CI").as_deref() != Ok("1"),
        "kubectl is required under CI (KMETA_CI=1, set by .ci/run) but is not at /usr/bin/kubectl or /usr/local/bin/kubectl"
    );
    println!("SKIPPED: kubectl not found at /usr/bin/kubectl or /usr/local/bin/kubectl");
    false
}
