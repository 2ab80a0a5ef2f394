//! `kvsim replay PLAN --out FILE`: run a recorded plan on a backend and write
//! the result; `--trace` and `--perfetto` write the op trace and a timeline.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kvsim_core::fpm::sweep::load_plan_checked;

use super::{read_file, say, CliError};
use kvsim_sim::exec::{perfetto_json, run_plan_opts, Outcome, RunOptions};
use kvsim_sim::output::write_atomic;
use kvsim_sim::sweep::{artifacts_for, rank_path};

/// What synthetic ("fake") KV holds on the GPU.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SyntheticKvArg {
    /// As if prefilled from the request's own tokens (the default).
    Tokens,
    /// Zeros, as a benchmark's synthetic injection leaves them.
    Zero,
}

/// What the GPU's MoE layer routes on.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MoeInputArg {
    /// Token ids (the default): routing ignores K/V content.
    Token,
    /// The attention output (hidden state): routing follows K/V content.
    Hidden,
}

/// What carries the per-step exchange between ranks (`--devices`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExchangeArg {
    /// Threads of this process: a shared buffer, a barrier (any number of devices).
    Host,
    /// NCCL, one device per rank (not in this build: a typed error).
    Nccl,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Backend {
    Sim,
    /// CUDA device 0 (kvsim-gpu): real paged KV, every read verified, every step timed.
    Gpu,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The plan (kvsim-plan/1 JSON).
    pub plan: PathBuf,
    /// Where to write the result JSON (sim: optional, the outcome is printed anyway).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Switch on a mutant of the engine (`kvsim mutants`), as `kvsim check --mutant` did.
    #[arg(long)]
    pub mutant: Option<String>,
    /// The executor.
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: Backend,
    /// Scan the whole KV model after every op instead of what the op changed (sim; slower,
    /// the same verdict).
    #[arg(long)]
    pub paranoid: bool,
    /// Also write the JSON-lines op trace here.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Also write a Perfetto / Chrome trace here.
    #[arg(long)]
    pub perfetto: Option<PathBuf>,
    /// For a sweep plan: write the rank artifacts (rank r > 0 to `<stem>_dp<r>.<ext>`),
    /// byte-identical to what `kvsim sweep` wrote.
    #[arg(long)]
    pub artifact_out: Option<PathBuf>,
    /// GPU: what synthetic KV (`fake_compute`) holds on the device.
    #[arg(long, value_enum)]
    pub synthetic_kv: Option<SyntheticKvArg>,
    /// GPU: what the MoE layer routes on.
    #[arg(long, value_enum)]
    pub moe_input: Option<MoeInputArg>,
    /// GPU: untimed runs of the whole program before the timed ones.
    #[arg(long)]
    pub warmup: Option<u32>,
    /// GPU: timed runs; every reported time is the median over them.
    #[arg(long)]
    pub repeat: Option<u32>,
    /// GPU: also time every launching op (its own events; costs host time per op).
    #[arg(long)]
    pub time_ops: bool,
    /// GPU: the fixed counterpart of a plan the simulator flags (the same sweep planned
    /// without the bug): both run, and the result reports the measured difference at the
    /// finding's point (the bug's timing symptom).
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// GPU: run every attention-DP rank on its own thread and executor, rank r on device
    /// r mod N, in lock-step over an exchange (issue 23); N = 1 puts every rank on device 0.
    #[arg(long)]
    pub devices: Option<usize>,
    /// GPU with --devices: what carries the per-step exchange.
    #[arg(long, value_enum)]
    pub exchange: Option<ExchangeArg>,
    /// GPU with --devices: the lagging rank's delay per step of the plan's `message_lag` (µs).
    #[arg(long)]
    pub lag_step_us: Option<f64>,
}

impl ReplayArgs {
    /// The GPU replay options these flags give.
    pub fn gpu_options(&self) -> super::replay_gpu::GpuReplayOptions {
        let mut o = super::replay_gpu::GpuReplayOptions::default();
        o.lowering.synthetic_kv = match self.synthetic_kv {
            Some(SyntheticKvArg::Zero) => kvsim_gpu::SyntheticKv::Zero,
            _ => kvsim_gpu::SyntheticKv::Tokens,
        };
        o.lowering.moe_input = match self.moe_input {
            Some(MoeInputArg::Hidden) => kvsim_gpu::MoeInput::Hidden,
            _ => kvsim_gpu::MoeInput::Token,
        };
        o.warmup = self.warmup.unwrap_or(0);
        o.repeat = self.repeat.unwrap_or(1);
        o.time_ops = self.time_ops;
        o.ranks = self.devices.map(|devices| super::replay_ranks::RanksReplay {
            devices,
            exchange: match self.exchange {
                Some(ExchangeArg::Nccl) => kvsim_gpu::ranks::ExchangeKind::Nccl,
                _ => kvsim_gpu::ranks::ExchangeKind::Host,
            },
            lag_step_us: self.lag_step_us.unwrap_or(super::replay_ranks::DEFAULT_LAG_STEP_US),
        });
        o
    }

