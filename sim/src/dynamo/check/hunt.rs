//! `kvsim check --planner dynamo --mutant`: hunt each seed bug re-introduced
//! into a copy of the real planner. A case kills the mutant when the patched
//! planner fails it and the unpatched one passes it (the case shows the patch,
//! not a bug 1.6.1 already has); the kill is shrunk with that same rule and
//! written as a minimal scenario plus one command.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::pool::{run_all, Slot};
use super::run::{CaseEnv, RealOutcome};
use super::shrink::shrink_case;
use super::swarm::{record_index, write_repro, RealCheckConfig, Repro};
use crate::dynamo::mutants::{patched_copy, RealMutant};
use crate::dynamo::RecordError;

#[derive(Clone, Debug, Serialize)]
pub struct MutantRow {
    pub mutant: String,
    pub bug: u32,
    pub summary: String,
    pub killed: bool,
    /// The verdict key of the kill (an invariant, or `DY-RAISED <exception>`).
    pub verdict: Option<String>,
    /// The mutant file's expectation, for comparison.
    pub expect: Option<String>,
    /// Cases drawn until the kill (the budget when it survived).
    pub cases: u64,
    pub minimal: Option<Repro>,
    /// Wall-clock seconds (text output only).
    #[serde(skip)]
    pub seconds: f64,
}

/// Verdict keys of the unpatched planner per case index (shared by every hunt).
pub type Control = BTreeMap<u64, String>;

fn keys(
    cfg: &RealCheckConfig,
    env: &CaseEnv,
    indices: &[u64],
) -> Result<Vec<(String, Option<RealOutcome>)>, RecordError> {
    let c = RealCheckConfig {
        env: env.clone(),
        ..cfg.clone()
    };
    run_all(
        cfg.jobs,
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
    scratch: &std::path::Path,
) -> Result<MutantRow, RecordError> {
    let started = Instant::now();
    let source = patched_copy(m, scratch).map_err(RecordError::Io)?;
    let env = CaseEnv {
        planner_source: Some(source),
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
        minimal: None,
        seconds: 0.0,
    };
    for chunk in indices.chunks(batch) {
        let got = keys(cfg, &env, chunk)?;
        let candidates: Vec<usize> = (0..chunk.len()).filter(|&k| got[k].1.is_some()).collect();
        // The unpatched planner on the failing cases not yet known.
        let unknown: Vec<u64> = candidates
            .iter()
            .map(|&k| chunk[k])
            .filter(|i| !control.contains_key(i))
            .collect();
        for (i, (key, _)) in unknown.iter().zip(keys(cfg, &cfg.env, &unknown)?) {
            control.insert(*i, key);
        }
        // A kill is a case the unpatched planner passes: the patch, nothing else.
        let Some(k) = candidates.into_iter().find(|&k| control[&chunk[k]] == "passed") else {
            continue;
        };
        let index = chunk[k];
        let (key, outcome) = got.into_iter().nth(k).expect("index in chunk");
        let mut slot = Slot::default();
        let shrunk = shrink_case(
            &mut slot,
            cfg.base(index),
            cfg.case(index),
            outcome.expect("a failing outcome"),
            &env,
            Some(&cfg.env),
        )?;
        let flagged = RealCheckConfig {
            planner_flag: Some(format!("--mutant {}", m.name)),
            env: env.clone(),
            ..cfg.clone()
        };
        row.killed = true;
        row.verdict = Some(key);
        row.cases = indices.iter().position(|&i| i == index).map_or(0, |p| p as u64 + 1);
        row.minimal = write_repro(&flagged, &m.name, shrunk.case, shrunk.outcome, shrunk.tries)?;
        break;
    }
    row.seconds = started.elapsed().as_secs_f64();
    Ok(row)
}
