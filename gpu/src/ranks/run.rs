//! Every rank on its own thread and executor (rank `r` on device `r mod devices`), stepping in
//! lock-step through a [`RankClock`] after each step's device work.

use super::exchange::{Exchange, ExchangeError, HostExchange};
use super::lockstep::{ExchangeMismatch, RankClock, StepRecord};
use crate::device::{device_count, DeviceInfo};
use crate::error::GpuError;
use crate::executor::{ExecOptions, ExecReport, ExecutorOptions, GpuExecutor, StepSync};
use kvsim_core::device::ranks::RankProgram;
use std::time::Duration;

/// Which exchange carries the per-step round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Threads of this process (any number of devices).
    Host,
    /// NCCL, one device per rank (not in this build: [`super::nccl`]).
    Nccl,
}

/// How the ranks run.
#[derive(Clone, Debug)]
pub struct RanksOptions {
    /// Devices to use (0..devices); rank `r` runs on device `r % devices`.
    pub devices: usize,
    /// The exchange.
    pub exchange: ExchangeKind,
    /// Per rank: its delay before every step's exchange (the lagging channel), ns.
    pub lag_ns: Vec<u64>,
    /// Untimed runs first.
    pub warmup: u32,
    /// Timed runs.
    pub repeat: u32,
    /// Every rank's run options.
    pub exec: ExecOptions,
    /// Every rank's executor options.
    pub executor: ExecutorOptions,
    /// How long a round waits for the other ranks before the run fails.
    pub timeout: Duration,
}

/// What one rank did.
#[derive(Clone, Debug)]
pub struct RankRun {
    /// The rank.
    pub rank: u32,
    /// The device it ran on.
    pub device: usize,
    /// That device.
    pub info: DeviceInfo,
    /// Every timed run's report (the rank's own program: local groups and ops).
    pub reports: Vec<ExecReport>,
    /// Every timed run's per-step lock-step records.
    pub records: Vec<Vec<StepRecord>>,
    /// Steps whose gathered messages differed from the simulator's (any run).
    pub mismatches: Vec<ExchangeMismatch>,
}

/// Why `--devices N` cannot run here: `Some` names the problem (exit 2 material).
pub fn check_devices(devices: usize, ranks: usize) -> Result<(), GpuError> {
    if devices == 0 {
        return Err(GpuError::Ranks("--devices must be at least 1".into()));
    }
    if devices > ranks {
        return Err(GpuError::Ranks(format!(
            "--devices {devices} but the plan has {ranks} ranks (one rank per device at most)"
        )));
    }
    let present = device_count()?;
    if devices > present {
        return Err(GpuError::Ranks(format!(
            "--devices {devices} but this machine has {present} CUDA devices"
        )));
    }
    Ok(())
}

/// The exchange ends, one per rank.
fn exchange_group(o: &RanksOptions, ranks: usize) -> Result<Vec<Box<dyn Exchange>>, GpuError> {
    match o.exchange {
        ExchangeKind::Host => Ok(HostExchange::group(ranks, o.timeout)
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn Exchange>)
            .collect()),
        ExchangeKind::Nccl => Ok(super::nccl::nccl_group(ranks, o.devices)?),
    }
}

/// A [`RankClock`] as the executor's step hook.
struct ClockSync<'c, 'a>(&'c mut RankClock<'a>);

impl StepSync for ClockSync<'_, '_> {
    fn start(&mut self) -> Result<(), GpuError> {
        Ok(self.0.start()?)
    }
    fn after_step(&mut self, step: usize) -> Result<(), GpuError> {
        Ok(self.0.step(step)?)
    }
}

/// Runs every rank of `parts` (from `split_ranks`), warm-up and timed runs in lock-step.
/// The first error of any rank is returned (the others are aborted, never left waiting).
pub fn run_ranks(parts: &[RankProgram], o: &RanksOptions) -> Result<Vec<RankRun>, GpuError> {
    check_devices(o.devices, parts.len())?;
    let ends = exchange_group(o, parts.len())?;
    let results: Vec<Result<RankRun, GpuError>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .zip(ends)
            .map(|(p, mut ex)| {
                s.spawn(move || {
                    let r = run_rank(p, ex.as_mut(), o);
                    if r.is_err() {
                        ex.abort();
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(GpuError::Ranks("a rank's thread panicked".into())))
            })
            .collect()
    });
    // A rank that failed first explains the others' `Aborted`.
    let first_real = results
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, GpuError::Exchange(ExchangeError::Aborted))));
    if let Some(i) = first_real {
        return Err(results.into_iter().nth(i).and_then(Result::err).expect("an error"));
    }
    results.into_iter().collect()
}

fn run_rank(p: &RankProgram, ex: &mut dyn Exchange, o: &RanksOptions) -> Result<RankRun, GpuError> {
    let device = p.rank as usize % o.devices.max(1);
    let mut exec = GpuExecutor::on_device(device, p.lowered.program.layout.clone(), &o.executor)?;
    let steps = p.lowered.program.steps.len();
    let lag = o.lag_ns.get(p.rank as usize).copied().unwrap_or(0);
    let mut clock = RankClock::new(ex, &p.lowered.exchange, vec![lag; steps]);
    let (mut reports, mut records) = (Vec::new(), Vec::new());
    for run in 0..o.warmup + o.repeat {
        let report = exec.execute_synced(&p.lowered.program, &o.exec, Some(&mut ClockSync(&mut clock)))?;
        if run >= o.warmup {
            reports.push(report);
            records.push(std::mem::take(&mut clock.records));
        }
    }
    Ok(RankRun {
        rank: p.rank,
        device,
        info: exec.info().clone(),
        reports,
        records,
        mismatches: std::mem::take(&mut clock.mismatches),
    })
}
