//! Bounded exhaustive exploration of the block pool (issue #6, part 4;
//! `spec/exhaustive.md`): for a tiny pool, every interleaving of the op alphabet
//! over up to three requests, up to a depth bound, with the model invariants
//! (`check_model`: KV-REF, KV-FREEQ, KV-CACHE, KV-CONSERVE, KV-NULL) checked on
//! every reachable state.
//!
//! The search is breadth-first over states deduplicated by a canonical
//! fingerprint, so it is exhaustive over reachable states rather than exponential
//! in depth, and the first violation it meets has a shortest op sequence. That
//! sequence comes back as a complete kvtrace/1 file (`kvsim trace FILE` replays
//! it; `replay_checked` replays it on a mutated model).

mod bounds;
mod expand;
mod fingerprint;
mod system;
mod trace;

use std::collections::BTreeMap;

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::Violation;
use kvsim_core::kv::hash::FastMap;
use kvsim_core::kv::ModelMutant;
use serde_json::{json, Value};

pub use bounds::{Bounds, BoundsError, Layout, MAX_REQUESTS, MAX_USABLE_BLOCKS};
pub use fingerprint::Fingerprint;
pub use system::{Event, Op, REQUEST_NAMES};
pub use trace::{replay_checked, Replayed};

use fingerprint::Encoder;
use system::{State, System};

/// A shortest op sequence ending in a violation or a model exception.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The ops.
    pub ops: Vec<Op>,
    /// The same sequence as a complete kvtrace/1 file.
    pub trace: Value,
    /// `check_model` after the last op (empty when only an exception was raised).
    pub violations: Vec<Violation>,
    /// The exception kind the last op raised, if any.
    pub error: Option<String>,
}

/// What the exhaustive search found.
#[derive(Clone, Debug, Default)]
pub struct ExhaustiveReport {
    /// Distinct states visited, the initial one included.
    pub states: u64,
    /// Op applications (transitions explored, into new or already visited states).
    pub ops: u64,
    /// Distinct op sequences of 1..=`depth` ops that the visited states cover
    /// (saturating). Each was not run on its own: dedup shares their suffixes.
    pub sequences: u128,
    /// Every sequence of up to `depth` ops was explored (`max_ops`, unless the
    /// search stopped at a violation).
    pub depth: usize,
    /// The reachable state space closed within `max_ops`: every interleaving of
    /// any length is covered.
    pub exhausted: bool,
    /// The widest BFS level (states held at once).
    pub max_frontier: usize,
    /// Transitions that raised a model exception (vLLM's replay would stop there).
    pub model_errors: u64,
    /// The first model error, if any.
    pub first_model_error: Option<Counterexample>,
    /// The shortest op sequence reaching each event that was reached.
    pub reached: BTreeMap<Event, Vec<Op>>,
    /// The first (shortest) sequence ending in a state that breaks an invariant.
    pub first_violation: Option<Counterexample>,
}

/// A successor edge to a transition that raised (a replay stops there).
const RAISED: u32 = u32::MAX;

/// BFS bookkeeping: per state its parent and the op from it, per expanded state
/// its successors (for counting sequences).
struct Search<'a> {
    bounds: &'a Bounds,
    sys: System,
    enc: Encoder,
    /// Threads that expand a batch of the frontier.
    jobs: usize,
    seen: FastMap<Fingerprint, u32>,
    /// The events `report.reached` does not have yet.
    unreached: u16,
    parent: Vec<(u32, Option<Op>)>,
    succ: Vec<u32>,
    succ_start: Vec<usize>,
    report: ExhaustiveReport,
}

/// Explore every op sequence of up to `bounds.max_ops` ops on a (possibly
/// mutated) model, breadth-first, stopping at the first invariant violation.
pub fn explore(bounds: &Bounds, mutant: Option<ModelMutant>) -> Result<ExhaustiveReport, BoundsError> {
    explore_jobs(bounds, mutant, 1, &mut |_, _| {})
}

