//! `kvsim audit`: checks a real Dynamo rank artifact (ai-dynamo 1.6.1's `InstrumentedScheduler`,
//! `_bench_write_results`, `schema_version` 2) against its schema and against the artifact-level
//! invariants that hold on an artifact alone (`spec/dynamo-artifact.md` lists every check).
//!
//! Two layers: [`schema`] walks the raw JSON against a field table of the 1.6.1 format (missing
//! fields, wrong types, closed vocabularies, unknown fields); when it finds no structural error the
//! artifact is read into the typed [`model`] and the consistency checks run on it (run status,
//! coverage, limits, provenance, kvwarm counters, FPM shapes). Pure: no I/O.

mod coverage;
mod fpms;
mod kvwarm;
mod limits;
pub mod model;
mod regime;
pub mod schema;
mod status;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::Value;

/// How a finding weighs: errors fail the audit, warnings are reported only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the audit.
    Error,
    /// Reported only.
    Warning,
}

/// One check of the catalog.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// The check's ID (`AU-…`).
    pub id: &'static str,
    /// How a finding of it weighs.
    pub severity: Severity,
    /// What it checks.
    pub what: &'static str,
}

const fn err(id: &'static str, what: &'static str) -> Check {
    Check {
        id,
        severity: Severity::Error,
        what,
    }
}

const fn warn(id: &'static str, what: &'static str) -> Check {
    Check {
        id,
        severity: Severity::Warning,
        what,
    }
}

/// Every check `kvsim audit` runs, in the order it runs them.
pub const CHECKS: &[Check] = &[
    err("AU-SCHEMA-MISSING", "a field 1.6.1 always writes is absent"),
    err(
        "AU-SCHEMA-TYPE",
        "a field has another JSON type than 1.6.1 writes (integers are non-negative)",
    ),
    warn(
        "AU-SCHEMA-UNKNOWN",
        "a field 1.6.1 does not write (another version, or kvsim's own vocabulary)",
    ),
    err("AU-SCHEMA-VERSION", "`schema_version` is not 2"),
    err(
        "AU-SCHEMA-ENUM",
        "a closed-vocabulary string holds a value 1.6.1 never writes",
    ),
    err("AU-SCHEMA-FORMAT", "a SHA-256 digest is not 64 lowercase hex digits"),
    err(
        "AU-RUN-FAILED",
        "the run failed (`status` is `failed`): the artifact records the planner's error",
    ),
    warn(
        "AU-RUN-PARTIAL",
        "the run stopped early (`status` is `partial`, `stop_reason` says why)",
    ),
    warn(
        "AU-RUN-INVALID",
        "a `complete` run is not `valid` or not `usable` (skipped points, missing phases)",
    ),
    err(
        "AU-STATUS-ERROR",
        "`status` is `failed` exactly when `error` is not null",
    ),
    err(
        "AU-STATUS-STOP",
        "`stop_reason` is set exactly when `status` is `partial`; a partial run has open points",
    ),
    err(
        "AU-STATUS-VALID",
        "`valid` equals the writer's formula over coverage, groups, skips, phases, error, timing",
    ),
    err("AU-STATUS-USABLE", "`usable` equals the writer's formula"),
    err(
        "AU-TIMING-VALID",
        "`timing_valid` equals: both timestamps set and measured <= elapsed + 1e-12",
    ),
    err(
        "AU-TIMING-SUM",
        "`timing.measured_iteration_seconds` is the sum of the groups' `wall_time`",
    ),
    err(
        "AU-COVERAGE-COUNTS",
        "`coverage.completed_points` / `skipped_points` count `results` / `skipped_points`",
    ),
    err(
        "AU-COVERAGE-TOTAL",
        "completed + skipped <= expected; a `complete` run accounts for every point",
    ),
    err(
        "AU-REPLICA-KEPT",
        "no result or skipped point is an eager warm-up replica (`eager_warmup`): replicas are discarded",
    ),
    err(
        "AU-POINT-IDS",
        "benchmark ids of results and skips are distinct, 1..n, increasing in execution order",
    ),
    err(
        "AU-GROUP-MATCH",
        "one iteration group per result, same id, point and this rank's FPMs, `complete`",
    ),
    err(
        "AU-GROUP-RANKS",
        "groups expect ranks 0..dp.size and carry one rank result per rank, in order",
    ),
    err(
        "AU-GROUP-WALL",
        "a group's `wall_time` is the largest wall time of its ranks' FPMs",
    ),
    err("AU-DP-SYNC", "`dp`, `synchronization` and `engine.parallel` agree"),
    err(
        "AU-LIMITS-SELF",
        "`limits` and `capacity.common` agree (negotiated <= local, watermark <= pool)",
    ),
    err(
        "AU-LIMITS-BATCH",
        "every point's batch is within 1..max_num_running_reqs (decode: <= feasible_max_batch_size)",
    ),
    err(
        "AU-LIMITS-CONTEXT",
        "every point's tokens fit max_model_len and the step budget; decode reads >= 2 per request",
    ),
    err(
        "AU-LIMITS-BLOCKS",
        "a decode point fits the usable blocks (single full-attention group only)",
    ),
    err(
        "AU-POINT-ROWS",
        "explicit `rows` have one [new, kv] pair per request summing to the point's totals",
    ),
    err(
        "AU-POINT-MODE",
        "point types belong to `config.mode`; a missing phase has no points",
    ),
    err(
        "AU-POINT-CUDAGRAPH",
        "a decode point's capture size, padding and mode follow the `cudagraph` block",
    ),
    warn("AU-POINT-REASON", "a sample reason 1.6.1 never writes"),
    err(
        "AU-REGIME-VOCAB",
        "`kv_seed_regime` is in 1.6.1's vocabulary for its list",
    ),
    err(
        "AU-REGIME-STAMP",
        "`kv_seed_regime` is what the writer derives from the point's stamps and the kvwarm block",
    ),
    err("AU-SKIP-REASON", "a skipped point's `reason` is one 1.6.1 writes"),
    err(
        "AU-KVWARM-GATE",
        "the kvwarm block exists for decode runs; enabled / warm_eligible / skip_reason agree",
    ),
    err(
        "AU-KVWARM-REAL",
        "real-KV rows, counts and stages only when the warm-up is enabled and eligible",
    ),
    err(
        "AU-KVWARM-COUNTS",
        "points_real_kv + points_fake_fallback = stamped decode points + eager replicas",
    ),
    err(
        "AU-KVWARM-STAGES",
        "stages and capacity fallbacks are well formed, within slots and the depth cap",
    ),
    err(
        "AU-KVWARM-COVER",
        "every real-KV row has a built stage of its batch deep enough for it",
    ),
    err("AU-FPM-COUNT", "every result carries exactly one FPM"),
    err(
        "AU-FPM-IDENTITY",
        "an FPM's `counter_id`, `dp_rank` and `version` match its point and rank",
    ),
    err(
        "AU-FPM-SHAPE",
        "an FPM's scheduled requests match the point's batch and token counts",
    ),
    err(
        "AU-FPM-VARIANCE",
        "a decode FPM's `var_decode_kv_tokens` is the balanced partition's variance",
    ),
    err("AU-FPM-WALL", "an FPM's `wall_time` is finite and positive"),
    err(
        "AU-FPM-STEADY",
        "a decode FPM is a steady sample; `kvwarm_giant_median_of` only on real or giant points",
    ),
];

