//! Loading a plan: strict parsing (unknown fields are errors) and consistency
//! checks, each failure a typed error carrying the JSON path it concerns.

use std::collections::{BTreeMap, BTreeSet};

use super::scenario::{GroupKindName, Scenario};
use super::steps::{Plan, PlanOp, ShadowGroup, Step};
use super::tokens::Tokens;

/// Why a plan cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Not a plan's shape (a missing field, a typo, a wrong type).
    #[error("malformed plan at {path}: {message}")]
    Malformed {
        /// The JSON path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Well-formed but inconsistent (an unknown request, a step out of order, …).
    #[error("inconsistent plan at {path}: {message}")]
    Inconsistent {
        /// The JSON path.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl PlanError {
    /// The JSON path at fault.
    pub fn path(&self) -> &str {
        match self {
            PlanError::Malformed { path, .. } | PlanError::Inconsistent { path, .. } => path,
        }
    }
}

fn bad(path: impl Into<String>, message: impl Into<String>) -> PlanError {
    PlanError::Inconsistent {
        path: path.into(),
        message: message.into(),
    }
}

/// Parse and validate a plan's JSON text.
pub fn load_plan(text: &str) -> Result<Plan, PlanError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let plan: Plan = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        PlanError::Malformed {
            path: json_path("$", &path),
            message: e.into_inner().to_string(),
        }
    })?;
    validate(&plan)?;
    Ok(plan)
}

/// `base` extended by a serde_path_to_error path (`.` is the value itself), so that an error at
/// the top level reads `$`, not `$..`.
pub fn json_path(base: &str, path: &str) -> String {
    if path == "." {
        base.to_string()
    } else {
        format!("{base}.{path}")
    }
}

fn validate_scenario(s: &Scenario) -> Result<(), PlanError> {
    if s.pool_blocks < 2 {
        // Checked here, not by the KV config, which calls it `num_blocks`.
        return Err(bad(
            "$.scenario.pool_blocks",
            format!("must be >= 2 (block 0 is the null block), got {}", s.pool_blocks),
        ));
    }
    if s.dp_ranks == 0 {
        return Err(bad("$.scenario.dp_ranks", "must be >= 1"));
    }
    if s.model.vocab_size == 0 {
        return Err(bad("$.scenario.model.vocab_size", "must be >= 1"));
    }
    if s.model.top_k > s.model.experts {
        return Err(bad(
            "$.scenario.model.top_k",
            format!("top_k {} exceeds experts {}", s.model.top_k, s.model.experts),
        ));
    }
    if !(0.0..1.0).contains(&s.scheduler.watermark) {
        return Err(bad("$.scenario.scheduler.watermark", "must be in [0, 1)"));
    }
    if s.scheduler.max_num_seqs == 0 || s.scheduler.max_num_batched_tokens == 0 {
        return Err(bad(
            "$.scenario.scheduler",
            "max_num_seqs and max_num_batched_tokens must be >= 1",
        ));
    }
    for (i, g) in s.model.groups.iter().enumerate() {
        let path = format!("$.scenario.model.groups[{i}]");
        if g.group_kind(s.scheduler.enable_caching).is_none() {
            let field = if g.kind == GroupKindName::SlidingWindow {
                "sliding_window"
            } else {
                "attention_chunk_size"
            };
            return Err(bad(format!("{path}.{field}"), "required for this kind"));
        }
        if g.layers == 0 || g.kv_heads == 0 || g.head_dim == 0 {
            return Err(bad(path, "layers, kv_heads and head_dim must be >= 1"));
        }
    }
    s.kv_config().validate().map_err(|e| bad("$.scenario", e.0))
}

fn check_blocks(path: &str, blocks: &[u32], pool: u32) -> Result<(), PlanError> {
    match blocks.iter().find(|&&b| b >= pool) {
        Some(b) => Err(bad(
            path,
            format!("block {b} does not exist (the pool has {pool} blocks)"),
        )),
        None => Ok(()),
    }
}

/// Consistency: ranks, step order, block ids, group ids, request lifecycles.
pub fn validate(plan: &Plan) -> Result<(), PlanError> {
    if plan.format != super::PLAN_FORMAT {
        return Err(bad(
            "$.format",
            format!("expected \"{}\", got \"{}\"", super::PLAN_FORMAT, plan.format),
        ));
    }
    let s = &plan.scenario;
    validate_scenario(s)?;
    let dims = Dims {
        pool: s.pool_blocks,
        groups: s.model.groups.len() as u32,
        mml: s.scheduler.max_model_len,
        vocab: s.model.vocab_size,
    };
    let mut live = Lifecycles::new();
    let mut seen_steps: BTreeSet<(u64, u32)> = BTreeSet::new();
    let mut last_step = 0u64;
    for (k, st) in plan.steps.iter().enumerate() {
        let sp = format!("$.steps[{k}]");
        check_step_order(&sp, st, s.dp_ranks, last_step, &mut seen_steps)?;
        last_step = st.step;
        for (j, op) in st.ops.iter().enumerate() {
            let at = OpAt {
                path: format!("{sp}.ops[{j}]"),
                rank: st.rank,
            };
            validate_op(&at, op, dims, &mut live)?;
        }
    }
    Ok(())
}

