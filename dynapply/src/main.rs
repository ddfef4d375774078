//! `dynapply`: the three-way apply engine on the command line.
//!
//! ```text
//! dynapply merge --observed FILE --desired FILE [--last-applied FILE]   # merged object as JSON
//! dynapply apply --observed FILE --desired FILE                         # {"changed": bool, "object": {...}}
//! dynapply diff  --observed FILE --desired FILE                         # readable preview of an update
//! ```

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use dynapply::{
    ListRules, Options, Ordering, Outcome, SYSTEM_METADATA_FIELDS, apply_update, get_last_applied,
    kept_by_others, merge_with, parse_document, to_yaml,
};
use serde_json::Value;

/// Kubernetes-style three-way apply (last-applied, desired, live) for any object, including
/// custom resources: list-maps are detected by merge-key conventions, so items other automation
/// added (a sidecar container, an env var) survive updates. Files may be JSON or YAML.
#[derive(Parser)]
#[command(name = "dynapply", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the three-way merge of observed, last-applied and desired as JSON.
    Merge {
        #[command(flatten)]
        common: Common,
        /// Last-applied configuration; default: the observed object's last-applied annotation
        /// (none if it has no annotation: nothing is removed).
        #[arg(long, value_name = "FILE")]
        last_applied: Option<PathBuf>,
    },
    /// Run the controller's update step and print {"changed": bool, "object": {...}}.
    Apply {
        #[command(flatten)]
        common: Common,
    },
    /// Show what an update would change in the live object, as a unified diff of YAML.
    Diff {
        #[command(flatten)]
        common: Common,
        /// Colour the diff: auto (when stdout is a terminal and NO_COLOR is unset), always, never.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
        /// Show the full last-applied annotation instead of a short fingerprint.
        #[arg(long)]
        show_last_applied: bool,
        /// Lines of context around each change.
        #[arg(long, default_value_t = 4, value_name = "N")]
        context: usize,
    },
}

#[derive(Args)]
struct Common {
    /// The live object (as read from the cluster), JSON or YAML.
    #[arg(long, value_name = "FILE")]
    observed: PathBuf,
    /// The desired object (as returned by the hook), JSON or YAML.
    #[arg(long, value_name = "FILE")]
    desired: PathBuf,
    /// List-map order: desired (kubectl's rule, default) or metacontroller (live order, new
    /// items appended).
    #[arg(long, value_enum, default_value_t = OrderingArg::Desired)]
    ordering: OrderingArg,
    /// Which explicit list rules to use: auto (the built-in Kubernetes rules for the desired
    /// object's kind, plus --crd), or convention (the merge-key convention only, like
    /// Metacontroller).
    #[arg(long, value_enum, default_value_t = RulesArg::Auto)]
    rules: RulesArg,
    /// A CustomResourceDefinition whose schema markers (x-kubernetes-list-type, -list-map-keys)
    /// add list rules for the object's version.
    #[arg(long, value_name = "FILE")]
    crd: Option<PathBuf>,
    /// Name of the last-applied annotation.
    #[arg(long, default_value = dynapply::LAST_APPLIED_ANNOTATION, value_name = "NAME")]
    annotation: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum)]
enum OrderingArg {
    Desired,
    Metacontroller,
}

#[derive(Clone, Copy, ValueEnum)]
enum RulesArg {
    Auto,
    Convention,
}

fn read_object(path: &Path, what: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {what} file {}", path.display()))?;
    let value = parse_document(&path.display().to_string(), &text)?;
    if !value.is_object() {
        bail!(
            "{}: the {what} document must be a single object (a mapping), not {}",
            path.display(),
            match value {
                Value::Null => "an empty document",
                Value::Array(_) => "a list",
                _ => "a scalar",
            }
        );
    }
    Ok(value)
}

struct Inputs {
    observed: Value,
    desired: Value,
    opts: Options,
}