/// The check with this id. Panics on an id not in [`CHECKS`] (a bug the tests catch).
pub fn check(id: &str) -> &'static Check {
    CHECKS
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("unknown audit check {id}"))
}

/// One finding: which check, how it weighs, where (a JSON path) and what.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// The check's ID.
    pub id: &'static str,
    /// How it weighs.
    pub severity: Severity,
    /// Where: a JSON path.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// The findings of an audit, in check order.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The schema layer found no structural error (missing field, wrong type).
    pub schema_ok: bool,
    /// The consistency checks ran (they need the typed model, so a structural error skips them).
    pub consistency_checked: bool,
    /// The artifact's `status`, when it is a string.
    pub status: Option<String>,
    /// The findings, in check order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Findings that are errors.
    pub fn errors(&self) -> usize {
        self.findings.iter().filter(|f| f.severity == Severity::Error).count()
    }

    /// Findings that are warnings.
    pub fn warnings(&self) -> usize {
        self.findings.iter().filter(|f| f.severity == Severity::Warning).count()
    }

    /// No error: the audit passes (warnings allowed).
    pub fn passed(&self) -> bool {
        self.errors() == 0
    }
}

/// Findings collector shared by the check modules.
#[derive(Default)]
pub(crate) struct Out {
    findings: Vec<Finding>,
}

impl Out {
    pub(crate) fn push(&mut self, id: &'static str, path: impl Into<String>, message: impl Into<String>) {
        let c = check(id);
        self.findings.push(Finding {
            id: c.id,
            severity: c.severity,
            path: path.into(),
            message: message.into(),
        });
    }
}

/// Why an input cannot be audited at all (the CLI's exit 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InputError {
    /// A JSON path (`$` for the document itself).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// Parses an artifact's text; only non-JSON text and a top level other than an object are
/// refused (everything else is a finding).
pub fn parse(text: &str) -> Result<Value, InputError> {
    let v: Value = serde_json::from_str(text).map_err(|e| InputError {
        path: "$".into(),
        message: format!("not valid JSON: {e}"),
    })?;
    if !v.is_object() {
        return Err(InputError {
            path: "$".into(),
            message: format!("the top level must be an object, found {}", schema::kind(&v)),
        });
    }
    Ok(v)
}

/// Audits a parsed artifact (any JSON value; a non-object is a schema finding here).
pub fn audit(v: &Value) -> Report {
    let mut out = Out::default();
    schema::check(v, &mut out);
    let schema_ok = !out
        .findings
        .iter()
        .any(|f| f.id == "AU-SCHEMA-MISSING" || f.id == "AU-SCHEMA-TYPE");
    let status = v.get("status").and_then(Value::as_str).map(str::to_string);
    let mut consistency_checked = false;
    if schema_ok {
        match serde_path_to_error::deserialize::<_, model::Artifact>(v) {
            Ok(a) => {
                consistency_checked = true;
                status::check(&a, &mut out);
                coverage::check(&a, &mut out);
                limits::check(&a, &mut out);
                regime::check(&a, &mut out);
                kvwarm::check(&a, &mut out);
                fpms::check(&a, &mut out);
            }
            // The field table and the typed model disagree: report where, as a type finding.
            Err(e) => out.push("AU-SCHEMA-TYPE", schema::display_path(e.path()), e.inner().to_string()),
        }
    }
    let schema_ok = schema_ok && consistency_checked;
    let mut findings = out.findings;
    // Grouped by check, in catalog order; within a check in document order (a stable sort).
    findings.sort_by_key(|f| CHECKS.iter().position(|c| c.id == f.id));
    Report {
        schema_ok,
        consistency_checked,
        status,
        findings,
    }
}
