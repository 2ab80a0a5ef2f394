//! Shrinking a failing plan to a minimal one that fails with the same invariant
//! (delta debugging over steps, then single ops; then dropping faults, the
//! benchmark record and recorded expectations). Every candidate is validated
//! and run; the result is a plan `kvsim replay` reproduces.

use kvsim_core::bugs::Mutant;
use kvsim_core::plan::{validate, Plan, PlanOp, Step};

use crate::exec::{run_plan_opts, Outcome, RunOptions};

/// Tries per shrink (each one a validation and a simulator run of a small plan).
const MAX_TRIES: usize = 20_000;

struct Judge<'a> {
    mutant: Option<Mutant>,
    invariant: &'a str,
    tries: usize,
}

impl Judge<'_> {
    /// The candidate still fails with the invariant.
    fn fails(&mut self, p: &Plan) -> bool {
        if self.tries >= MAX_TRIES {
            return false;
        }
        self.tries += 1;
        if validate(p).is_err() {
            return false;
        }
        let fails_with = |mutant| {
            let r = run_plan_opts(p, RunOptions::quiet(mutant), &mut |_, _| {});
            matches!(&r.outcome, Outcome::Violation(f) if f.invariant.as_deref() == Some(self.invariant))
        };
        // With an engine mutant the plan must also pass that check on the fixed
        // engine: the shrunk plan shows the engine's bug, not a bad plan.
        fails_with(self.mutant) && (self.mutant.is_none() || !fails_with(None))
    }
}

/// Ops in a plan.
pub fn op_count(p: &Plan) -> usize {
    p.steps.iter().map(|s| s.ops.len()).sum()
}

/// The classic ddmin over `items`: remove ever smaller chunks while `keep` holds.
fn ddmin<T: Clone>(mut items: Vec<T>, mut keep: impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut n = 2usize;
    while items.len() >= 2 {
        let chunk = items.len().div_ceil(n);
        let mut reduced = false;
        let mut start = 0;
        while start < items.len() {
            let end = (start + chunk).min(items.len());
            let candidate: Vec<T> = items[..start].iter().chain(&items[end..]).cloned().collect();
            if keep(&candidate) {
                items = candidate;
                reduced = true;
                n = (n - 1).max(2);
                break;
            }
            start = end;
        }
        if !reduced {
            if n >= items.len() {
                break;
            }
            n = (2 * n).min(items.len());
        }
    }
    if items.len() == 1 && keep(&[]) {
        items.clear();
    }
    items
}

fn with_steps(base: &Plan, steps: Vec<Step>) -> Plan {
    Plan { steps, ..base.clone() }
}

/// Rebuild steps from kept (step index, op index) units.
fn from_units(base: &Plan, units: &[(usize, usize)]) -> Plan {
    let mut steps: Vec<Step> = base
        .steps
        .iter()
        .map(|s| Step {
            step: s.step,
            rank: s.rank,
            ops: Vec::new(),
        })
        .collect();
    for &(si, oi) in units {
        steps[si].ops.push(base.steps[si].ops[oi].clone());
    }
    with_steps(base, steps)
}

/// Shrink `plan`, which fails with `invariant` (under `mutant` for engine mutants).
pub fn shrink(plan: &Plan, mutant: Option<Mutant>, invariant: &str) -> Plan {
    let mut j = Judge {
        mutant,
        invariant,
        tries: 0,
    };
    let mut best = plan.clone();
    // Recorded block tables pin every allocation to the exact pool history; without
    // them more ops can go.
    let mut loose = best.clone();
    for st in &mut loose.steps {
        for op in &mut st.ops {
            if let PlanOp::Schedule { expect, .. } = op {
                expect.tables = None;
            }
        }
    }
    if j.fails(&loose) {
        best = loose;
    }
    // Rounds until nothing more goes: a removal can unlock another.
    for _ in 0..4 {
        let before = op_count(&best);
        best = shrink_round(&mut j, best);
        if op_count(&best) == before {
            break;
        }
    }
    // Faults, then the benchmark record.
    let base = best.clone();
    let faults = ddmin(base.faults.clone(), |keep| {
        j.fails(&Plan {
            faults: keep.to_vec(),
            ..base.clone()
        })
    });
    best.faults = faults;
    if best.benchmark.is_some() {
        let bare = Plan {
            benchmark: None,
            ..best.clone()
        };
        if j.fails(&bare) {
            best = bare;
        }
    }
    best
}

/// One round: whole steps (all ranks' ops of one step number), single ops, empty steps.
fn shrink_round(j: &mut Judge<'_>, mut best: Plan) -> Plan {
    let numbers: Vec<u64> = {
        let mut v: Vec<u64> = best.steps.iter().map(|s| s.step).collect();
        v.dedup();
        v
    };
    let base = best.clone();
    let kept = ddmin(numbers, |keep| {
        let steps = base.steps.iter().filter(|s| keep.contains(&s.step)).cloned().collect();
        j.fails(&with_steps(&base, steps))
    });
    best = with_steps(
        &base,
        base.steps.iter().filter(|s| kept.contains(&s.step)).cloned().collect(),
    );
    let base = best.clone();
    let units: Vec<(usize, usize)> = base
        .steps
        .iter()
        .enumerate()
        .flat_map(|(si, s)| (0..s.ops.len()).map(move |oi| (si, oi)))
        .collect();
    let kept = ddmin(units, |keep| j.fails(&from_units(&base, keep)));
    best = from_units(&base, &kept);
    // Steps left empty go unless a fault needs its step to begin.
    let base = best.clone();
    let idx: Vec<usize> = (0..base.steps.len())
        .filter(|&i| base.steps[i].ops.is_empty())
        .collect();
    let drop = ddmin(idx.clone(), |keep| {
        let steps = (0..base.steps.len())
            .filter(|i| !idx.contains(i) || keep.contains(i))
            .map(|i| base.steps[i].clone())
            .collect();
        j.fails(&with_steps(&base, steps))
    });
    best = with_steps(
        &base,
        (0..base.steps.len())
            .filter(|i| !idx.contains(i) || drop.contains(i))
            .map(|i| base.steps[i].clone())
            .collect(),
    );
    best
}
