//! One BFS batch's successors, computed on `jobs` threads: the op applications,
//! fingerprints and invariant checks (the costly, independent part of a step). The
//! search then folds them in frontier order, exactly as one thread would, so the
//! report is the same for any number of threads.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::Violation;
use kvsim_core::kv::hash::FastMap;

use super::fingerprint::{Encoder, Fingerprint};
use super::system::{Buffers, Effects, Op, State, System};

/// Frontier states handed to the threads at once (bounds the successors held).
pub const BATCH: usize = 2048;

/// Where an op led.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// It raised a model exception.
    Raised,
    /// Back to the state it was applied to (`System::unchanged`; not applied).
    Unchanged,
    /// To the state of this fingerprint.
    Reached(Fingerprint),
}

/// One op applied to one frontier state.
pub struct Succ {
    pub op: Op,
    pub fx: Effects,
    pub dest: Dest,
    /// The successor, kept when it was not seen before the batch and will be expanded
    /// (not at the depth bound). Boxed: a `Succ` is moved twice, a state is large, and
    /// most are never kept.
    pub state: Option<Box<State>>,
    /// `check_model` of a kept successor.
    pub violations: Vec<Violation>,
}

/// A thread's scratch: the encoder, the action and allocation buffers, the state each op is applied to
/// (copied over from the frontier state with `clone_from`, which reuses its storage), and
/// expanded frontier states to reuse the same way.
pub struct Scratch {
    enc: Encoder,
    actions: Vec<Op>,
    buf: Buffers,
    state: Option<Box<State>>,
    /// Boxed like the frontier's states: keeping a successor swaps boxes, not states.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<State>>,
}

impl Scratch {
    pub fn new(sys: &System) -> Self {
        Scratch {
            enc: Encoder::new(sys),
            actions: Vec::new(),
            buf: Buffers::default(),
            state: None,
            spare: Vec::new(),
        }
    }

    /// Keep an expanded state's storage: a kept successor is the scratch state itself,
    /// and a spare becomes the next scratch, so keeping one copies and allocates nothing.
    pub fn recycle(&mut self, state: Box<State>) {
        self.spare.push(state);
    }

    /// The scratch state (the successor just made) to keep; a spare replaces it.
    fn keep(&mut self) -> Box<State> {
        let next = self.spare.pop();
        std::mem::replace(&mut self.state, next).expect("a successor was just made")
    }
}

/// What every expansion within one BFS level reads.
#[derive(Clone, Copy)]
pub struct Level<'a> {
    pub sys: &'a System,
    /// The states folded so far.
    pub seen: &'a FastMap<Fingerprint, u32>,
    /// A raised op's successor is still checked (no model error recorded yet).
    pub want_error: bool,
    /// New successors will be expanded (this is not the depth bound's level).
    pub keep: bool,
    /// The events to look for (those not reached yet).
    pub want: u16,
}

/// Who checks (and keeps) a successor that `seen` does not have yet. The search takes a
/// state's first occurrence in frontier order; both ways make that occurrence's `Succ`
/// carry the state and its check, so the kept states are the ones one thread keeps.
#[derive(Clone, Copy)]
pub enum Claim<'a> {
    /// One thread, folding each successor as it is made: `seen` is up to date, so a
    /// successor it does not have is the first occurrence.
    Local,
    /// Threads sharing a batch: `owners` maps a fingerprint to the earliest place in the
    /// batch that checked it so far, and an earlier place (`at`) takes it over. The
    /// earliest occurrence always checks; a later one checks only if it came first in time.
    Shared {
        owners: &'a Mutex<FastMap<Fingerprint, u64>>,
        at: u64,
    },
}

