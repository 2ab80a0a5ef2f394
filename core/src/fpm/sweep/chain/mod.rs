//! Shared-prefix chains with shadows (dynamo_fpm.md §3; seed 001, FPM model II).
//!
//! Per batch rung B the planner builds B chains (real prefills of salted content,
//! stable per (rank, chain index), so a deeper generation hits the previous one in
//! the prefix cache and computes only the extension), parks them, and measures
//! every covered point of the rung on shadows that borrow the chains' full blocks
//! and own a private tail (§2.3, §3.5, §3.6). The planner drives one engine per
//! rank online: every op is applied as it is built, so the tail block ids it
//! records are the ones the pool hands out.
//!
//! Layout:
//! - [`ids`]: a chain's request id, salt and prompt;
//! - [`live`]: the planner's own engines, applied op by op;
//! - [`rungs`]: rung depths and which points they cover (§3.1);
//! - [`stage`]: a rung's chains built, parked and shed (§3.3, §3.4, §3.7);
//! - [`registration`]: the `register_shadow` op (§2.3, §3.6);
//! - [`shadow`]: one covered point measured on shadows (§3.5);
//! - [`fallback`]: the rest on synthetic KV (§3.1 reorder #2).

mod fallback;
mod ids;
mod live;
mod registration;
mod rungs;
mod shadow;
mod stage;

pub(super) use live::apply_checked;
pub use registration::{recurrent_shadow_range, shadow_registration, shadow_registration_with, shadow_tail_blocks};

use super::{SweepBuilder, SweepError};
use crate::bugs::BugMutant;
use crate::engine::Engine;
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::grid::{Grid, GridConfig};
use rungs::{decode_points, mark_covered, rung_depth, rung_depths, Point, RungSizing};
use stage::{build_stage, readmit, shed_chains, waiting_chains};

/// The whole chain sweep: covered points rung by rung (chains built, parked,
/// borrowed), then the uncovered ones on synthetic KV (§3.1 reorder #2).
pub(super) fn plan_chain_sweep(
    p: &mut SweepBuilder<'_>,
    grid: &Grid,
    cfg: &GridConfig,
    need: &LayoutNeed,
) -> Result<(), SweepError> {
    let s = p.s;
    let engines = (0..s.scenario.dp_ranks)
        .map(|r| Engine::new(&s.scenario, r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| SweepError(m.0))?;
    p.engines = Some(engines);
    let sizing = RungSizing::new(p, need);
    let mut points = decode_points(grid)?;
    let rungs = rung_depths(p, cfg, &sizing, &points);
    mark_covered(p, grid, cfg, &sizing, &rungs, &mut points);
    let demoted = measure_covered(p, &points, &rungs)?;
    p.drain_fence();
    fallback::measure_on_synthetic_kv(p, &points, &demoted, cfg, need)
}

/// §7.4 skip reason: a point whose stage failed after planning, under attention DP.
const STAGE_FAILED_UNDER_DP: &str = "stage_failed_under_attention_dp";

/// Reorder #2 (§3.1 step 6): the covered points first, in grid order, each rung's
/// points on one stage; fake injection would evict the chains' cached blocks. Chains are
/// shed before a fake-fallback point and at the end (§3.3, §3.7). Returns the
/// points that fell back after a local failure on a single rank (measured on
/// synthetic KV later).
fn measure_covered(p: &mut SweepBuilder<'_>, points: &[Point], rungs: &[(u64, u64)]) -> Result<Vec<u64>, SweepError> {
    let attention_dp = p.attention_dp();
    let mut stage: Option<(u64, u64)> = None; // (batch, generation)
    let mut generation = 0u64;
    // A rung the group verdict failed at stage close (§7.3).
    let mut failed_rung: Option<u64> = None;
    let mut demoted: Vec<u64> = Vec::new();
    for pt in points.iter().filter(|p| p.covered) {
        if p.stop_before_point() {
            break;
        }
        let b = pt.point.batch_size;
        if failed_rung == Some(b) {
            set_aside(p, attention_dp, pt, &mut demoted);
            continue;
        }
        if stage.map(|s| s.0) != Some(b) {
            if let Some((ob, g)) = stage.take() {
                shed_chains(p, g, ob as usize);
            }
            p.drain_fence();
            generation += 1;
            match build_stage(p, generation, b as usize, rung_depth(rungs, b), pt.point.benchmark_id) {
                Err(added) => {
                    // Abandoned at the soft deadline (§1.12, §8.2 bug 5): shed, stop.
                    if added {
                        let waiting = waiting_chains(p, generation, b as usize);
                        shed_chains(p, generation, b as usize);
                        if p.bug(BugMutant::ShedWithoutFinish) {
                            readmit(p, waiting);
                        }
                    }
                    break;
                }
                Ok(false) => {
                    // The group failed the stage: every rank sheds its fleet and the
                    // rung's points are skipped on every rank (§7.3 group_fallback, §7.4);
                    // a single rank measures them on synthetic KV later.
                    shed_chains(p, generation, b as usize);
                    failed_rung = Some(b);
                    set_aside(p, attention_dp, pt, &mut demoted);
                    continue;
                }
                Ok(true) => stage = Some((b, generation)),
            }
        }
        let (_, g) = stage.expect("a stage is active");
        if !shadow::plan_shadow_execution(p, pt, g)? {
            set_aside(p, attention_dp, pt, &mut demoted);
        }
    }
    if let Some((ob, g)) = stage.take() {
        shed_chains(p, g, ob as usize);
    }
    Ok(demoted)
}

/// A covered point its stage did not measure: skipped on every rank under
/// attention DP (§7.4), otherwise demoted to synthetic KV.
fn set_aside(p: &mut SweepBuilder<'_>, attention_dp: bool, pt: &Point, demoted: &mut Vec<u64>) {
    if attention_dp {
        p.skip_point(pt.point.benchmark_id, STAGE_FAILED_UNDER_DP);
    } else {
        demoted.push(pt.point.benchmark_id);
    }
}
