//! One swarm case as a test assertion: plan and run it, and on failure shrink the failing
//! plan to a minimal one that fails the same way (what `kvsim check` does per case).

use std::fmt;

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::plan::Plan;

use crate::check::case::CaseSpec;
use crate::check::run::{run_case, CaseOutcome, Verdict};
use crate::check::shrink::{op_count, shrink};

/// A failing case: its verdict and, for a violation, the failing plan shrunk.
#[derive(Clone, Debug)]
pub struct CaseFailure {
    /// The scenario the case varied.
    pub scenario: String,
    /// Why it failed.
    pub verdict: Verdict,
    /// Ops of the plan that failed.
    pub original_ops: usize,
    /// The shrunk plan (a violation's): it fails with the same invariant, and `kvsim replay`
    /// (with `--mutant` for an engine mutant) reproduces it.
    pub shrunk: Option<Box<Plan>>,
}

impl fmt::Display for CaseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?}", self.scenario, self.verdict)?;
        if let Some(p) = &self.shrunk {
            write!(f, " ({} ops shrunk to {})", self.original_ops, op_count(p))?;
        }
        Ok(())
    }
}

impl std::error::Error for CaseFailure {}

/// The case `kvsim check` draws for `base` from `seed` (the same knobs for the same seed).
pub fn draw_case(base: &BuiltinScenario, seed: u64) -> CaseSpec {
    use rand::SeedableRng;
    CaseSpec::draw(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed), base)
}

/// Plans and runs case `spec` of `base` (a seed-bug `mutant` switched on, or none): `Ok` when
/// it passed or does not apply (`outcome.verdict` says which), else the failure with the
/// violating plan shrunk. Use it as a proptest property over
/// `kvsim_sim::strategies::case_spec()` (feature `proptest`):
///
/// ```
/// use kvsim_sim::api::{self, check_case, CaseSpec};
///
/// let base = api::builtin("gpt-oss-tp").unwrap();
/// let spec: CaseSpec = api::draw_case(&base, 1);
/// let outcome = check_case(&base, &spec, None)?;
/// assert!(!outcome.verdict.failed());
/// # Ok::<(), api::CaseFailure>(())
/// ```
pub fn check_case(base: &BuiltinScenario, spec: &CaseSpec, mutant: Option<Mutant>) -> Result<CaseOutcome, CaseFailure> {
    let out = run_case(base, spec, mutant);
    if !out.verdict.failed() {
        return Ok(out);
    }
    let original_ops = out.plan.as_ref().map_or(0, op_count);
    let shrunk = match (&out.verdict, &out.plan) {
        // A planner mutant's bug is in the plan, which fails without the mutant: shrink it
        // as a plain plan (an engine mutant's plan must fail with it and pass without).
        (Verdict::Violation { invariant, .. }, Some(plan)) => {
            let engine = mutant.filter(|m| m.in_engine());
            Some(Box::new(shrink(plan, engine, invariant)))
        }
        _ => None,
    };
    Err(CaseFailure {
        scenario: base.name.clone(),
        verdict: out.verdict,
        original_ops,
        shrunk,
    })
}
