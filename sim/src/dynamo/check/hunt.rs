//! `kvsim check --planner dynamo --mutant`: hunt each seed bug re-introduced
//! into a copy of the real planner. A case kills the mutant when the patched
//! planner fails it before the unpatched one does, if that fails at all (the
//! case shows the patch, not a bug 1.6.1 already has: `RealVerdict::kills`);
//! the kill is shrunk with that same rule and written as a minimal scenario
//! plus one command.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::pool::{run_all, Pool};
use super::run::{CaseEnv, RealOutcome};
use super::shrink::shrink_case;
use super::swarm::{record_index, write_repro, RealCheckConfig, Repro};
use crate::dynamo::mutants::{patched_copy, RealMutant, Witness};
use crate::dynamo::RecordError;
use crate::dynamo::{audit_error, RecordOptions};
use kvsim_core::fpm::scenarios::BuiltinScenario;

/// One real-planner mutant's row.
#[derive(Clone, Debug, Serialize)]
pub struct MutantRow {
    /// The mutant.
    pub mutant: String,
    /// Its §8.2 bug.
    pub bug: u32,
    /// What it breaks.
    pub summary: String,
    /// Whether a case caught it.
    pub killed: bool,
    /// The verdict key of the kill (an invariant, or `DY-RAISED <exception>`).
    pub verdict: Option<String>,
    /// The mutant file's expectation, for comparison.
    pub expect: Option<String>,
    /// Cases drawn until the kill (the budget when it survived).
    pub cases: u64,
    /// `swarm` (a drawn case, shrunk over its knobs) or `witness` (the swarm's
    /// budget ran out; the mutant file's hand-made witness scenario killed it).
    pub found_by: Option<&'static str>,
    /// The smallest reproduction.
    pub minimal: Option<Repro>,
    /// Wall-clock seconds (text output only).
    #[serde(skip)]
    pub seconds: f64,
}

/// The unpatched planner's first failure step per case index (None: it
/// passed; shared by every hunt).
pub type Control = BTreeMap<u64, Option<u64>>;

fn keys(
    pool: &mut Pool,
    cfg: &RealCheckConfig,
    env: &CaseEnv,
    indices: &[u64],
) -> Result<Vec<(String, Option<RealOutcome>)>, RecordError> {
    let c = RealCheckConfig {
        env: env.clone(),
        ..cfg.clone()
    };
    run_all(
        pool,
        indices,
        &|w, &i| {
            let (r, lost) = record_index(&c, w, i)?;
            let failed = r.outcome.verdict.failed();
            Ok(((r.outcome.verdict.key(), failed.then_some(r.outcome)), lost))
        },
        &|_| {},
    )
}

/// Hunt one mutant over the case indices of `cfg`, in batches of a few cases
/// per job; the lowest killing index wins, so the result does not depend on `jobs`.
pub fn hunt_real(
    cfg: &RealCheckConfig,
    m: &RealMutant,
    control: &mut Control,
    pool: &mut Pool,
    scratch: &std::path::Path,
) -> Result<MutantRow, RecordError> {
    let started = Instant::now();
    let source = patched_copy(m, scratch).map_err(RecordError::Io)?;
    let env = CaseEnv {
        planner_source: Some(source),
        probe_source: cfg.env.probe_source.clone(),
        wall: cfg.env.wall,
    };
    let indices = cfg.indices();
    let batch = (cfg.jobs * 3).max(1);
    let mut row = MutantRow {
        mutant: m.name.clone(),
        bug: m.bug,
        summary: m.summary.clone(),
        killed: false,
        verdict: None,
        expect: m.expect.clone(),
        cases: indices.len() as u64,
        found_by: None,
        minimal: None,
        seconds: 0.0,
    };
    for chunk in indices.chunks(batch) {
        let got = keys(pool, cfg, &env, chunk)?;
        let candidates: Vec<usize> = (0..chunk.len()).filter(|&k| got[k].1.is_some()).collect();
        // The unpatched planner on the failing cases not yet known.
        let unknown: Vec<u64> = candidates
            .iter()
            .map(|&k| chunk[k])
            .filter(|i| !control.contains_key(i))
            .collect();
        for (i, (_, out)) in unknown.iter().zip(keys(pool, cfg, &cfg.env, &unknown)?) {
            control.insert(*i, out.and_then(|o| o.verdict.fail_step()));
        }
        // A kill is a case the patched planner fails before the unpatched one
        // does, if it does at all: the patch, nothing else (`RealVerdict::kills`).
        let kills = |k: usize| got[k].1.as_ref().is_some_and(|o| o.verdict.kills(control[&chunk[k]]));
        let Some(k) = candidates.into_iter().find(|&k| kills(k)) else {
            continue;
        };
        let index = chunk[k];
        let (key, outcome) = got.into_iter().nth(k).expect("index in chunk");
        let outcome = outcome.expect("a failing outcome");
        let case = outcome.case.clone().unwrap_or_else(|| cfg.case(index));
        let shrunk = shrink_case(&mut pool.slots[0], cfg.base(index), case, outcome, &env, Some(&cfg.env))?;
        let flagged = RealCheckConfig {
            planner_flag: Some(format!("--mutant {}", m.name)),
            env: env.clone(),
            ..cfg.clone()
        };
        row.killed = true;
        row.found_by = Some("swarm");
        row.verdict = Some(key);
        row.cases = indices.iter().position(|&i| i == index).map_or(0, |p| p as u64 + 1);
        row.minimal = write_repro(&flagged, &m.name, shrunk.case, shrunk.outcome, shrunk.tries)?;
        break;
    }
    if !row.killed {
        witness_kill(cfg, m, &env, pool, &mut row)?;
    }
    row.seconds = started.elapsed().as_secs_f64();
    Ok(row)
}

