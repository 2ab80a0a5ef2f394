//! Sweep cost against pool size (issue 20): the same grid (a `minimax-m27-ep` layout with
//! a scheduler small enough that every point fits the smallest pool) swept on pools of 3k,
//! 30k, 218k and 1M blocks, then every built-in sweep as shipped. Cost must follow the work
//! (steps and ops), not the pool. Run: `cargo bench -p kvsim-sim --bench sweep_scale`.
//! Wall times are the median of `REPEATS` runs; ratios are against the 3k pool, measured in
//! this run.

use std::time::Instant;

use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenarios::{builtin_scenarios, BuiltinScenario};
use kvsim_sim::sweep::run_sweep;

const REPEATS: usize = 5;
const POOLS: [u32; 4] = [3_000, 30_000, 218_000, 1_000_000];

/// Median wall seconds of a sweep, with its (steps, ops).
fn time_sweep(s: &BuiltinScenario, strategy: Option<Strategy>) -> (f64, u64, u64) {
    let mut secs = Vec::new();
    let mut work = (0, 0);
    for _ in 0..REPEATS {
        let t = Instant::now();
        let run = run_sweep(s, strategy).expect("the bench's sweeps plan");
        secs.push(t.elapsed().as_secs_f64());
        assert!(run.report.passed(), "{}: {:?}", s.name, run.report.outcome);
        work = (run.report.steps, run.report.ops);
    }
    secs.sort_by(f64::total_cmp);
    (secs[REPEATS / 2], work.0, work.1)
}

fn main() {
    let base = builtin_scenarios()
        .into_iter()
        .find(|s| s.name == "minimax-m27-ep")
        .expect("a built-in");
    println!("same grid, growing pool (minimax-m27-ep layout, 16 seqs x 2048 tokens, chain and synthetic):");
    println!(
        "{:>10} {:>10} {:>7} {:>7} {:>9} {:>8}",
        "pool", "strategy", "steps", "ops", "wall ms", "vs 3k"
    );
    for strategy in [Strategy::Chain, Strategy::Synthetic] {
        let mut first = None;
        for pool in POOLS {
            let mut s = base.clone();
            s.scenario.pool_blocks = pool;
            s.scenario.scheduler.max_num_seqs = 16;
            s.scenario.scheduler.max_model_len = 2048;
            s.scenario.scheduler.max_num_batched_tokens = 2048;
            let (secs, steps, ops) = time_sweep(&s, Some(strategy));
            let (t0, w0) = *first.get_or_insert((secs, (steps, ops)));
            assert_eq!((steps, ops), w0, "pool {pool}: the grid's work changed with the pool");
            println!(
                "{pool:>10} {:>10} {steps:>7} {ops:>7} {:>9.1} {:>7.2}x",
                planner::for_strategy(strategy).name(),
                secs * 1e3,
                secs / t0
            );
        }
    }
    println!("\nbuilt-in sweeps as shipped:");
    println!(
        "{:>16} {:>10} {:>7} {:>7} {:>9}",
        "scenario", "strategy", "steps", "ops", "wall ms"
    );
    let mut slowest: (f64, String) = (0.0, String::new());
    for s in builtin_scenarios() {
        for p in planner::PLANNERS {
            if planner::plan(Some(p), &s, &Default::default()).is_err() {
                continue;
            }
            let (secs, steps, ops) = time_sweep(&s, Some(p.strategy()));
            println!(
                "{:>16} {:>10} {steps:>7} {ops:>7} {:>9.1}",
                s.name,
                p.name(),
                secs * 1e3
            );
            if secs > slowest.0 {
                slowest = (secs, format!("{} {}", s.name, p.name()));
            }
        }
    }
    println!("slowest built-in sweep: {} at {:.2} s", slowest.1, slowest.0);
}
