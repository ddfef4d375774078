//! The documents' shell blocks, run as a newcomer runs them: every fenced `sh` block of the
//! documents in [`DRIVEN`] (README.md, examples/*/README.md, docs/*.md, CONTRIBUTING.md) is read
//! at test time (edit a document and this test runs the new commands), each line is planned by
//! the explicit rules of [`plan`], and run with `sh -c` in a scratch directory that looks like a
//! clone of the repository, with the built binaries first on `PATH` (what `cargo install` would
//! give). Every command must exit 0; a command is retried, as a person would re-run it, until it
//! does and its stated outcome ([`OUTCOMES`]) appears, within a deadline. A shell block in any
//! other markdown file of the repository fails [`every_doc_is_driven_or_only_needs_a_cluster`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

#[allow(dead_code)] // the async helpers are for the other test files
mod support;
use support::{on_path, skip_or_fail};

/// How long one command may take to succeed (retries included), and a background command to
/// print its ready line.
const DEADLINE: Duration = Duration::from_secs(90);

/// What each document says a command shows: (document, command as written, text its output
/// contains, runs of spaces counting as one). A check whose command is no longer in its document
/// fails the test, so a changed or moved command gets its check updated.
const OUTCOMES: &[(&str, &str, &str)] = &[
    ("README.md", "cargo run -p kmeta -- demo", "wrote nothing"),
    (
        "README.md",
        "kubectl --kubeconfig kmeta-dev.kubeconfig get configmaps -A",
        "team-b shared-settings",
    ),
    (
        "README.md",
        "kubectl --kubeconfig kmeta-jsonnet.kubeconfig get configmaps -A",
        "team-b shared-settings",
    ),
    (
        "examples/configmap-propagation/README.md",
        "kubectl --kubeconfig kmeta-dev.kubeconfig -n team-a get configmap shared-settings -o yaml",
        "region: eu-west-1",
    ),
    (
        "examples/configmap-propagation/README.md",
        "kubectl --kubeconfig kmeta-dev.kubeconfig get configmappropagations",
        "shared-settings shared-settings 2 2",
    ),
    (
        "examples/drain-before-delete/README.md",
        "kubectl get queue orders -o jsonpath='{.status.pending}'",
        "3",
    ),
    (
        "examples/drain-before-delete/README.md",
        "kubectl get queue orders -o jsonpath='{.status.phase}'",
        "Draining",
    ),
    (
        "examples/drain-before-delete/README.md",
        "kubectl wait --for=delete queue/orders --timeout=60s",
        "",
    ),
    (
        "examples/sidecar-safe/README.md",
        "kubectl --kubeconfig kmeta-dev.kubeconfig get deployment shop -o yaml",
        "image: nginx:1.27",
    ),
    (
        "examples/sidecar-safe/README.md",
        "kubectl --kubeconfig kmeta-dev.kubeconfig get webapp shop -o jsonpath='{.status}'",
        r#""image":"nginx:1.27""#,
    ),
];

/// One fenced shell block: its first line number, the prose since the previous heading (that
/// heading included) or block, and its lines (continuations joined).
#[derive(Debug)]
struct Block {
    line: usize,
    intro: String,
    lines: Vec<String>,
}

fn shell_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut intro = String::new();
    let mut current: Option<Block> = None;
    let mut other_block = false;
    for (i, line) in markdown.lines().enumerate() {
        if other_block {
            other_block = !line.starts_with("```");
        } else if let Some(block) = current.as_mut() {
            if line.starts_with("```") {
                blocks.extend(current.take());
                intro.clear();
            } else if let Some(prev) = block.lines.last_mut().filter(|l| l.ends_with('\\')) {
                prev.pop();
                prev.push_str(line.trim_start());
            } else {
                block.lines.push(line.to_owned());
            }
        } else if let Some(lang) = line.strip_prefix("```") {
            if matches!(lang.trim(), "sh" | "bash" | "shell") {
                current = Some(Block {
                    line: i + 1,
                    intro: intro.clone(),
                    lines: Vec::new(),
                });
            } else {
                other_block = true;
            }
        } else if line.starts_with('#') {
            // a heading starts the intro of the blocks under it
            intro = format!("{line}\n");
        } else {
            intro.push_str(line);
            intro.push('\n');
        }
    }
    blocks
}