fn load(common: &Common) -> Result<Inputs> {
    let observed = read_object(&common.observed, "observed")?;
    let desired = read_object(&common.desired, "desired")?;
    let mut rules = ListRules::new();
    if let RulesArg::Auto = common.rules {
        let api_version = desired
            .get("apiVersion")
            .or_else(|| observed.get("apiVersion"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = desired
            .get("kind")
            .or_else(|| observed.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        rules = ListRules::builtin(api_version, kind);
    }
    if let Some(crd_path) = &common.crd {
        let crd = read_object(crd_path, "CRD")?;
        let version = desired
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| av.rsplit_once('/').map(|(_, v)| v));
        let crd_rules = ListRules::from_crd(&crd, version)
            .with_context(|| format!("{}: reading list rules", crd_path.display()))?;
        rules = rules.merge(crd_rules);
    }
    let opts = Options {
        annotation: common.annotation.clone(),
        rules,
        ordering: match common.ordering {
            OrderingArg::Desired => Ordering::Desired,
            OrderingArg::Metacontroller => Ordering::Metacontroller,
        },
        record: true,
        fields: Vec::new(),
    };
    Ok(Inputs {
        observed,
        desired,
        opts,
    })
}

fn print_json(v: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v).context("writing to stdout")?;
    writeln!(out).context("writing to stdout")?;
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Merge {
            common,
            last_applied,
        } => {
            let inputs = load(&common)?;
            let last = match last_applied {
                Some(path) => Some(read_object(&path, "last-applied")?),
                None => get_last_applied(&inputs.observed, &inputs.opts)
                    .with_context(|| format!("{}", common.observed.display()))?,
            };
            let merged = merge_with(
                &inputs.observed,
                last.as_ref(),
                &inputs.desired,
                &inputs.opts,
            )?;
            print_json(&merged)
        }
        Command::Apply { common } => {
            let inputs = load(&common)?;
            let outcome = apply_update(&inputs.observed, &inputs.desired, &inputs.opts)
                .with_context(|| format!("{}", common.observed.display()))?;
            let (changed, object) = match outcome {
                Outcome::Unchanged => (false, inputs.observed),
                Outcome::Changed(v) => (true, v),
            };
            print_json(&serde_json::json!({"changed": changed, "object": object}))
        }
        Command::Diff {
            common,
            color,
            show_last_applied,
            context,
        } => {
            let inputs = load(&common)?;
            let use_color = match color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => {
                    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
                }
            };
            let text = render_diff(&common, &inputs, use_color, show_last_applied, context)?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .context("writing to stdout")?;
            Ok(())
        }
    }
}

/// 32-bit FNV-1a, for a short fingerprint of an elided annotation.
fn fingerprint(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Replaces the last-applied annotation's value with a one-line summary.
fn elide_annotation(obj: &mut Value, annotation: &str) {
    if let Some(Value::String(s)) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(|a| a.get_mut(annotation))
    {
        *s = format!(
            "<last-applied configuration: {} bytes, fingerprint {:08x}>",
            s.len(),
            fingerprint(s)
        );
    }
}

struct Style {
    on: bool,
}

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

fn object_label(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    let name = if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    };
    format!("{} {} {}", s("/apiVersion"), s("/kind"), name)
        .trim()
        .to_owned()
}

/// The `diff` subcommand's report: a header naming the inputs, the unified YAML diff of what an
/// update would write, and the paths kept only because other writers own them.
fn render_diff(
    common: &Common,
    inputs: &Inputs,
    color: bool,
    show_last_applied: bool,
    context: usize,
) -> Result<String> {
    let style = Style { on: color };
    let Inputs {
        observed,
        desired,
        opts,
    } = inputs;
    let last = get_last_applied(observed, opts)
        .with_context(|| format!("{}", common.observed.display()))?;
    let outcome = apply_update(observed, desired, opts)
        .with_context(|| format!("{}", common.observed.display()))?;
    let mut out = diff_header(common, inputs, last.is_some(), &style);
    let new = match outcome {
        Outcome::Unchanged => {
            out.push_str(
                "\nNo changes: the live object already matches desired; an update would send nothing.\n",
            );
            return Ok(out);
        }
        Outcome::Changed(v) => v,
    };
    let mut before = observed.clone();
    let mut after = new;
    if !show_last_applied {
        elide_annotation(&mut before, &opts.annotation);
        elide_annotation(&mut after, &opts.annotation);
    }
    out.push_str(&format!(
        "\nAn update would write this object ({} removed, {} added):\n\n",
        style.paint("31", "- lines"),
        style.paint("32", "+ lines"),
    ));
    out.push_str(&unified_diff(
        &to_yaml(&before)?,
        &to_yaml(&after)?,
        context,
        &style,
    ));
    out.push_str(&kept_section(inputs, last.as_ref())?);
    out.push_str("\nThis is a preview: nothing was written.\n");
    Ok(out)
}