impl Claim<'_> {
    fn take(self, fp: Fingerprint) -> bool {
        match self {
            Claim::Local => true,
            Claim::Shared { owners, at } => {
                match owners.lock().expect("no thread panics holding the owners").entry(fp) {
                    Entry::Vacant(e) => {
                        e.insert(at);
                        true
                    }
                    Entry::Occupied(mut e) if at < *e.get() => {
                        e.insert(at);
                        true
                    }
                    Entry::Occupied(_) => false,
                }
            }
        }
    }
}

/// Apply `op` to a copy of `state`. Its successor is checked unless `seen` has it or
/// `claim` gives it to another occurrence, and then kept if `level.keep`.
pub fn expand_op(level: Level<'_>, state: &State, op: Op, x: &mut Scratch, claim: Claim<'_>) -> Succ {
    let Level {
        sys,
        seen,
        want_error,
        keep,
        want,
    } = level;
    if let Some(fx) = sys.unchanged(state, op, want) {
        #[cfg(debug_assertions)]
        check_unchanged(sys, state, (op, want), &fx, &mut x.enc);
        return Succ {
            op,
            fx,
            dest: Dest::Unchanged,
            state: None,
            violations: Vec::new(),
        };
    }
    let s: &mut State = match &mut x.state {
        Some(s) => {
            s.as_mut().clone_from(state);
            s
        }
        none => none.insert(Box::new(state.clone())),
    };
    let fx = sys.apply_with(s, op, &mut x.buf, want);
    if fx.error.is_some() {
        let violations = if want_error {
            check_model(&s.kv, &[])
        } else {
            Vec::new()
        };
        return Succ {
            op,
            fx,
            dest: Dest::Raised,
            state: None,
            violations,
        };
    }
    let fp = x.enc.fingerprint(s);
    let fresh = !seen.contains_key(&fp) && claim.take(fp);
    Succ {
        op,
        fx,
        dest: Dest::Reached(fp),
        violations: if fresh { check_model(&s.kv, &[]) } else { Vec::new() },
        state: (fresh && keep).then(|| x.keep()),
    }
}

/// Debug builds apply what `System::unchanged` skipped: the same effects, the same state.
#[cfg(debug_assertions)]
fn check_unchanged(sys: &System, state: &State, (op, want): (Op, u16), fx: &Effects, enc: &mut Encoder) {
    let mut s = state.clone();
    assert_eq!(sys.apply_with(&mut s, op, &mut Buffers::default(), want), *fx, "{op}");
    assert_eq!(enc.fingerprint(&s), enc.fingerprint(state), "{op}");
}

/// The successors of `state`, the `index`-th state of its batch.
fn expand_one(
    level: Level<'_>,
    owners: &Mutex<FastMap<Fingerprint, u64>>,
    (index, state): (usize, &State),
    x: &mut Scratch,
    out: &mut Vec<Succ>,
) -> u32 {
    let mut actions = std::mem::take(&mut x.actions);
    level.sys.actions(state, &mut actions);
    for (j, &op) in actions.iter().enumerate() {
        let claim = Claim::Shared {
            owners,
            at: (index as u64) << 32 | j as u64,
        };
        out.push(expand_op(level, state, op, x, claim));
    }
    let n = actions.len() as u32;
    x.actions = actions;
    n
}

/// Frontier states a thread takes at a time: small, so that a thread that is
/// descheduled (a loaded machine) holds up little of the batch.
const CHUNK: usize = 64;

/// A chunk's successors, flat in frontier order; `counts[i]` of them are state i's.
#[derive(Default)]
pub struct Expanded {
    pub succs: Vec<Succ>,
    pub counts: Vec<u32>,
}

