//! The Rust half of the side-by-side comparison with Metacontroller's child-update path
//! (`benches/go/run.sh` runs both, alternating, on the same input files). Two examples share it:
//! `update_path` (the system allocator) and `update_path_mimalloc` (mimalloc, the allocator of
//! the `kmeta` binary).
//!
//! `update_path dump DIR` writes the workloads of `benches/support/workload.rs` as JSON:
//! `<C>x<E>.observed.json`, `.desired.json` (every env value changed) and `.last.json` (desired
//! == last-applied). `update_path time DIR ROUNDS MILLIS` reads them back and prints
//! `rust <size> <row> <ns per op>` per round and row; when `DIR/<size>.go-merged.json` exists it
//! first checks that Go produced the same object as `apply_update` (semantic equality).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::workload;
use dynapply::{
    Options, Outcome, apply_update, apply_update_recorded, apply_update_with, get_last_applied,
    is_recorded, json_eq, merge_with, recorded_last_applied,
};
use serde_json::Value;

fn size_name(c: usize, e: usize) -> String {
    format!("{c}x{e}")
}

fn dump(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (c, e) in workload::SIZES {
        let last = workload::desired(c, e, 0);
        let files = [
            ("observed", workload::observed(&last)),
            ("desired", workload::desired(c, e, 1)),
            ("last", last),
        ];
        for (what, v) in files {
            let path = dir.join(format!("{}.{what}.json", size_name(c, e)));
            std::fs::write(&path, serde_json::to_vec(&v)?)
                .with_context(|| path.display().to_string())?;
        }
    }
    Ok(())
}

fn load(dir: &Path, name: &str) -> anyhow::Result<Value> {
    let path = dir.join(name);
    let text = std::fs::read(&path).with_context(|| path.display().to_string())?;
    serde_json::from_slice(&text).with_context(|| path.display().to_string())
}

/// Whether the comma-separated list in the environment variable `var` holds `item` (true when
/// the variable is unset): `UPDATE_PATH_ROWS` and `UPDATE_PATH_SIZES` select what is timed,
/// e.g. to profile one row.
fn listed(var: &str, item: &str) -> bool {
    std::env::var(var).map_or(true, |list| list.split(',').any(|i| i == item))
}

/// Runs `f` for about `budget`; nanoseconds per call.
fn time_it(budget: Duration, mut f: impl FnMut()) -> f64 {
    let mut n: u64 = 1;
    loop {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        let took = start.elapsed();
        if took >= budget {
            return took.as_nanos() as f64 / n as f64;
        }
        n = if took < budget / 100 {
            n * 10
        } else {
            (n as f64 * budget.as_secs_f64() / took.as_secs_f64()) as u64 + 1
        };
    }
}

fn time(dir: &Path, rounds: usize, budget: Duration) -> anyhow::Result<()> {
    let opts = Options::default();
    for (c, e) in workload::SIZES {
        let size = size_name(c, e);
        if !listed("UPDATE_PATH_SIZES", &size) {
            continue;
        }
        let live = load(dir, &format!("{size}.observed.json"))?;
        let changed = load(dir, &format!("{size}.desired.json"))?;
        let same = load(dir, &format!("{size}.last.json"))?;
        let Outcome::Changed(merged) = apply_update(&live, &changed, &opts)? else {
            bail!("{size}: the changed desired object produced no update");
        };
        if apply_update(&live, &same, &opts)? != Outcome::Unchanged {
            bail!("{size}: the unchanged desired object produced an update");
        }
        let go = dir.join(format!("{size}.go-merged.json"));
        if go.exists() && !json_eq(&load(dir, &format!("{size}.go-merged.json"))?, &merged) {
            bail!("{size}: Go's update differs from apply_update's");
        }
        let last = get_last_applied(&live, &opts)?;
        // what kmeta keeps for a version it wrote: recorded when it wrote `same` (the workload's
        // observed object holds the annotation of exactly that write)
        let recorded = &recorded_last_applied(&same, &opts)?;
        if last.as_ref().is_none_or(|l| !json_eq(l, recorded)) {
            bail!("{size}: the observed annotation is not what writing the desired object records");
        }
        if apply_update_recorded(&live, recorded, &same, &opts)? != Outcome::Unchanged
            || apply_update_recorded(&live, recorded, &changed, &opts)? != Outcome::Changed(merged)
        {
            bail!("{size}: apply_update_recorded differs from apply_update");
        }
        // what kmeta keeps after a restart: the annotation parsed back (sorted keys), recognised
        // as its own encoding
        let Some(parsed) = last.as_ref().filter(|l| is_recorded(&live, l, &opts)) else {
            bail!("{size}: the observed annotation is not recognised as dynapply's encoding");
        };
        if apply_update_recorded(&live, parsed, &same, &opts)? != Outcome::Unchanged {
            bail!("{size}: apply_update_recorded on the parsed record differs from apply_update");
        }
        for _ in 0..rounds {
            let rows: [(&str, &mut dyn FnMut()); 8] = [
                ("update", &mut || {
                    black_box(apply_update(black_box(&live), black_box(&changed), &opts)).ok();
                }),
                ("update_noop", &mut || {
                    black_box(apply_update(black_box(&live), black_box(&same), &opts)).ok();
                }),
                // last-applied kept by the caller per object version (the controller's cache)
                ("update_cached", &mut || {
                    let r = apply_update_with(black_box(&live), last.as_ref(), &changed, &opts);
                    black_box(r).ok();
                }),
                ("update_noop_cached", &mut || {
                    let r = apply_update_with(black_box(&live), last.as_ref(), &same, &opts);
                    black_box(r).ok();
                }),
                // the same, known to be what kmeta recorded by writing this version
                ("update_recorded", &mut || {
                    let r = apply_update_recorded(black_box(&live), recorded, &changed, &opts);
                    black_box(r).ok();
                }),
                ("update_noop_recorded", &mut || {
                    let r = apply_update_recorded(black_box(&live), recorded, &same, &opts);
                    black_box(r).ok();
                }),
                // the same, parsed back from the annotation and recognised (after a restart)
                ("update_noop_parsed", &mut || {
                    let r = apply_update_recorded(black_box(&live), parsed, &same, &opts);
                    black_box(r).ok();
                }),
                ("merge", &mut || {
                    black_box(merge_with(black_box(&live), last.as_ref(), &changed, &opts)).ok();
                }),
            ];
            for (row, f) in rows {
                if !listed("UPDATE_PATH_ROWS", row) {
                    continue;
                }
                println!("rust {size} {row} {:.0}", time_it(budget, f));
            }
        }
    }
    Ok(())
}

/// The example's command line.
pub fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, dir] if cmd == "dump" => dump(Path::new(dir)),
        [cmd, dir, rounds, millis] if cmd == "time" => time(
            Path::new(dir),
            rounds.parse().context("ROUNDS")?,
            Duration::from_millis(millis.parse().context("MILLIS")?),
        ),
        _ => bail!("usage: update_path dump DIR | update_path time DIR ROUNDS MILLIS"),
    }
}
