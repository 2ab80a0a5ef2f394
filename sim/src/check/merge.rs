//! `kvsim check merge`: the `--json` reports of the shards of one run summed into
//! the report the unsharded run gives (the same bytes), goals judged over the union.

use std::collections::{BTreeMap, BTreeSet};

use super::goals;
use super::suite::{CheckReport, ScenarioRow, CHECK_FORMAT};

/// Why a set of reports is not the shards of one run.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// No report given.
    #[error("no shard reports given")]
    Empty,
    /// Not a `kvsim check --json` report.
    #[error("report {index}: format {found:?}, expected {CHECK_FORMAT:?} (a `kvsim check --json` report)")]
    Format {
        /// Which report.
        index: usize,
        /// Its format.
        found: String,
    },
    /// A `--case` run, not a shard.
    #[error("report {index}: it is a `--case` run, not a shard")]
    OneCase {
        /// Which report.
        index: usize,
    },
    /// A shard that is not K/N.
    #[error("report {index}: shard {found:?} is not K/N with 1 ≤ K ≤ N")]
    BadShard {
        /// Which report.
        index: usize,
        /// Its shard.
        found: String,
    },
    /// A setting differs from report 0's.
    #[error("report {index}: {what} {found} differs from report 0's {expected}")]
    Differs {
        /// Which report.
        index: usize,
        /// The setting.
        what: &'static str,
        /// Its value there.
        found: String,
        /// Report 0's.
        expected: String,
    },
    /// A shard given twice.
    #[error("shard {shard} given twice (reports {first} and {second})")]
    Duplicate {
        /// The shard.
        shard: String,
        /// The first report.
        first: usize,
        /// The second.
        second: usize,
    },
    /// Shards no report covers.
    #[error("shards missing: {}", .0.join(", "))]
    Missing(Vec<String>),
    /// No shard, or more than one, ran the exhaustive pass.
    #[error("report {index}: no shard or more than one ran the exhaustive pass (the last shard runs it)")]
    Exhaustive {
        /// Which report.
        index: usize,
    },
}

fn parse_shard(index: usize, s: &str) -> Result<(u64, u64), MergeError> {
    let bad = || MergeError::BadShard {
        index,
        found: s.to_string(),
    };
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (u64, u64) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if k == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Check that `reports` are each shard of one run exactly once.
fn validate(reports: &[CheckReport]) -> Result<(), MergeError> {
    let first = reports.first().ok_or(MergeError::Empty)?;
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut shards = 0;
    for (index, r) in reports.iter().enumerate() {
        if r.format != CHECK_FORMAT {
            return Err(MergeError::Format {
                index,
                found: r.format.clone(),
            });
        }
        if r.case.is_some() {
            return Err(MergeError::OneCase { index });
        }
        let differs = |what, found: String, expected: String| MergeError::Differs {
            index,
            what,
            found,
            expected,
        };
        if r.seed != first.seed {
            return Err(differs("seed", r.seed.to_string(), first.seed.to_string()));
        }
        if r.cases_per_scenario != first.cases_per_scenario {
            return Err(differs(
                "cases per scenario",
                r.cases_per_scenario.to_string(),
                first.cases_per_scenario.to_string(),
            ));
        }
        if r.scenario_names != first.scenario_names {
            return Err(differs(
                "scenarios",
                r.scenario_names.join(","),
                first.scenario_names.join(","),
            ));
        }
        let (k, n) = parse_shard(index, &r.shard)?;
        if index == 0 {
            shards = n;
        } else if n != shards {
            return Err(differs("shard count", n.to_string(), shards.to_string()));
        }
        if let Some(prev) = seen.insert(k, index) {
            return Err(MergeError::Duplicate {
                shard: r.shard.clone(),
                first: prev,
                second: index,
            });
        }
    }
    let missing: Vec<String> = (1..=shards)
        .filter(|k| !seen.contains_key(k))
        .map(|k| format!("{k}/{shards}"))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing(missing));
    }
    Ok(())
}

/// The unsharded report of the run whose shards are `reports` (any order).
pub fn merge(reports: &[CheckReport]) -> Result<CheckReport, MergeError> {
    validate(reports)?;
    let first = &reports[0];
    let mut rows: BTreeMap<&str, ScenarioRow> = BTreeMap::new();
    let mut reached: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut goal_counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut exhaustive = None;
    for (index, r) in reports.iter().enumerate() {
        for s in &r.scenarios {
            let row = rows.entry(&s.scenario).or_default();
            row.scenario.clone_from(&s.scenario);
            row.cases += s.cases;
            row.not_applicable += s.not_applicable;
            row.passed += s.passed;
            row.failed += s.failed;
            row.ops += s.ops;
            for (k, v) in &s.not_applicable_reasons {
                *row.not_applicable_reasons.entry(k.clone()).or_default() += v;
            }
            for (k, v) in &s.failures {
                *row.failures.entry(k.clone()).or_default() += v;
            }
            reached
                .entry(&s.scenario)
                .or_default()
                .extend(s.goals_reached.iter().map(String::as_str));
        }
        for (g, n) in &r.goals {
            *goal_counts.entry(g.clone()).or_default() += n;
        }
        failures.extend(r.failures.iter().cloned());
        if let Some(x) = &r.exhaustive {
            if exhaustive.replace(x.clone()).is_some() {
                return Err(MergeError::Exhaustive { index });
            }
        }
    }
    if exhaustive.is_none() {
        return Err(MergeError::Exhaustive { index: 0 });
    }
    // A shard keeps its first failure per scenario; the run keeps the first of those.
    failures.sort_by_key(|f| f.case);
    let mut kept: BTreeSet<String> = BTreeSet::new();
    failures.retain(|f| kept.insert(f.scenario.clone()));
    let scenarios = first
        .scenario_names
        .iter()
        .filter_map(|name| {
            let mut row = rows.remove(name.as_str())?;
            let goals = reached.remove(name.as_str()).unwrap_or_default();
            row.finish(|g| goals.contains(g));
            Some(row)
        })
        .collect::<Vec<_>>();
    let goal_counts: BTreeMap<String, u64> = goals::GOALS
        .iter()
        .map(|(g, _)| (g.to_string(), goal_counts.get(*g).copied().unwrap_or(0)))
        .collect();
    Ok(CheckReport {
        format: CHECK_FORMAT.to_string(),
        seed: first.seed,
        cases_per_scenario: first.cases_per_scenario,
        scenario_names: first.scenario_names.clone(),
        shard: "1/1".to_string(),
        case: None,
        cases_run: reports.iter().map(|r| r.cases_run).sum(),
        missed_goals: goals::missed(&goal_counts).into_iter().map(str::to_string).collect(),
        goals: goal_counts,
        scenarios,
        failures,
        exhaustive,
    })
}
