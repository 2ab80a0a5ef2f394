//! Shrinking a failing real-planner case. The planner is a black box, so the
//! shrinker simplifies the scenario, not the plan: it tries each simpler
//! variant of the case's knobs (features off, fewer requests, shorter
//! contexts, …), re-records the planner, and keeps the first variant that
//! still fails the same way, until none does or the tries run out.

use kvsim_core::fpm::scenarios::BuiltinScenario;

use super::case::RealCase;
use super::pool::Slot;
use super::run::{run_real_case, CaseEnv, RealOutcome};
use crate::dynamo::RecordError;

/// Recordings one shrink may make.
pub const MAX_TRIES: usize = 48;

/// A shrunk finding.
pub struct Shrunk {
    /// The smallest case.
    pub case: RealCase,
    /// Its outcome.
    pub outcome: RealOutcome,
    /// Recordings tried.
    pub tries: usize,
}

/// Shrink `case` (which failed with `first`). With `control` (the unpatched
/// planner, for a mutant hunt), a variant counts only if it still kills
/// (`RealVerdict::kills`: the control passes it or fails it later): the
/// shrunk case shows the patch, not a bug 1.6.1 has.
pub fn shrink_case(
    slot: &mut Slot,
    base: &BuiltinScenario,
    case: RealCase,
    first: RealOutcome,
    env: &CaseEnv,
    control: Option<&CaseEnv>,
) -> Result<Shrunk, RecordError> {
    let key = first.verdict.key();
    let mut best = Shrunk {
        case,
        outcome: first,
        tries: 0,
    };
    let mut improved = true;
    while improved && best.tries < MAX_TRIES {
        improved = false;
        for cand in best.case.simpler() {
            if best.tries >= MAX_TRIES {
                break;
            }
            best.tries += 1;
            let out = slot.run(|w| {
                run_real_case(w, base, &cand, env).map(|o| {
                    let lost = o.worker_lost;
                    (o, lost)
                })
            })?;
            if out.verdict.key() != key {
                continue;
            }
            if let Some(ctl) = control {
                best.tries += 1;
                let c = slot.run(|w| {
                    run_real_case(w, base, &cand, ctl).map(|o| {
                        let lost = o.worker_lost;
                        (o, lost)
                    })
                })?;
                if !out.verdict.kills(c.verdict.fail_step()) {
                    continue;
                }
            }
            best.case = cand;
            best.outcome = out;
            improved = true;
            break;
        }
    }
    Ok(best)
}
