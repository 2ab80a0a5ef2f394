//! Shadow registration (§2.3, §3.6): the `register_shadow` op a shadow borrowing a chain gets.

use crate::bugs::BugMutant;
use crate::engine::Engine;
use crate::fpm::capacity::LayoutNeed;
use crate::kv::{GroupKind, NULL_BLOCK};
use crate::plan::{PlanOp, ShadowGroup, TailMode};

/// `_kvwarm_shadow_tail_blocks(repeats)` (§2.3): worst case per request, with
/// `h = max(2, repeats)`, Σ over groups of `1 + ceil(h / bs)` (positional groups).
/// Random-state (Mamba/KDA, random KDA on) groups count `1 + ceil((h + 1) / bs)`:
/// their private span starts one block lower (`recurrent_shadow_range`).
pub fn shadow_tail_blocks(need: &LayoutNeed, repeats: u64) -> u64 {
    let h = repeats.max(2);
    need.config
        .groups
        .iter()
        .map(|g| {
            let x = u64::from(matches!(g.kind, GroupKind::Mamba { .. }));
            1 + (h + x).div_ceil(g.block_size)
        })
        .sum()
}

/// `recurrent_shadow_range(ctx, headroom, bs)` (§2.3): the private state span
/// `[first, end)` of a random-state group.
pub fn recurrent_shadow_range(ctx: u64, headroom: u64, bs: u64) -> (u64, u64) {
    (ctx.saturating_sub(1) / bs, (ctx + 1 + headroom).div_ceil(bs))
}

/// Build the `register_shadow` op for `shadow` borrowing `chain` at `ctx` with
/// `headroom` steady writes, from the engine's current state (§2.3, §3.6). All or
/// nothing: every group's span and the pool shortfall are checked before anything
/// is decided; a shortfall (or a chain too shallow) gives a failed op with no
/// groups, which leaves the pool exactly as it was. The tail ids are the ones the
/// pool hands out next (`get_new_blocks` pops the free queue's front; shared and
/// CoW-source blocks are the chain's, so referencing them moves nothing).
pub fn shadow_registration(e: &Engine, shadow: &str, chain: &str, ctx: u64, headroom: u64, covered: bool) -> PlanOp {
    shadow_registration_with(e, shadow, chain, ctx, headroom, covered, false)
}

/// `shadow_registration`; with `random_state` (random KDA, §3, invariant 49)
/// Mamba/KDA groups get a private span over `recurrent_shadow_range` with null
/// placeholders below it, borrowing nothing from the chain.
pub fn shadow_registration_with(
    e: &Engine,
    shadow: &str,
    chain: &str,
    ctx: u64,
    headroom: u64,
    covered: bool,
    random_state: bool,
) -> PlanOp {
    registration_op(e, (shadow, chain), ctx, headroom, (covered, random_state), None)
}

/// One group's part of a registration: the chain blocks it borrows, how many
/// fresh tail blocks it draws, and the chain block its first tail block copies.
type Span = (Vec<u32>, usize, Option<u32>);

/// `shadow_registration_with`, with a seed-bug mutant of the registration code.
pub(super) fn registration_op(
    e: &Engine,
    (shadow, chain): (&str, &str),
    ctx: u64,
    headroom: u64,
    (covered, random_state): (bool, bool),
    mutant: Option<BugMutant>,
) -> PlanOp {
    let op = |tail, groups, ok| PlanOp::RegisterShadow {
        shadow: shadow.to_string(),
        chain: chain.to_string(),
        ctx,
        headroom,
        tail,
        groups,
        ok,
        covered,
        random_state,
    };
    let failed = || op(TailMode::Zero, Vec::new(), false);
    if e.registration_fails_next() {
        // A local stage failure (`stage_failure` fault) is coming: report it.
        return failed();
    }
    let Some(c) = e.requests.get(chain) else {
        return failed();
    };
    let tables = e.kv.get_block_ids(c.req.id);
    // Phase 1: every group's span, before anything is drawn.
    let Some(spans) = group_spans(e, &tables, ctx, headroom, random_state, mutant) else {
        return failed();
    };
    let total: usize = spans.iter().map(|s| s.1).sum();
    let free = e.kv.pool.num_free_blocks();
    if total > free && mutant == Some(BugMutant::RegistrationNotAtomic) {
        return op(TailMode::Zero, registered_until_dry(e, spans, free), false);
    }
    if total > free {
        // `_kvwarm_shadow_pool_shortfall` > 0 (§3.5 step 2): register nothing.
        return failed();
    }
    let mut fresh = e.kv.pool.free_queue().take(total);
    let groups: Vec<ShadowGroup> = spans
        .into_iter()
        .map(|(shared, n, cow_from)| ShadowGroup {
            shared,
            tail: fresh.by_ref().take(n).collect(),
            cow_from,
            cow_more: Vec::new(),
            num_cached: None,
        })
        .collect();
    let tail = if groups.iter().any(|g| g.cow_from.is_some()) {
        TailMode::Cow
    } else {
        TailMode::Zero
    };
    op(tail, groups, true)
}

