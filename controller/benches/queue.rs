//! Work queue at scale: N keys over 100 namespaces added, then each handed out and marked done,
//! at 10 000 and 100 000 keys. Adding and handing out a key is O(log n), so the time per
//! operation should grow by about log(100 000)/log(10 000) = 1.25× between the two sizes (an
//! O(n) pick would grow 10×).
//!
//! `cargo bench -p kmeta --bench queue`. Prints figures; asserts nothing.

use std::time::{Duration, Instant};

use kmeta::Queue;

type Key = (String, String);

fn keys(n: usize) -> Vec<Key> {
    (0..n)
        .map(|i| (format!("ns-{}", i % 100), format!("parent-{i}")))
        .collect()
}

/// (ns per add, ns per next + done) for `n` keys, half of them delayed by up to 1 ms.
async fn run(n: usize) -> (f64, f64) {
    let q: Queue<Key> = Queue::default();
    let ks = keys(n);
    let start = Instant::now();
    for (i, k) in ks.iter().enumerate() {
        if i % 2 == 0 {
            q.add(k.clone());
        } else {
            q.add_after(k.clone(), Duration::from_micros((i % 1000) as u64));
        }
    }
    let add = start.elapsed().as_nanos() as f64 / n as f64;
    let start = Instant::now();
    for _ in 0..n {
        let Some((k, _)) = q.next_timed().await else {
            break;
        };
        q.done(&k);
    }
    let pick = start.elapsed().as_nanos() as f64 / n as f64;
    (add, pick)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("queue: keys over 100 namespaces; per-operation time");
    let mut per = Vec::new();
    for n in [10_000, 100_000] {
        let (add, pick) = run(n).await;
        println!("  {n:>7} keys: add {add:.0} ns/key, next+done {pick:.0} ns/key");
        per.push((add, pick));
    }
    let bound = (100_000f64).ln() / (10_000f64).ln();
    println!(
        "  growth 10 000 → 100 000: add {:.2}×, next+done {:.2}× (O(log n) bound {bound:.2}×, O(n) 10×)",
        per[1].0 / per[0].0,
        per[1].1 / per[0].1
    );
}