/// The witness options as recording options and `kvsim dynamo run` flags.
fn witness_options(w: &Witness, wall: std::time::Duration) -> (RecordOptions, Vec<String>) {
    let num = |k: &str| w.other.get(k).and_then(|v| v.as_u64());
    let pair = |k: &str| {
        let v = w.other.get(k)?;
        match (v.get("step"), v.get("by")) {
            (Some(a), Some(b)) => Some((a.as_u64()?, b.as_u64()?)),
            _ => v
                .as_str()?
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
        }
    };
    let shrink = w
        .other
        .get("shrink_pool")
        .and_then(|v| crate::dynamo::parse_shrink(v.as_str()?).ok());
    let o = RecordOptions {
        warmup: w.warmup,
        live_state: w.live_state,
        clock_scale: w.clock_scale.unwrap_or(1.0),
        max_steps: num("max_steps").unwrap_or(20_000),
        defer_block_free: w
            .other
            .get("defer_block_free")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        abort_chains: num("abort_chains"),
        delay_outputs: pair("delay_outputs"),
        // "STEP:RANK:BLOCKS[:STEPS]", as the `--shrink-pool` flag.
        shrink_pool: shrink.map(|(a, b, c, _)| (a, b, c)),
        shrink_steps: shrink.and_then(|s| s.3),
        // "STEP:AFTER", as the `--fail-registration` flag.
        fail_registration: pair("fail_registration").and_then(|(a, b)| Some((a, u32::try_from(b).ok()?))),
        timeout: wall,
        ..RecordOptions::default()
    };
    let mut f: Vec<String> = w
        .timeout_seconds
        .map(|t| format!("--timeout-seconds {t}"))
        .into_iter()
        .collect();
    f.extend(o.run_flags());
    (o, f)
}

/// The swarm did not kill `m`: does its witness (patched fails, unpatched passes)?
fn witness_kill(
    cfg: &RealCheckConfig,
    m: &RealMutant,
    env: &CaseEnv,
    pool: &mut Pool,
    row: &mut MutantRow,
) -> Result<(), RecordError> {
    let Some(w) = &m.witness else { return Ok(()) };
    let Some(file) = &w.scenario_file else { return Ok(()) };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let Ok(mut s) = serde_json::from_str::<BuiltinScenario>(&text) else {
        return Ok(());
    };
    if let Some(t) = w.timeout_seconds {
        s.bench.timeout_seconds = t;
    }
    let (mut o, flags) = witness_options(w, cfg.env.wall);
    let verdict = |pool: &mut Pool, src: Option<std::path::PathBuf>, o: &mut RecordOptions| {
        o.planner_source = src;
        pool.slots[0].run(|wk| {
            Ok((
                match wk.record(&s, o) {
                    Ok(rec) => verdict_of(&rec),
                    Err(_) => None,
                },
                false,
            ))
        })
    };
    let patched = verdict(pool, env.planner_source.clone(), &mut o)?;
    let Some(key) = patched else { return Ok(()) };
    if verdict(pool, cfg.env.planner_source.clone(), &mut o)?.is_some() {
        return Ok(()); // the unpatched planner fails the witness too: no kill
    }
    row.killed = true;
    row.found_by = Some("witness");
    row.verdict = Some(key);
    row.minimal = Some(Repro {
        knobs: None,
        verdict: None,
        tries: 0,
        scenario_file: file.clone(),
        plan_file: String::new(),
        command: format!(
            "kvsim dynamo run --scenario-file {file} {} --mutant {} --plan-out /tmp/{}.plan.json",
            flags.join(" "),
            m.name,
            m.name
        ),
    });
    Ok(())
}

/// The failure key of a recording (replay, then artifact audit), or None if it passes.
fn verdict_of(rec: &crate::dynamo::Recording) -> Option<String> {
    let r = crate::exec::run_plan(&rec.plan);
    match &r.outcome {
        crate::exec::Outcome::Passed => audit_error(rec).map(|(id, _)| id),
        crate::exec::Outcome::Violation(f) => Some(f.invariant.clone().unwrap_or_default()),
        crate::exec::Outcome::Mismatch(_) => Some("MISMATCH".into()),
    }
}