/// Per rank: request id → finished?
type Lifecycles = BTreeMap<(u32, String), bool>;

/// The scenario's sizes an op is checked against.
#[derive(Clone, Copy)]
struct Dims {
    pool: u32,
    groups: u32,
    mml: u64,
    vocab: u64,
}

/// Where an op sits: its JSON path and its step's rank.
struct OpAt {
    path: String,
    rank: u32,
}

/// A step's rank exists, and steps come in order, each (step, rank) once.
fn check_step_order(
    sp: &str,
    st: &Step,
    dp_ranks: u32,
    last_step: u64,
    seen_steps: &mut BTreeSet<(u64, u32)>,
) -> Result<(), PlanError> {
    if st.rank >= dp_ranks {
        return Err(bad(
            format!("{sp}.rank"),
            format!("rank {} but the scenario has {} ranks", st.rank, dp_ranks),
        ));
    }
    if st.step < last_step {
        return Err(bad(
            format!("{sp}.step"),
            format!("step {} after step {last_step}", st.step),
        ));
    }
    if !seen_steps.insert((st.step, st.rank)) {
        return Err(bad(
            format!("{sp}.step"),
            format!("step {} of rank {} appears twice", st.step, st.rank),
        ));
    }
    Ok(())
}

/// `req` is a live (added, not finished) request of the op's rank.
fn need_live(at: &OpAt, req: &str, live: &Lifecycles) -> Result<(), PlanError> {
    let op_path = &at.path;
    match live.get(&(at.rank, req.to_string())) {
        None => Err(bad(format!("{op_path}.req"), format!("unknown request \"{req}\""))),
        Some(true) => Err(bad(
            format!("{op_path}.req"),
            format!("request \"{req}\" is already finished"),
        )),
        Some(false) => Ok(()),
    }
}

/// One op's ids and sizes, and its effect on the request lifecycles.
fn validate_op(at: &OpAt, op: &PlanOp, dims: Dims, live: &mut Lifecycles) -> Result<(), PlanError> {
    let (op_path, pool, groups) = (&at.path, dims.pool, dims.groups);
    match op {
        PlanOp::AddRequest { req, prompt, .. } => validate_add_request(at, req, prompt, dims, live)?,
        PlanOp::Schedule {
            req,
            num_new_tokens,
            expect,
            ..
        } => {
            need_live(at, req, live)?;
            if *num_new_tokens == 0 {
                return Err(bad(format!("{op_path}.num_new_tokens"), "must be >= 1"));
            }
            if let Some(t) = &expect.tables {
                if t.len() as u32 != groups {
                    return Err(bad(
                        format!("{op_path}.expect.tables"),
                        format!("{} tables for {groups} groups", t.len()),
                    ));
                }
                for (g, table) in t.iter().enumerate() {
                    check_blocks(&format!("{op_path}.expect.tables[{g}]"), table, pool)?;
                }
            }
        }
        PlanOp::Forward { batch } => {
            for (b, e) in batch.iter().enumerate() {
                need_live(at, &e.req, live).map_err(|_| {
                    bad(
                        format!("{op_path}.batch[{b}].req"),
                        format!("request \"{}\" is not live", e.req),
                    )
                })?;
            }
        }
        PlanOp::CacheBlocks { req, .. } | PlanOp::Preempt { req } => need_live(at, req, live)?,
        PlanOp::Finish { req, .. } | PlanOp::Shed { req, .. } => {
            need_live(at, req, live)?;
            live.insert((at.rank, req.clone()), true);
        }
        PlanOp::RegisterShadow {
            shadow,
            chain,
            groups: sg,
            ..
        } => validate_register_shadow(at, shadow, chain, sg, dims, live)?,
        PlanOp::Observe(obs) => {
            for (req, t) in &obs.tables {
                if t.len() as u32 != groups {
                    return Err(bad(
                        format!("{op_path}.tables.{req}"),
                        format!("{} tables for {groups} groups", t.len()),
                    ));
                }
                for (g, table) in t.iter().enumerate() {
                    check_blocks(&format!("{op_path}.tables.{req}[{g}]"), table, pool)?;
                }
            }
        }
        PlanOp::ZeroBlocks { group, blocks } => {
            if *group >= groups {
                return Err(bad(format!("{op_path}.group"), format!("group {group} of {groups}")));
            }
            check_blocks(&format!("{op_path}.blocks"), blocks, pool)?;
        }
        PlanOp::CopyBlock { group, src, dst } => {
            if *group >= groups {
                return Err(bad(format!("{op_path}.group"), format!("group {group} of {groups}")));
            }
            check_blocks(&format!("{op_path}.src"), &[*src, *dst], pool)?;
        }
        _ => {}
    }
    Ok(())
}

