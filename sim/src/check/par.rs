//! Work spread over threads with results in input order: `kvsim check`'s output
//! must not depend on how many threads ran it, nor on which finished first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// `f` over `items` on `jobs` threads; the results in `items`' order.
/// `progress(done, total)` is called on the calling thread after each item.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
    progress: &mut dyn FnMut(u64, u64),
) -> Vec<R> {
    let total = items.len() as u64;
    let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            let (tx, next, f) = (tx.clone(), &next, &f);
            scope.spawn(move || loop {
                // Items are taken one at a time: cases vary a lot in cost.
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if tx.send((i, f(item))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (done, (i, r)) in rx.iter().enumerate() {
            out[i] = Some(r);
            progress(done as u64 + 1, total);
        }
    });
    out.into_iter().map(|r| r.expect("every item ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_input_order_for_any_thread_count() {
        let items: Vec<u64> = (0..200).collect();
        let slow_first = |x: &u64| {
            if *x < 4 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            x * x
        };
        let one = par_map(&items, 1, slow_first, &mut |_, _| {});
        let mut calls = 0;
        let four = par_map(&items, 4, slow_first, &mut |d, t| {
            calls += 1;
            assert!(d <= t);
        });
        assert_eq!(one, four);
        assert_eq!(one[7], 49);
        assert_eq!(calls, 200);
    }
}