/// `explore` on `jobs` threads: the same report for any number. `progress(levels
/// done, max_ops)` is called after each BFS level.
pub fn explore_jobs(
    bounds: &Bounds,
    mutant: Option<ModelMutant>,
    jobs: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExhaustiveReport, BoundsError> {
    let problems = bounds.problems();
    if !problems.is_empty() {
        return Err(BoundsError(problems));
    }
    let sys = bounds.system(mutant);
    let mut search = Search {
        bounds,
        enc: Encoder::new(&sys),
        sys,
        jobs: jobs.max(1),
        seen: FastMap::default(),
        unreached: system::ALL_EVENTS,
        parent: Vec::new(),
        succ: Vec::new(),
        succ_start: Vec::new(),
        report: ExhaustiveReport::default(),
    };
    search.run(progress);
    search.report.states = search.parent.len() as u64;
    search.count_sequences();
    Ok(search.report)
}

impl Search<'_> {
    fn run(&mut self, progress: &mut dyn FnMut(u64, u64)) {
        let root = self.sys.init();
        self.seen.insert(self.enc.fingerprint(&root), 0);
        self.parent.push((RAISED, None));
        let violations = check_model(&root.kv, &[]);
        if !violations.is_empty() {
            self.report.first_violation = Some(self.counterexample(0, None, violations, None));
            return;
        }
        let mut frontier: Vec<(u32, Box<State>)> = vec![(0, Box::new(root))];
        for depth in 0..self.bounds.max_ops {
            self.report.max_frontier = self.report.max_frontier.max(frontier.len());
            // States first reached at the depth bound are checked, never expanded.
            let keep = depth + 1 < self.bounds.max_ops;
            let mut next = Vec::new();
            // Each frontier state is dropped once expanded, so this level's states and the
            // next level's are not all held at once (they are most of the search's memory,
            // and fresh memory costs page faults).
            let mut states = std::mem::take(&mut frontier).into_iter();
            if self.jobs <= 1 {
                // One thread: each successor folded as soon as it is made (no batch held).
                let (mut scratch, mut actions) = (expand::Scratch::new(&self.sys), Vec::new());
                for (id, state) in states {
                    self.succ_start.push(self.succ.len());
                    self.sys.actions(&state, &mut actions);
                    for &op in &actions {
                        let level = self.level(keep);
                        let x = expand::expand_op(level, &state, op, &mut scratch, expand::Claim::Local);
                        if !self.step(id, x, keep.then_some(&mut next)) {
                            self.report.depth = depth;
                            return;
                        }
                    }
                    // Its storage holds the next level's states (none kept at the bound).
                    if keep {
                        scratch.recycle(state);
                    }
                }
            } else {
                loop {
                    let batch: Vec<(u32, Box<State>)> = states.by_ref().take(expand::BATCH).collect();
                    if batch.is_empty() {
                        break;
                    }
                    let chunks = expand::expand(self.level(keep), &batch, self.jobs);
                    let counts: Vec<u32> = chunks.iter().flat_map(|e| e.counts.iter().copied()).collect();
                    let mut succs = chunks.into_iter().flat_map(|e| e.succs);
                    for ((id, _), n) in batch.iter().zip(counts) {
                        self.succ_start.push(self.succ.len());
                        for x in succs.by_ref().take(n as usize) {
                            if !self.step(*id, x, keep.then_some(&mut next)) {
                                self.report.depth = depth;
                                return;
                            }
                        }
                    }
                }
            }
            progress(depth as u64 + 1, self.bounds.max_ops as u64);
            if keep && next.is_empty() {
                self.report.exhausted = true;
                break;
            }
            frontier = next;
        }
        self.report.depth = self.bounds.max_ops;
    }

    /// What expanding a state of this level reads now.
    fn level(&self, keep: bool) -> expand::Level<'_> {
        expand::Level {
            sys: &self.sys,
            seen: &self.seen,
            want_error: self.report.first_model_error.is_none(),
            keep,
            want: self.unreached,
        }
    }

    /// Take one successor of state `id` (applied by `expand`), keeping a new state in
    /// `next` if given; false once a violation is found.
    fn step(&mut self, id: u32, x: expand::Succ, next: Option<&mut Vec<(u32, Box<State>)>>) -> bool {
        let op = x.op;
        self.report.ops += 1;
        if x.fx.any() {
            for e in x.fx.events() {
                if !self.report.reached.contains_key(&e) {
                    let mut path = self.path(id);
                    path.push(op);
                    self.report.reached.insert(e, path);
                    self.unreached &= !e.bit();
                }
            }
        }
        let f = match x.dest {
            expand::Dest::Reached(f) => f,
            // The state itself: seen, its id is `id`.
            expand::Dest::Unchanged => {
                self.succ.push(id);
                return true;
            }
            expand::Dest::Raised => {
                self.report.model_errors += 1;
                self.succ.push(RAISED);
                if self.report.first_model_error.is_none() {
                    self.report.first_model_error = Some(self.counterexample(id, Some(op), x.violations, x.fx.error));
                }
                return true;
            }
        };
        if let Some(&known) = self.seen.get(&f) {
            self.succ.push(known);
            return true;
        }
        // Not seen now, so not seen before the batch either: `expand` checked it (and
        // kept it, unless it is at the depth bound).
        if !x.violations.is_empty() {
            self.report.first_violation = Some(self.counterexample(id, Some(op), x.violations, None));
            return false;
        }
        let new = u32::try_from(self.parent.len()).expect("fewer than 2^32 states");
        self.seen.insert(f, new);
        self.parent.push((id, Some(op)));
        self.succ.push(new);
        if let Some(next) = next {
            next.push((new, x.state.expect("a new successor to expand is kept")));
        }
        true
    }

    /// The ops from the initial state to state `id`.
    fn path(&self, mut id: u32) -> Vec<Op> {
        let mut ops = Vec::new();
        while let (parent, Some(op)) = self.parent[id as usize] {
            ops.push(op);
            id = parent;
        }
        ops.reverse();
        ops
    }

    fn counterexample(
        &self,
        id: u32,
        last: Option<Op>,
        violations: Vec<Violation>,
        error: Option<String>,
    ) -> Counterexample {
        let mut ops = self.path(id);
        ops.extend(last);
        let found = match (violations.first(), &error) {
            (Some(v), _) => v.to_string(),
            (None, Some(e)) => format!("model exception {e}"),
            (None, None) => String::new(),
        };
        let meta = json!({
            "source": "kvsim exhaustive (spec/exhaustive.md)",
            "mutant": self.sys.mutant.map(ModelMutant::name),
            "found": found,
            "alphabet_ops": ops.iter().map(Op::to_string).collect::<Vec<_>>(),
        });
        Counterexample {
            trace: trace::to_kvtrace(&self.sys, &ops, meta),
            ops,
            violations,
            error,
        }
    }

    /// Count the op sequences of 1..=`depth` ops: paths from the initial state over
    /// the recorded successor edges (every state on such a path was expanded).
    fn count_sequences(&mut self) {
        let n = self.parent.len();
        let mut count = vec![0u128; n];
        count[0] = 1;
        let mut total = 0u128;
        for _ in 0..self.report.depth {
            let mut next = vec![0u128; n];
            for (s, &c) in count.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let end = self.succ_start.get(s + 1).copied().unwrap_or(self.succ.len());
                for &t in &self.succ[self.succ_start[s]..end] {
                    total = total.saturating_add(c);
                    if t != RAISED {
                        next[t as usize] = next[t as usize].saturating_add(c);
                    }
                }
            }
            count = next;
        }
        self.report.sequences = total;
    }
}