    fn gpu_flags_given(&self) -> bool {
        self.synthetic_kv.is_some()
            || self.moe_input.is_some()
            || self.warmup.is_some()
            || self.repeat.is_some()
            || self.time_ops
            || self.against.is_some()
            || self.devices.is_some()
            || self.exchange.is_some()
            || self.lag_step_us.is_some()
    }
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic(path, bytes).map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

pub fn run(a: ReplayArgs) -> Result<ExitCode, CliError> {
    let text = read_file(&a.plan)?;
    let plan = load_plan_checked(&text).map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    let mutant = match &a.mutant {
        Some(m) => Some(m.parse::<kvsim_core::bugs::Mutant>().map_err(CliError::Input)?),
        None => None,
    };
    let report = match a.backend {
        Backend::Sim if a.gpu_flags_given() => {
            return Err(CliError::Input(
                "--synthetic-kv, --moe-input, --warmup, --repeat, --time-ops, --against, --devices, --exchange and --lag-step-us are for the gpu backend"
                    .into(),
            ))
        }
        Backend::Sim => {
            let mut bar = super::progress::Progress::new("replay", "ops");
            run_plan_opts(
                &plan,
                RunOptions {
                    mutant,
                    paranoid: a.paranoid,
                    ..RunOptions::default()
                },
                &mut |done, total| bar.update(done, total),
            )
        }
        Backend::Gpu => {
            if a.trace.is_some() || a.perfetto.is_some() || mutant.is_some() || a.paranoid {
                return Err(CliError::Input(
                    "--trace, --perfetto, --mutant and --paranoid are for the sim backend".into(),
                ));
            }
            if a.devices.is_none() && (a.exchange.is_some() || a.lag_step_us.is_some()) {
                return Err(CliError::Input("--exchange and --lag-step-us go with --devices".into()));
            }
            let out = a
                .out
                .as_ref()
                .ok_or_else(|| CliError::Input("--backend gpu needs --out".into()))?;
            let fixed = match &a.against {
                Some(p) => {
                    let text = read_file(p)?;
                    Some(load_plan_checked(&text).map_err(|e| CliError::Input(format!("{}: {e}", p.display())))?)
                }
                None => None,
            };
            return super::replay_gpu::run(&plan, out, &a.gpu_options(), fixed.as_ref());
        }
    };
    if let Some(out) = &a.out {
        let mut result = serde_json::to_string_pretty(&report.to_json()).expect("results serialize");
        result.push('\n');
        write(out, result.as_bytes())?;
    }
    if let Some(p) = &a.trace {
        write(p, report.trace_jsonl().as_bytes())?;
    }
    if let Some(p) = &a.perfetto {
        write(
            p,
            serde_json::to_string(&perfetto_json(&report))
                .expect("serializes")
                .as_bytes(),
        )?;
    }
    if let Some(p) = &a.artifact_out {
        if plan.benchmark.is_none() {
            return Err(CliError::Input(format!(
                "{} is not a sweep plan: it has no benchmark record",
                a.plan.display()
            )));
        }
        for (rank, art) in artifacts_for(&plan, &report).unwrap_or_default().iter().enumerate() {
            let mut text = serde_json::to_string_pretty(art).expect("artifacts serialize");
            text.push('\n');
            write(&rank_path(p, rank as u32), text.as_bytes())?;
        }
    }
    match &report.outcome {
        Outcome::Passed => {
            say(format_args!(
                "passed: {} steps, {} ops, plan {}",
                report.steps, report.ops, report.plan_hash
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Violation(f) | Outcome::Mismatch(f) => {
            let what = f.invariant.as_deref().unwrap_or("PLAN-MISMATCH");
            say(format_args!("FAILED {what} at {}: {}", f.location(), f.detail))?;
            Ok(ExitCode::from(1))
        }
    }
}