/// Every group's span of a shadow borrowing the chain whose block `tables` these
/// are; `None` when some group cannot be borrowed (the registration fails).
fn group_spans(
    e: &Engine,
    tables: &[Vec<u32>],
    ctx: u64,
    headroom: u64,
    random_state: bool,
    mutant: Option<BugMutant>,
) -> Option<Vec<Span>> {
    let mut spans = Vec::new();
    for (g, grp) in e.kv.config.groups.iter().enumerate() {
        if random_state && matches!(grp.kind, GroupKind::Mamba { .. }) {
            let (first, end) = recurrent_shadow_range(ctx, headroom, grp.block_size);
            spans.push((vec![NULL_BLOCK; first as usize], (end - first) as usize, None));
            continue;
        }
        if mutant == Some(BugMutant::RecurrentStateBorrowed) && matches!(grp.kind, GroupKind::Mamba { .. }) {
            // §8.2 bug 8: the state slot is a fresh block, not the chain's state at ctx.
            let (first, end) = recurrent_shadow_range(ctx, headroom, grp.block_size);
            let shared = tables[g].iter().copied().take(first as usize).collect::<Vec<_>>();
            let fresh = end as usize - shared.len();
            spans.push((shared, fresh, None));
            continue;
        }
        if !matches!(grp.kind, GroupKind::FullAttention | GroupKind::Mla) {
            // DECISION: only positional full-attention/MLA groups are borrowed (the
            // chain gate rejects state layers; windows are not chain-eligible here).
            return None;
        }
        let bs = grp.block_size;
        let n_shared = (ctx / bs) as usize;
        let n_total = (ctx + 1 + headroom).div_ceil(bs) as usize;
        if n_total > tables[g].len() {
            // "chain … too shallow for shadow …" (§3.6; §8.2 bug 6).
            return None;
        }
        if mutant == Some(BugMutant::ZeroAllocBorrow) {
            // §8.2 bug 9: the chain's table borrowed read-only, no private tail.
            spans.push((tables[g][..n_total].to_vec(), 0, None));
            continue;
        }
        let cow_from = (!ctx.is_multiple_of(bs)).then(|| tables[g][n_shared]);
        spans.push((tables[g][..n_shared].to_vec(), n_total - n_shared, cow_from));
    }
    Some(spans)
}

/// §8.2 bug 1: groups registered one by one until the pool runs dry; the
/// failure leaves the earlier groups behind.
fn registered_until_dry(e: &Engine, spans: Vec<Span>, free: usize) -> Vec<ShadowGroup> {
    let mut fresh = e.kv.pool.free_queue().take(free);
    let mut left = free;
    let mut groups = Vec::new();
    for (shared, n, cow_from) in spans {
        if n > left {
            break;
        }
        left -= n;
        groups.push(ShadowGroup {
            shared,
            tail: fresh.by_ref().take(n).collect(),
            cow_from,
            cow_more: Vec::new(),
            num_cached: None,
        });
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::registration_op;
    use crate::bugs::BugMutant;
    use crate::engine::Engine;
    use crate::plan::{PlanOp, Scenario, ShadowGroup, Tokens};

    /// Two full-attention groups of 4-token blocks; chain `c` holds two blocks in
    /// each, which leaves one block of the pool free.
    fn engine_with_a_chain() -> Engine {
        let fa =
            serde_json::json!({"kind": "full_attention", "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8});
        let s: Scenario = serde_json::from_value(serde_json::json!({
            "name": "t", "model": {"groups": [fa, fa], "vocab_size": 50},
            "pool_blocks": 6, "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 32, "enable_caching": true},
            "seed": 0
        }))
        .unwrap();
        let mut e = Engine::new(&s, 0).unwrap();
        e.begin_step();
        let ops = [
            PlanOp::AddRequest {
                req: "c".into(),
                prompt: Tokens::Ids { ids: (1..=8).collect() },
                cache_salt: None,
            },
            PlanOp::Schedule {
                req: "c".into(),
                num_new_tokens: 8,
                use_prefix_cache: true,
                full_sequence_must_fit: false,
                delay_cache_blocks: false,
                expect: Default::default(),
            },
        ];
        for op in &ops {
            e.apply(op).unwrap();
        }
        assert_eq!(e.kv.get_block_ids(e.requests["c"].req.id), [vec![1, 2], vec![3, 4]]);
        assert_eq!(e.kv.pool.num_free_blocks(), 1);
        e
    }

    fn registered(op: PlanOp) -> (Vec<ShadowGroup>, bool) {
        let PlanOp::RegisterShadow { groups, ok, .. } = op else {
            panic!("not a registration: {op:?}");
        };
        (groups, ok)
    }

    #[test]
    fn a_shortfall_registers_nothing_and_bug_1_registers_groups_until_the_pool_runs_dry() {
        let e = engine_with_a_chain();
        // At ctx 6 with one steady write each group shares block 0 and draws one tail
        // block (copied from block 1): two blocks wanted, one free.
        let register = |mutant| registration_op(&e, ("s", "c"), 6, 1, (true, false), mutant);
        assert_eq!(registered(register(None)), (Vec::new(), false), "all or nothing");
        let (groups, ok) = registered(register(Some(BugMutant::RegistrationNotAtomic)));
        assert!(!ok);
        let first = ShadowGroup {
            shared: vec![1],
            tail: vec![5],
            cow_from: Some(2),
            cow_more: Vec::new(),
            num_cached: None,
        };
        assert_eq!(
            groups,
            [first],
            "the first group takes the last free block; the second does not fit"
        );
    }
}
