//! One BFS batch's successors, computed on `jobs` threads: the op applications,
//! fingerprints and invariant checks (the costly, independent part of a step). The
//! search then folds them in frontier order, exactly as one thread would, so the
//! report is the same for any number of threads.

use std::sync::atomic::{AtomicUsize, Ordering};

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::Violation;
use kvsim_core::kv::hash::FastMap;

use super::fingerprint::{Encoder, Fingerprint};
use super::system::{Effects, Op, State, System};

/// Frontier states handed to the threads at once (bounds the successors held).
pub const BATCH: usize = 2048;

/// One op applied to one frontier state.
pub struct Succ {
    pub op: Op,
    pub fx: Effects,
    /// `None` when the op raised.
    pub fp: Option<Fingerprint>,
    /// The successor, kept when it was not seen before the batch (or, for a raised
    /// op, when a model error's counterexample is still wanted).
    /// Boxed: a `Succ` is moved twice, a state is large, and most are never kept.
    pub state: Option<Box<State>>,
    /// `check_model` of a kept successor.
    pub violations: Vec<Violation>,
}

/// A thread's scratch: the encoder, the action buffer, and the fresh fingerprints it
/// already kept (a state reached twice in one chunk is kept and checked once: the
/// search takes its first occurrence).
#[derive(Default)]
pub struct Scratch {
    enc: Encoder,
    actions: Vec<Op>,
    kept: FastMap<Fingerprint, ()>,
}

/// Apply `op` to a copy of `state`. Its successor is kept (and checked) unless
/// `seen` or this scratch already has it.
pub fn expand_op(
    sys: &System,
    seen: &FastMap<Fingerprint, u32>,
    want_error: bool,
    state: &State,
    op: Op,
    x: &mut Scratch,
) -> Succ {
    let mut s = state.clone();
    let fx = sys.apply(&mut s, op);
    if fx.error.is_some() {
        let violations = if want_error {
            check_model(&s.kv, &[])
        } else {
            Vec::new()
        };
        return Succ {
            op,
            fx,
            fp: None,
            state: want_error.then(|| Box::new(s)),
            violations,
        };
    }
    let fp = x.enc.fingerprint(&s);
    let fresh = !seen.contains_key(&fp) && x.kept.insert(fp, ()).is_none();
    Succ {
        op,
        fx,
        fp: Some(fp),
        violations: if fresh { check_model(&s.kv, &[]) } else { Vec::new() },
        state: fresh.then(|| Box::new(s)),
    }
}

impl Scratch {
    /// Forget the kept fingerprints (one thread, `seen` up to date: they are in it).
    pub fn forget(&mut self) {
        self.kept.clear();
    }
}

fn expand_one(
    sys: &System,
    seen: &FastMap<Fingerprint, u32>,
    want_error: bool,
    state: &State,
    x: &mut Scratch,
    out: &mut Vec<Succ>,
) -> u32 {
    let mut actions = std::mem::take(&mut x.actions);
    sys.actions(state, &mut actions);
    for &op in &actions {
        out.push(expand_op(sys, seen, want_error, state, op, x));
    }
    let n = actions.len() as u32;
    x.actions = actions;
    n
}

/// Frontier states a thread takes at a time: small, so that a thread that is
/// descheduled (a loaded machine) holds up little of the batch.
const CHUNK: usize = 64;

/// A batch's successors, flat in frontier order; `counts[i]` of them are state i's.
#[derive(Default)]
pub struct Expanded {
    pub succs: Vec<Succ>,
    pub counts: Vec<u32>,
}

/// The successors of each state of `batch`, in order.
pub fn expand(
    sys: &System,
    seen: &FastMap<Fingerprint, u32>,
    want_error: bool,
    batch: &[(u32, State)],
    jobs: usize,
) -> Expanded {
    let run = |part: &[(u32, State)]| {
        let mut scratch = Scratch::default();
        let mut out = Expanded::default();
        for (_, s) in part {
            let n = expand_one(sys, seen, want_error, s, &mut scratch, &mut out.succs);
            out.counts.push(n);
        }
        out
    };
    if batch.len() <= CHUNK {
        return run(batch);
    }
    let chunks: Vec<&[(u32, State)]> = batch.chunks(CHUNK).collect();
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Expanded)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.min(chunks.len()))
            .map(|_| {
                let (chunks, next) = (&chunks, &next);
                scope.spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(part) = chunks.get(i) else { break out };
                        out.push((i, run(part)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("an expansion thread panicked"))
            .collect()
    });
    // Back in frontier order, whichever thread took which chunk.
    done.sort_unstable_by_key(|(i, _)| *i);
    let mut all = Expanded::default();
    for (_, mut e) in done {
        all.succs.append(&mut e.succs);
        all.counts.append(&mut e.counts);
    }
    all
}