/// The diff's first lines: the object and where live, desired and last-applied come from.
fn diff_header(common: &Common, inputs: &Inputs, has_last: bool, style: &Style) -> String {
    let mut out = String::new();
    out.push_str(&style.paint(
        "1",
        &format!("dynapply diff: {}", object_label(&inputs.desired)),
    ));
    out.push('\n');
    out.push_str(&format!(
        "  live object   {}\n  desired       {}\n  last-applied  {}\n",
        common.observed.display(),
        common.desired.display(),
        if has_last {
            format!(
                "from the live object's {} annotation",
                inputs.opts.annotation
            )
        } else {
            "none (the live object has no annotation: nothing will be removed)".to_owned()
        },
    ));
    out
}

/// A unified diff of two texts, `context` lines around each change, removals red and additions
/// green when `style` is on.
fn unified_diff(before: &str, after: &str, context: usize, style: &Style) -> String {
    let mut out = String::new();
    let diff = similar::TextDiff::from_lines(before, after);
    out.push_str(&style.paint("31", "--- live"));
    out.push('\n');
    out.push_str(&style.paint("32", "+++ after apply"));
    out.push('\n');
    let mut unified = diff.unified_diff();
    unified.context_radius(context);
    for hunk in unified.iter_hunks() {
        out.push_str(&style.paint("36", &format!("{}", hunk.header())));
        out.push('\n');
        for change in hunk.iter_changes() {
            let line = change.value().trim_end_matches('\n');
            match change.tag() {
                similar::ChangeTag::Delete => {
                    out.push_str(&style.paint("31", &format!("-{line}")));
                }
                similar::ChangeTag::Insert => {
                    out.push_str(&style.paint("32", &format!("+{line}")));
                }
                similar::ChangeTag::Equal => {
                    out.push(' ');
                    out.push_str(line);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The paths the merge keeps only because other writers own them (server-owned ones and our own
/// annotation left out); empty when there are none.
fn kept_section(inputs: &Inputs, last: Option<&Value>) -> Result<String> {
    let Inputs {
        observed,
        desired,
        opts,
    } = inputs;
    let kept: Vec<String> = kept_by_others(observed, last, desired, opts)?
        .into_iter()
        .filter(|p| !is_server_owned(p, &opts.annotation))
        .filter(|p| {
            !(p == "metadata.annotations" && only_our_annotation(observed, &opts.annotation))
        })
        .collect();
    let mut out = String::new();
    if !kept.is_empty() {
        out.push_str(
            "\nKept because neither desired nor the last-applied configuration mentions them\n(owned by other writers, e.g. an injected sidecar or server defaults):\n",
        );
        for path in &kept {
            out.push_str(&format!("  {path}\n"));
        }
    }
    Ok(out)
}

/// True when the live object's only annotation is the last-applied one (then the kept
/// `metadata.annotations` map is ours, not another writer's).
fn only_our_annotation(observed: &Value, annotation: &str) -> bool {
    observed
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.len() == 1 && a.contains_key(annotation))
}

/// Paths a hook author never owns: `status`, server-set metadata, and the annotation itself.
fn is_server_owned(path: &str, annotation: &str) -> bool {
    if path == "status" || path.starts_with("status.") || path.starts_with("status[") {
        return true;
    }
    if let Some(field) = path.strip_prefix("metadata.") {
        if SYSTEM_METADATA_FIELDS.contains(&field) {
            return true;
        }
        if field == format!("annotations[{}]", Value::String(annotation.to_owned())) {
            return true;
        }
    }
    false
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("dynapply: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