/// A new request: not live yet, a prompt that fits, tokens inside the vocabulary.
fn validate_add_request(
    at: &OpAt,
    req: &str,
    prompt: &Tokens,
    dims: Dims,
    live: &mut Lifecycles,
) -> Result<(), PlanError> {
    let (op_path, mml) = (&at.path, dims.mml);
    if live.get(&(at.rank, req.to_string())) == Some(&false) {
        return Err(bad(
            format!("{op_path}.req"),
            format!("request \"{req}\" is already live"),
        ));
    }
    if prompt.is_empty() || prompt.len() >= mml {
        return Err(bad(
            format!("{op_path}.prompt"),
            format!("length {} not in [1, max_model_len={mml})", prompt.len()),
        ));
    }
    match prompt {
        Tokens::Ids { ids } => {
            if let Some(t) = ids.iter().find(|&&t| t >= dims.vocab) {
                return Err(bad(format!("{op_path}.prompt.ids"), format!("token {t} >= vocab_size")));
            }
        }
        Tokens::PyChoices { low, high, .. } => {
            if *high > dims.vocab {
                return Err(bad(
                    format!("{op_path}.prompt.high"),
                    format!("{high} > vocab_size={}", dims.vocab),
                ));
            }
            if low >= high {
                return Err(bad(
                    format!("{op_path}.prompt.low"),
                    format!("range({low}, {high}) is empty"),
                ));
            }
        }
        Tokens::Salted { .. } => {}
    }
    live.insert((at.rank, req.to_string()), false);
    Ok(())
}

/// A shadow of a live chain: its groups' block ids exist, and the shadow is new.
fn validate_register_shadow(
    at: &OpAt,
    shadow: &str,
    chain: &str,
    sg: &[ShadowGroup],
    dims: Dims,
    live: &mut Lifecycles,
) -> Result<(), PlanError> {
    let (op_path, pool, groups) = (&at.path, dims.pool, dims.groups);
    need_live(at, chain, live).map_err(|e| bad(format!("{op_path}.chain"), e.to_string()))?;
    if !sg.is_empty() && sg.len() as u32 > groups {
        return Err(bad(
            format!("{op_path}.groups"),
            format!("{} groups for a {groups}-group layout", sg.len()),
        ));
    }
    for (g, grp) in sg.iter().enumerate() {
        check_blocks(&format!("{op_path}.groups[{g}].shared"), &grp.shared, pool)?;
        check_blocks(&format!("{op_path}.groups[{g}].tail"), &grp.tail, pool)?;
        check_blocks(
            &format!("{op_path}.groups[{g}].cow_from"),
            grp.cow_from.as_slice(),
            pool,
        )?;
        check_blocks(&format!("{op_path}.groups[{g}].cow_more"), &grp.cow_more, pool)?;
        if grp.cow_more.len() >= grp.tail.len().max(1) {
            return Err(bad(
                format!("{op_path}.groups[{g}].cow_more"),
                format!(
                    "{} extra copy sources for a {}-block tail",
                    grp.cow_more.len(),
                    grp.tail.len()
                ),
            ));
        }
    }
    if live.get(&(at.rank, shadow.to_string())) == Some(&false) {
        return Err(bad(
            format!("{op_path}.shadow"),
            format!("request \"{shadow}\" is already live"),
        ));
    }
    live.insert((at.rank, shadow.to_string()), false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_prompt(prompt: Tokens) -> Result<(), PlanError> {
        let text = include_str!("../../../tests/data/plans/shadow_decode.json");
        let mut plan = load_plan(text).expect("the fixture validates");
        let op = plan
            .steps
            .iter_mut()
            .flat_map(|s| s.ops.iter_mut())
            .find_map(|op| match op {
                PlanOp::AddRequest { prompt, .. } => Some(prompt),
                _ => None,
            });
        *op.expect("an add_request") = prompt;
        validate(&plan)
    }

    #[test]
    fn tokens_py_choices_validation() {
        // The fixture's vocab_size is 100 and its chain prompt 8 tokens.
        let pc = |low, high| Tokens::PyChoices {
            seed: "dp0:chain".into(),
            len: 8,
            low,
            high,
        };
        assert_eq!(with_prompt(pc(1, 100)), Ok(()));
        assert_eq!(with_prompt(pc(99, 100)), Ok(()));
        let e = with_prompt(pc(1, 101)).unwrap_err();
        assert!(e.path().ends_with(".prompt.high"), "{e}");
        let e = with_prompt(pc(5, 5)).unwrap_err();
        assert!(e.path().ends_with(".prompt.low"), "{e}");
        let e = with_prompt(pc(6, 5)).unwrap_err();
        assert!(e.path().ends_with(".prompt.low"), "{e}");
    }
}
