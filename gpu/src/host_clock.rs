//! The host clock the GPU side lowers with: a plan's host-only ops inside a timed window become
//! `HostWork` as long as the simulator's engine took to apply them. The lowering itself (in
//! `kvsim_core::device`) reads no clock; this is where wall time enters, next to the executor
//! that spends it.

use kvsim_core::device::{lower_plan::lower_plan_timed, HostClock, LowerError, LowerOptions, LoweredPlan};
use kvsim_core::plan::Plan;
use std::time::Instant;

/// Wall-clock time of each host-only op.
pub struct WallClock(Option<Instant>);

impl HostClock for WallClock {
    fn start(&mut self) {
        self.0 = Some(Instant::now());
    }
    fn elapsed_ns(&mut self) -> u64 {
        self.0.map_or(0, |t| t.elapsed().as_nanos() as u64)
    }
}

/// Lowers `plan` for a device run: `HostWork` measured on this machine's clock.
pub fn lower_plan_measured(plan: &Plan, opts: &LowerOptions) -> Result<LoweredPlan, LowerError> {
    lower_plan_timed(plan, opts, &mut WallClock(None))
}
