//! Merge and apply_update cost on a pod-template custom resource, side by side with one
//! `serde_json::Value::clone` of the observed object (the floor any merge that returns a new
//! object pays), and `merge_into` on an object the caller owns (clone in criterion's setup,
//! untimed) and with the clone paid (`clone_merge_into`).
//!
//! Workload: C containers x E env vars, each container with one port, one volumeMount
//! and three args; observed = last-applied + status + server fields (+ the annotation); desired
//! changes every env value. C x E in {1x5, 5x20, 20x50}, plus the no-op case (desired ==
//! last-applied). Run: `cargo bench -p dynapply --bench merge`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dynapply::{
    Options, Outcome, apply_update, apply_update_with, get_last_applied, merge_into, merge_with,
};

#[path = "support/workload.rs"]
mod workload;

use workload::{SIZES, desired, observed};

// one function lists every row of the README's table side by side, so it reads as that table
#[allow(clippy::too_many_lines)]
fn bench(c: &mut Criterion) {
    let opts = Options::default();
    for (cs, es) in SIZES {
        let last = desired(cs, es, 0);
        let live = observed(&last);
        let changed = desired(cs, es, 1);
        let last_parsed = get_last_applied(&live, &opts)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no annotation"));
        // sanity: the workload does what it says
        assert!(matches!(
            apply_update(&live, &changed, &opts),
            Ok(Outcome::Changed(_))
        ));
        assert!(matches!(
            apply_update(&live, &last, &opts),
            Ok(Outcome::Unchanged)
        ));

        let mut group = c.benchmark_group(format!("{cs}x{es}"));
        group.bench_function("clone_observed", |b| b.iter(|| black_box(&live).clone()));
        group.bench_function("merge", |b| {
            b.iter(|| {
                merge_with(
                    black_box(&live),
                    Some(&last_parsed),
                    black_box(&changed),
                    &opts,
                )
            })
        });
        // In place on a copy the caller already owns: the clone is made in criterion's setup
        // and the merged object is dropped outside the timing. "owned": the copy was just made
        // (in cache, timed one by one); "owned_cold": one of a batch of copies made beforehand
        // (mostly out of cache, like an object that has sat in a watch cache).
        group.bench_function("merge_into_owned", |b| {
            b.iter_batched(
                || live.clone(),
                |mut obj| {
                    let r = merge_into(&mut obj, Some(&last_parsed), black_box(&changed), &opts);
                    (obj, r)
                },
                BatchSize::PerIteration,
            )
        });
        group.bench_function("merge_into_owned_cold", |b| {
            b.iter_batched(
                || live.clone(),
                |mut obj| {
                    let r = merge_into(&mut obj, Some(&last_parsed), black_box(&changed), &opts);
                    (obj, r)
                },
                BatchSize::SmallInput,
            )
        });
        // The same, paying for the clone (and, like every `iter` row, the drop).
        group.bench_function("clone_merge_into", |b| {
            b.iter(|| {
                let mut obj = black_box(&live).clone();
                let r = merge_into(&mut obj, Some(&last_parsed), black_box(&changed), &opts);
                (obj, r)
            })
        });
        group.bench_function("apply_update", |b| {
            b.iter(|| apply_update(black_box(&live), black_box(&changed), &opts))
        });
        // last-applied supplied pre-parsed, as the controller's cache keeps it per child version
        group.bench_function("apply_update_cached", |b| {
            b.iter(|| {
                apply_update_with(
                    black_box(&live),
                    Some(&last_parsed),
                    black_box(&changed),
                    &opts,
                )
            })
        });
        group.bench_function("merge_noop", |b| {
            b.iter(|| {
                merge_with(
                    black_box(&live),
                    Some(&last_parsed),
                    black_box(&last),
                    &opts,
                )
            })
        });
        group.bench_function("merge_into_owned_noop", |b| {
            b.iter_batched(
                || live.clone(),
                |mut obj| {
                    let r = merge_into(&mut obj, Some(&last_parsed), black_box(&last), &opts);
                    (obj, r)
                },
                BatchSize::PerIteration,
            )
        });
        group.bench_function("apply_update_noop", |b| {
            b.iter(|| apply_update(black_box(&live), black_box(&last), &opts))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
