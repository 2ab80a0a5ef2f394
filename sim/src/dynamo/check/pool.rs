//! Cases over a pool of harness workers: `jobs` threads, each with its own
//! worker (kept for the next run), take case indices in order; results land by index, so the report
//! does not depend on which worker ran which case or when it finished.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::dynamo::{RecordError, Worker};

/// A worker kept between calls, started on first use and replaced after it is lost.
#[derive(Default)]
pub struct Slot(Option<Worker>);

impl Slot {
    /// Run `f` on this slot's worker; `f` says whether the worker was lost.
    pub fn run<T>(&mut self, f: impl FnOnce(&mut Worker) -> Result<(T, bool), RecordError>) -> Result<T, RecordError> {
        if self.0.is_none() {
            self.0 = Some(Worker::start()?);
        }
        let (out, lost) = f(self.0.as_mut().expect("started"))?;
        if lost {
            self.0 = None;
        }
        Ok(out)
    }
}

/// One case on a worker: its result, and whether the worker was lost.
pub type CaseFn<'a, I, T> = dyn Fn(&mut Worker, &I) -> Result<(T, bool), RecordError> + Sync + 'a;

/// `jobs` worker slots, kept across runs (a worker imports vLLM once).
pub struct Pool {
    /// The workers' slots.
    pub slots: Vec<Slot>,
}

impl Pool {
    /// A pool of `jobs` workers.
    pub fn new(jobs: usize) -> Pool {
        Pool {
            slots: (0..jobs.max(1)).map(|_| Slot::default()).collect(),
        }
    }
}

/// Run `f` over `items` on the pool's workers; `progress(done)` after each.
pub fn run_all<I: Sync, T: Send>(
    pool: &mut Pool,
    items: &[I],
    f: &CaseFn<'_, I, T>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<T>, RecordError> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let fatal: Mutex<Option<RecordError>> = Mutex::new(None);
    let busy = pool.slots.len().min(items.len().max(1));
    std::thread::scope(|scope| {
        for slot in pool.slots.iter_mut().take(busy) {
            let (next, done, results, fatal) = (&next, &done, &results, &fatal);
            scope.spawn(move || loop {
                if fatal.lock().expect("lock").is_some() {
                    return;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= items.len() {
                    return;
                }
                match slot.run(|w| f(w, &items[i])) {
                    Ok(out) => results.lock().expect("lock")[i] = Some(out),
                    Err(e) => {
                        fatal.lock().expect("lock").get_or_insert(e);
                        return;
                    }
                }
                progress(done.fetch_add(1, Ordering::SeqCst) + 1);
            });
        }
    });
    if let Some(e) = fatal.into_inner().expect("lock") {
        return Err(e);
    }
    Ok(results
        .into_inner()
        .expect("lock")
        .into_iter()
        .map(|r| r.expect("every case ran"))
        .collect())
}