/// The command of a line without its trailing `# comment` (a `#` after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        prev = c;
    }
    line.trim_end()
}

/// What the test does with one command line.
#[derive(Debug, PartialEq)]
enum Step {
    /// Not run, by the named rule.
    Skip(&'static str),
    /// Run with `sh -c` until it exits 0 (and its outcome appears).
    Run(String),
    /// Started with `sh -c` and left running; the next line runs once its output contains the
    /// marker.
    Background(String, &'static str),
    /// `export NAME=VALUE`: prefixed to every later command of the README.
    Export(String),
}

/// The rules, in order. Every `cargo` command needs one; a block introduced by prose about a
/// cluster needs a real cluster and is not run (`controller/tests/deploy.rs` covers `deploy/`).
fn plan(line: &str) -> anyhow::Result<Step> {
    let command = strip_comment(line);
    // `VAR=value cargo test …`: the rules look at the program
    let program_part = command
        .split_whitespace()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .collect::<Vec<_>>()
        .join(" ");
    if command.starts_with("export ") {
        return Ok(Step::Export(command.to_owned()));
    }
    if program_part.starts_with("cargo install ") {
        return Ok(Step::Skip(
            "cargo install: the test puts the binaries it built first on PATH instead",
        ));
    }
    if program_part.starts_with("cargo test") || program_part.starts_with("cargo bench") {
        return Ok(Step::Skip("cargo test/bench: the test suite itself"));
    }
    if program_part.starts_with("python3 tests/benches/") {
        return Ok(Step::Skip(
            "a bench's measuring aid (minutes to hours), like cargo bench: not a story step",
        ));
    }
    if program_part.starts_with("cargo build ") {
        return Ok(Step::Skip(
            "cargo build: a build for a bench, not a step of the stories run here",
        ));
    }
    let (command, background) = match command.strip_suffix('&') {
        Some(c) => (c.trim_end(), true),
        None => (command, false),
    };
    let command = cargo_run_as_binary(command)?;
    Ok(if command.starts_with("kmeta dev") {
        // runs until Ctrl-C; the README's next lines are for "a second terminal"
        Step::Background(command, "controller running")
    } else if background {
        Step::Background(command, "listening on")
    } else {
        Step::Run(command)
    })
}

/// `cargo run -p kmeta -- ARGS` is `kmeta ARGS`, `cargo run -p PKG --bin BIN [-- ARGS]` is
/// `BIN ARGS`: the binaries cargo built for this test run (a nested cargo would wait on the
/// build directory's lock, or rebuild with other features).
fn cargo_run_as_binary(command: &str) -> anyhow::Result<String> {
    if !command.starts_with("cargo") {
        return Ok(command.to_owned());
    }
    if let Some(args) = command.strip_prefix("cargo run -p kmeta -- ") {
        return Ok(format!("kmeta {args}"));
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        ["cargo", "run", "-p", _, "--bin", bin, rest @ ..] => {
            let args = rest.strip_prefix(&["--"]).unwrap_or(rest);
            Ok(std::iter::once(*bin)
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join(" "))
        }
        _ => bail!("no rule for `{command}`: add one to plan() in {}", file!()),
    }
}

/// Output of a process, gathered by reader threads while it runs.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<String>>);

impl Output {
    fn collect(&self, child: &mut Child) {
        let readers: Vec<Box<dyn Read + Send>> = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        for mut r in readers {
            let text = self.0.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = r.read(&mut buf) {
                    let mut t = text
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
    }

    fn text(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A scratch directory standing in for a fresh clone, the processes started in it (killed with
/// their process group on drop) and the README's `export`s.
struct Session {
    dir: tempfile::TempDir,
    path: std::ffi::OsString,
    exports: String,
    background: Vec<(Child, Output, String)>,
}

impl Session {
    fn new(repo: &Path, bin_dir: &Path) -> anyhow::Result<Session> {
        let dir = tempfile::tempdir()?;
        for entry in std::fs::read_dir(repo)? {
            let entry = entry?;
            let name = entry.file_name();
            if name != "target" && name != ".git" {
                std::os::unix::fs::symlink(entry.path(), dir.path().join(&name))?;
            }
        }
        let mut paths = vec![bin_dir.to_owned()];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Ok(Session {
            dir,
            path: std::env::join_paths(paths)?,
            exports: String::new(),
            background: Vec::new(),
        })
    }

    fn spawn(&self, command: &str) -> anyhow::Result<(Child, Output)> {
        use std::os::unix::process::CommandExt as _;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{}exec {command}", self.exports))
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting `{command}`"))?;
        let output = Output::default();
        output.collect(&mut child);
        Ok((child, output))
    }

    /// Starts `command` and waits until its output contains `ready`.
    fn background(&mut self, command: &str, ready: &str) -> anyhow::Result<()> {
        let (mut child, output) = self.spawn(command)?;
        let deadline = Instant::now() + DEADLINE;
        while !output.text().contains(ready) {
            if let Some(status) = child.try_wait()? {
                bail!("`{command}` exited ({status}):\n{}", output.text());
            }
            if Instant::now() > deadline {
                kill_group(&mut child);
                bail!(
                    "`{command}` did not print {ready:?} in time:\n{}",
                    output.text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.background.push((child, output, command.to_owned()));
        Ok(())
    }

    /// Runs `command` until it exits 0 with `expected` in its output.
    fn run(&self, command: &str, expected: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::from("killed at the deadline");
        loop {
            let (mut child, output) = self.spawn(command)?;
            let status = loop {
                if let Some(status) = child.try_wait()? {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    kill_group(&mut child);
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            // the readers finish once the pipes close
            let text = wait_settled(&output);
            if status.is_some_and(|s| s.success()) && shows(&text, expected) {
                return Ok(text);
            }
            if status.is_some() {
                last = format!("{status:?}:\n{text}");
            }
            if Instant::now() > deadline {
                bail!(
                    "`{command}` did not exit 0 with {expected:?} in its output in time \
                     (last attempt {last})\n{}",
                    self.background_output()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn background_output(&self) -> String {
        self.background
            .iter()
            .map(|(_, out, cmd)| format!("--- output of `{cmd}`:\n{}", out.text()))
            .collect()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for (child, _, _) in &mut self.background {
            kill_group(child);
        }
    }
}

fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.wait();
}

/// Whether `output` contains `expected`, runs of spaces counting as one (kubectl's column
/// widths depend on every row).
fn shows(output: &str, expected: &str) -> bool {
    let squeeze = |s: &str| {
        s.split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    };
    squeeze(output).contains(&squeeze(expected))
}

/// The output once the reader threads have stopped adding to it (bounded: 2 s).
fn wait_settled(output: &Output) -> String {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = output.text();
    loop {
        std::thread::sleep(Duration::from_millis(30));
        let now = output.text();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The directory of the binaries cargo built for this test run (`kmeta` and the examples').
fn bin_dir() -> anyhow::Result<PathBuf> {
    Path::new(env!("CARGO_BIN_EXE_kmeta"))
        .parent()
        .map(Path::to_owned)
        .context("the kmeta binary's directory")
}

/// The port every example's `controller.yaml` points its hooks at; the document tests take turns.
static HOOK_PORT_8080: Mutex<()> = Mutex::new(());

/// Runs every shell block of `doc` (relative to the repository root) as planned. Returns
/// `Ok(false)` when a program it needs is missing here (see [`skip_or_fail`]). A document without
/// shell blocks fails: its blocks moved, and the test should follow them.
fn drive(doc: &str) -> anyhow::Result<bool> {
    let _turn = HOOK_PORT_8080
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = std::fs::read_to_string(repo().join(doc))?;
    let blocks = shell_blocks(&text);
    if blocks.is_empty() {
        bail!(
            "{doc} has no shell block: drive the document its blocks moved to (DRIVEN in {})",
            file!()
        );
    }
    let mut steps = Vec::new();
    for block in blocks {
        if block.intro.to_lowercase().contains("cluster") {
            continue; // needs a real cluster (rule in plan()'s doc)
        }
        for line in block.lines.iter().filter(|l| !strip_comment(l).is_empty()) {
            let step = plan(line).with_context(|| format!("{doc}:{}", block.line))?;
            steps.push((strip_comment(line).to_owned(), step));
        }
    }
    let bin_dir = bin_dir()?;
    let missing = missing_programs(&steps, &bin_dir);
    if !missing.is_empty() {
        skip_or_fail(&format!(
            "{doc} needs {missing:?}: not on PATH, not built here \
             (`cargo test --workspace` builds the examples' binaries)"
        ))?;
        return Ok(false);
    }
    let mut session = Session::new(&repo(), &bin_dir)?;
    let mut checked = Vec::new();
    for (written, step) in &steps {
        match step {
            Step::Skip(rule) => eprintln!("{doc}: not run: `{written}` ({rule})"),
            Step::Export(e) => session.exports.push_str(&format!("{e}; ")),
            Step::Background(cmd, ready) => session.background(cmd, ready)?,
            Step::Run(cmd) => {
                let expected = OUTCOMES
                    .iter()
                    .find(|(r, c, _)| *r == doc && c == written)
                    .map_or("", |(_, _, e)| *e);
                session
                    .run(cmd, expected)
                    .with_context(|| format!("{doc}: `{written}`"))?;
                checked.push(written.as_str());
            }
        }
    }
    for (_, command, _) in OUTCOMES.iter().filter(|(r, _, _)| *r == doc) {
        if !checked.contains(command) {
            bail!(
                "{doc} no longer runs `{command}`: update OUTCOMES in {}",
                file!()
            );
        }
    }
    Ok(true)
}

/// The programs the steps start that are on neither `PATH` nor in `bin_dir`.
fn missing_programs(steps: &[(String, Step)], bin_dir: &Path) -> Vec<String> {
    let mut missing: Vec<String> = steps
        .iter()
        .filter_map(|(_, step)| match step {
            Step::Run(c) | Step::Background(c, _) => c.split_whitespace().next(),
            _ => None,
        })
        .filter(|p| !bin_dir.join(p).is_file() && !on_path(p))
        .map(str::to_owned)
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// The documents whose shell blocks are run, each by a test below.
const DRIVEN: &[&str] = &[
    "README.md",
    "examples/configmap-propagation/README.md",
    "examples/drain-before-delete/README.md",
    "examples/sidecar-safe/README.md",
    "docs/performance.md",
    "CONTRIBUTING.md",
];

#[test]
fn main_readme_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("README.md").map(drop)
}

#[test]
fn configmap_propagation_readme_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("examples/configmap-propagation/README.md").map(drop)
}

#[test]
fn drain_before_delete_readme_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("examples/drain-before-delete/README.md").map(drop)
}

#[test]
fn sidecar_safe_readme_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("examples/sidecar-safe/README.md").map(drop)
}

/// The sizing bench's commands: every line is a `cargo build` or `cargo bench`, planned but not
/// run (the rules say why).
#[test]
fn performance_doc_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("docs/performance.md").map(drop)
}

/// The test commands: `cargo test` lines, planned but not run (the test suite itself).
#[test]
fn contributing_runs_as_written_or_skips_without_its_tools() -> anyhow::Result<()> {
    drive("CONTRIBUTING.md").map(drop)
}

/// The markdown files of the repository, relative to its root (build output and hidden
/// directories left out).
fn markdown_files(dir: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, out)?;
        } else if name.ends_with(".md") {
            out.push(path.strip_prefix(repo())?.display().to_string());
        }
    }
    Ok(())
}

/// Every shell block of every markdown file is run by a test here, or its introduction says it
/// needs a real cluster (the Rust-operator examples' blocks, skipped here); every other block
/// must plan, so a new command gets a rule, and a new document with shell blocks gets a test.
#[test]
fn every_doc_is_driven_or_only_needs_a_cluster() -> anyhow::Result<()> {
    let mut docs = Vec::new();
    markdown_files(&repo(), &mut docs)?;
    docs.sort();
    for doc in DRIVEN {
        assert!(docs.iter().any(|d| d == doc), "{doc}: no such file");
    }
    for (doc, command, _) in OUTCOMES {
        assert!(
            DRIVEN.contains(doc),
            "OUTCOMES: `{command}` of {doc}, a document no test runs"
        );
    }
    for doc in &docs {
        let text = std::fs::read_to_string(repo().join(doc))?;
        for block in shell_blocks(&text) {
            if block.intro.to_lowercase().contains("cluster") {
                continue; // needs a real cluster (rule in plan()'s doc)
            }
            for line in block.lines.iter().filter(|l| !strip_comment(l).is_empty()) {
                plan(line).with_context(|| format!("{doc}:{}", block.line))?;
            }
            assert!(
                DRIVEN.contains(&doc.as_str()),
                "{doc}:{}: a shell block no test runs: add the document to DRIVEN and a test to {}",
                block.line,
                file!()
            );
        }
    }
    Ok(())
}

#[test]
fn lines_are_planned_by_the_rules() -> anyhow::Result<()> {
    assert_eq!(
        plan("cargo install --locked --path controller   # once")?,
        Step::Skip("cargo install: the test puts the binaries it built first on PATH instead")
    );
    assert_eq!(
        plan("KMETA_TEST_LOG=kmeta=debug cargo test -p kmeta-tests -- --nocapture")?,
        Step::Skip("cargo test/bench: the test suite itself")
    );
    assert!(matches!(
        plan("cargo build --release -p kmeta   # the binaries the bench runs")?,
        Step::Skip(_)
    ));
    // the bench matrix of docs/performance.md, its continuation lines joined
    assert_eq!(
        plan(
            "KMETA_SCALE_PARENTS=1000,10000 KMETA_SCALE_KINDS=configmap,deployment \
             KMETA_SCALE_LATENCY_MS=0,5 cargo bench -p kmeta-tests --bench scale"
        )?,
        Step::Skip("cargo test/bench: the test suite itself")
    );
    assert!(matches!(
        plan("KMETA_SCALE_REPLICAS=1x1,3x1 python3 tests/benches/scale/instructions.py")?,
        Step::Skip(_)
    ));
    assert_eq!(
        plan("cargo run -p kmeta -- demo")?,
        Step::Run("kmeta demo".into())
    );
    assert_eq!(
        plan("cargo run -p x --bin x-hook &    # POST /sync on :8080")?,
        Step::Background("x-hook".into(), "listening on")
    );
    assert_eq!(
        plan("cargo run -p x --bin x-hook -- 127.0.0.1:9 &")?,
        Step::Background("x-hook 127.0.0.1:9".into(), "listening on")
    );
    assert_eq!(
        plan("kmeta dev -f examples/x/    # runs until Ctrl-C; in a second terminal:")?,
        Step::Background("kmeta dev -f examples/x/".into(), "controller running")
    );
    assert_eq!(
        plan("kubectl get x -o jsonpath='{.a}'   # the #1 thing")?,
        Step::Run("kubectl get x -o jsonpath='{.a}'".into())
    );
    assert!(
        plan("cargo publish --dry-run").is_err(),
        "a cargo command needs a rule"
    );
    Ok(())
}

#[test]
fn shell_blocks_keep_their_intro_and_join_continuations() {
    let md = "# T\nRun it against a cluster:\n\n```sh\na \\\n  b\nc\n```\n## U\n```rust\nx\n```\n```sh\nd\n```\n";
    let blocks = shell_blocks(md);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].lines, ["a b", "c"]);
    assert!(blocks[0].intro.contains("cluster"));
    assert_eq!(blocks[1].lines, ["d"]);
    assert_eq!(blocks[1].intro, "## U\n", "the rust block is no intro");
}