/// The successors of each state of `batch`, made on `jobs` threads: one `Expanded` per
/// chunk of `CHUNK` states, in frontier order.
pub fn expand(level: Level<'_>, batch: &[(u32, Box<State>)], jobs: usize) -> Vec<Expanded> {
    let owners = Mutex::new(FastMap::default());
    let chunks: Vec<&[(u32, Box<State>)]> = batch.chunks(CHUNK).collect();
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Expanded)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.min(chunks.len()))
            .map(|_| {
                let (chunks, next, owners) = (&chunks, &next, &owners);
                scope.spawn(move || {
                    let mut scratch = Scratch::new(level.sys);
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(part) = chunks.get(i) else { break out };
                        let mut e = Expanded {
                            succs: Vec::with_capacity(16 * part.len()),
                            counts: Vec::with_capacity(part.len()),
                        };
                        for (k, (_, s)) in part.iter().enumerate() {
                            let at = (i * CHUNK + k, &**s);
                            let n = expand_one(level, owners, at, &mut scratch, &mut e.succs);
                            e.counts.push(n);
                        }
                        out.push((i, e));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("an expansion thread panicked"))
            .collect()
    });
    // Back in frontier order, whichever thread took which chunk; the chunks' lists
    // are read in turn, not copied into one.
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use super::super::Bounds;
    use super::*;

    /// The state after taking, at each step, the `pick`-th enabled op (cyclically).
    fn walk(sys: &System, picks: &[usize]) -> State {
        let mut s = sys.init();
        let mut actions = Vec::new();
        for &pick in picks {
            sys.actions(&s, &mut actions);
            let op = actions[pick % actions.len()];
            let _ = sys.apply(&mut s, op);
        }
        s
    }

    /// Where `System::unchanged` answers, applying the op leaves every field as it was
    /// and has the effects it says.
    #[test]
    fn ops_said_to_change_nothing_change_nothing() {
        let walks: [&[usize]; 6] = [
            &[],
            &[0, 1, 2, 3],
            &[0, 1, 2, 0],
            &[5, 0, 7, 1, 1, 2],
            &[0, 0, 0, 0, 9, 4, 4],
            &[3, 8, 2, 6, 0, 1, 5, 7],
        ];
        let mut answered = 0;
        for bounds in [Bounds::default(), Bounds::hybrid()] {
            let sys = bounds.system(None);
            for picks in walks {
                let s = walk(&sys, picks);
                let mut actions = Vec::new();
                sys.actions(&s, &mut actions);
                for &op in &actions {
                    let Some(fx) = sys.unchanged(&s, op, super::super::system::ALL_EVENTS) else {
                        continue;
                    };
                    answered += 1;
                    let mut t = s.clone();
                    assert_eq!(sys.apply(&mut t, op), fx, "{op} after {picks:?}");
                    assert_eq!(format!("{t:?}"), format!("{s:?}"), "{op} after {picks:?}");
                }
            }
        }
        assert!(answered >= 6, "{answered}");
    }

    /// `clone_from` over any other state (its storage reused) is a clone: every field
    /// equal (the `Debug` text shows them all, maps in their layout order), and the two
    /// go on alike under every enabled op.
    #[test]
    fn a_state_copied_over_another_is_a_clone() {
        let walks: [&[usize]; 5] = [
            &[],
            &[0, 1, 2, 3],
            &[5, 0, 7, 1, 1, 2],
            &[0, 0, 0, 0, 9, 4, 4],
            &[3, 8, 2, 6, 0, 1, 5, 7],
        ];
        for bounds in [Bounds::default(), Bounds::hybrid()] {
            let sys = bounds.system(None);
            for from in walks {
                for over in walks {
                    let source = walk(&sys, from);
                    let mut copy = walk(&sys, over);
                    copy.clone_from(&source);
                    assert_eq!(
                        format!("{copy:?}"),
                        format!("{:?}", source.clone()),
                        "{from:?} over {over:?}"
                    );
                    let mut actions = Vec::new();
                    sys.actions(&source, &mut actions);
                    for &op in &actions {
                        let (mut a, mut b) = (source.clone(), copy.clone());
                        let (fa, fb) = (sys.apply(&mut a, op), sys.apply(&mut b, op));
                        assert_eq!(fa.error, fb.error);
                        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{op} after {from:?} over {over:?}");
                    }
                }
            }
        }
    }
}
