//! The invariant catalog: every ID (typed, [`InvariantId`]), its statement, its source and
//! where it is checked. `spec/invariants.md` is generated from this table and a test keeps
//! the two identical.

use std::fmt;

/// One catalog entry.
pub struct Invariant {
    /// The invariant's ID.
    pub id: InvariantId,
    /// What must hold.
    pub statement: &'static str,
    /// Where it comes from (research section, seed, bug).
    pub source: &'static str,
    /// The one function that checks it.
    pub checked_in: &'static str,
}

/// Declares every invariant once: its ID (the enum variant and the text reports carry) with
/// its catalog row. Adding an invariant is one entry here.
macro_rules! catalog {
    ($($id:ident = $text:literal {
        statement: $statement:literal,
        source: $source:literal,
        checked_in: $checked_in:literal,
    })*) => {
        /// An invariant of the catalog.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum InvariantId {
            $(#[doc = $text] $id,)*
        }

        impl InvariantId {
            /// Every ID, in catalog order.
            pub const ALL: &'static [InvariantId] = &[$(InvariantId::$id,)*];

            /// The ID as reports, plans and `spec/invariants.md` spell it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(InvariantId::$id => $text,)*
                }
            }
        }

        /// The catalog, one row per ID in the enum's order.
        pub const CATALOG: &[Invariant] = &[$(Invariant {
            id: InvariantId::$id,
            statement: $statement,
            source: $source,
            checked_in: $checked_in,
        },)*];
    };
}

catalog! {
    KvRef = "KV-REF" {
        statement: "A block's ref count equals the number of its holders: block-table entries over all requests and groups, plus references held outside tables (fenced frees, copy-on-write retentions). No table holds a block twice.",
        source: "vllm_kv.md §7 items 2, 5",
        checked_in: "core/src/invariants/model.rs: check_ref_counts",
    }
    KvFreeq = "KV-FREEQ" {
        statement: "A non-null block is in the free queue if and only if its ref count is 0.",
        source: "vllm_kv.md §7 item 2",
        checked_in: "core/src/invariants/model.rs: check_free_queue",
    }
    KvCache = "KV-CACHE" {
        statement: "Every prefix-cache entry points at a block holding that (hash, group) key, and every key a block holds is registered in the map.",
        source: "vllm_kv.md §7 item 6",
        checked_in: "core/src/invariants/model.rs: check_prefix_cache",
    }
    KvConserve = "KV-CONSERVE" {
        statement: "Blocks are conserved: free blocks plus referenced blocks equal the usable blocks (all but the null block).",
        source: "vllm_kv.md §7 item 4",
        checked_in: "core/src/invariants/model.rs: check_conservation",
    }
    KvNull = "KV-NULL" {
        statement: "The null block 0 is never handed out: never in the free queue, never referenced, never hashed.",
        source: "vllm_kv.md §7 item 1",
        checked_in: "core/src/invariants/model.rs: check_null_block",
    }
    KvTableShape = "KV-TABLE-SHAPE" {
        statement: "Right after allocate_slots a table has its kind's shape: a sliding-window or chunked-local table is null below its window edge, an align-mode Mamba table null below the state of the last processed token (the blocks remove_skipped_blocks frees; processed = computed and hit tokens less those in flight).",
        source: "vllm_kv.md §3.2 (remove_skipped_blocks), §3.4, §3.5, §3.6 (align mode: 2 + S + checkpoint blocks)",
        checked_in: "core/src/invariants/planner/table_shape.rs: check (TablesShaped)",
    }
    KvFreeOrder = "KV-FREE-ORDER" {
        statement: "A request's blocks are freed in vLLM's order: tail first (one free_blocks call per group in group order for free, one call over the reversed concatenation for a deferred free); of the blocks reaching ref 0 the unhashed go to the front of the free queue and the hashed to its back, each in freeing order.",
        source: "vllm_kv.md §1.5 (free_blocks), §3.2 (free), §6 (pop_blocks_for_free, deferred frees)",
        checked_in: "core/src/invariants/planner/free_order.rs: check (RequestFreed)",
    }
    KvReset = "KV-RESET" {
        statement: "A prefix-cache reset is refused exactly while some non-null block is in use (held by a request, a deferred free or a copy-on-write retention), and a granted reset leaves no prefix-cache key.",
        source: "vllm_kv.md §1.5 (reset_prefix_cache: num_used != 1 returns False)",
        checked_in: "core/src/invariants/planner/reset.rs: check (PrefixCacheReset)",
    }
    PlWindow = "PL-WINDOW" {
        statement: "No eviction before the window: every attention read (full, MLA, sliding-window, chunked-local) and every recurrent-state read finds the block holding exactly the content the reader expects; a block freed, evicted, overwritten or taken from the wrong depth fails.",
        source: "dynamo_fpm.md §4, §8.2 (sliding-window history evicted before read; recurrent state from the wrong depth)",
        checked_in: "core/src/invariants/planner/content.rs: check (StateRead, AttentionRead, TailForked)",
    }
    PlShadowAtomic = "PL-SHADOW-ATOMIC" {
        statement: "Shadow registration is all-or-nothing across cache groups: a registered shadow has blocks in every group; a failed registration leaves the pool exactly as before.",
        source: "dynamo_fpm.md §3.6; §8.2 (pool exhausted mid-registration)",
        checked_in: "core/src/invariants/planner/shadow.rs: check (ShadowRegistered), failed_registration",
    }
    PlFence = "PL-FENCE" {
        statement: "The deferred-free fence is drained before any pool draw (allocation or shadow tail) and before a prefix-cache reset.",
        source: "dynamo_fpm.md §3.7, §11; §8.2 (frees racing a prefix reset)",
        checked_in: "core/src/invariants/planner/fence.rs: check (PoolDraw, PrefixReset)",
    }
    PlNoReadmit = "PL-NO-READMIT" {
        statement: "A shed request is never admitted again.",
        source: "dynamo_fpm.md §1.12, §3.3; §8.2 (shed chain re-admitted after a soft timeout)",
        checked_in: "core/src/invariants/planner/admission.rs: check (Admitted)",
    }
    PlShadowParked = "PL-SHADOW-PARKED" {
        statement: "No shadow reads KV of a chain that is not parked and drained: the chain is not in the same forward, has no output placeholder in flight, and has computed at least the shadow's context.",
        source: "dynamo_fpm.md §3.4–3.5",
        checked_in: "core/src/invariants/planner/shadow.rs: check (ShadowRead)",
    }
    PlCoverage = "PL-COVERAGE" {
        statement: "Plan coverage implies registration succeeds: a point planned as covered (its tail blocks reserved) never fails shadow registration.",
        source: "dynamo_fpm.md §2.3, §3.1",
        checked_in: "core/src/invariants/planner/shadow.rs: failed_registration",
    }
    PlCleanEnd = "PL-CLEAN-END" {
        statement: "After a sweep every block is at ref 0 and the prefix cache is empty.",
        source: "dynamo_fpm.md §11; §1.8 (DONE clears the prefix cache)",
        checked_in: "core/src/invariants/planner/lifecycle.rs: check (Leftovers)",
    }
    PlDpLockstep = "PL-DP-LOCKSTEP" {
        statement: "All attention-DP ranks inject the same benchmark point in the same step.",
        source: "dynamo_fpm.md §7, §11",
        checked_in: "core/src/invariants/ranks.rs: check_lockstep",
    }
    PlDeadline = "PL-DEADLINE" {
        statement: "No stage starts or continues after the soft deadline: once it passed on a rank, that rank injects no new benchmark point (except its first: the boundary check runs only once a point has a result or a skip, which eager warm-up replicas never get), registers no shadow, and schedules no stage prefill (a prompt chunk of a request that is neither a shadow, nor on synthetic KV, nor admitted by a point's injection: a chain or a native exact-context prefill).",
        source: "dynamo_fpm.md §1.12, §3.3 step 4; §8.2 bug 5",
        checked_in: "core/src/invariants/planner/timing.rs: check (PointInjected, ShadowRegistering, StageScheduled)",
    }
    PlCoordinate = "PL-COORDINATE" {
        statement: "Every timed decode step reads its point's coordinate: at the admission step each of the point's B requests has computed exactly max(1, ctx_i − 1) tokens, ctx_i the balanced contexts of the point's steady KV (or the admitted lengths a recorded plan reports), and at the k-th steady step that plus k; no request of another shape is in the batch.",
        source: "dynamo_fpm.md §1.10 step 2; §8.1 invariants 6, 15 (decode injection one token short, the steady step reads ctx)",
        checked_in: "core/src/invariants/planner/coordinate.rs: check (TimedForward)",
    }
    PlTimedHost = "PL-TIMED-HOST" {
        statement: "No host-side bookkeeping (block registration, shadow registration, zeroing, copies) inside a timed window.",
        source: "dynamo_fpm.md §1.10 (cache_blocks in the untimed window); seed 001 (~160 ms of registration booked in the timed window)",
        checked_in: "core/src/invariants/planner/timing.rs: check (HostOp)",
    }
    PlInflightFree = "PL-INFLIGHT-FREE" {
        statement: "A request retired while its step is in flight (its outputs not yet processed) keeps its blocks referenced behind the fence until they are: it is freed fenced, and the fence releases a deferred free only once no output of its step or an earlier one is in flight.",
        source: "dynamo_fpm.md §3.7 (defer_block_free, sched_step_seq); §8.2 bug 13 (fence bypass)",
        checked_in: "core/src/invariants/planner/fence.rs: check (Freed, FencedFreeReleased)",
    }
    PlCapacity = "PL-CAPACITY" {
        statement: "A planned allocation is never refused: every request the plan schedules fits the pool its capacity arithmetic counted on.",
        source: "dynamo_fpm.md §1.3, §2.2, §7.2; §8.2 bugs 17, 23",
        checked_in: "core/src/invariants/planner/admission.rs: check (AllocationRefused)",
    }
    PlNoPoach = "PL-NO-POACH" {
        statement: "A request the plan admits without expecting a prefix hit (a benchmark request computing its own KV) hits no cached block.",
        source: "dynamo_fpm.md §3.9 (unique salts); §8.2 bug 20 (prefix-cache poaching)",
        checked_in: "core/src/invariants/planner/admission.rs: check (PrefixHit)",
    }
    PlSlots = "PL-SLOTS" {
        statement: "Running requests (parked chains and shadows included) never exceed max_num_seqs.",
        source: "dynamo_fpm.md §3.1 step 4; §8.2 bug 25 (stage slot budget)",
        checked_in: "core/src/invariants/planner/admission.rs: check (Running)",
    }
    PlSteady = "PL-STEADY" {
        statement: "Every decode point timed on its admission step is timed on at least one steady step after it (a point whose injection fell short is skipped untimed: `decode_injection_failed`, dynamo_fpm.md §1.10).",
        source: "dynamo_fpm.md §1.10 (two-step steady decode, PR #12358); §8.2 bug 21",
        checked_in: "core/src/invariants/planner/timing.rs: check (SweepEnded)",
    }
    ArRegime = "AR-REGIME" {
        statement: "A row's kv_seed_regime agrees with its stamp: a kvwarm_real_kv row is labelled real_*, a kvwarm_fake_fallback row fake_*.",
        source: "dynamo_fpm.md §5.2; §8.2 bug 24",
        checked_in: "core/src/invariants/record.rs: check_regime_labels",
    }
    DyRaised = "DY-RAISED" {
        statement: "The recorded planner never raises: a Python exception or assertion escaping the real planner is a finding, reported with what it left behind (referenced blocks, prefix-cache keys, live requests).",
        source: "dynamo_planner_on_cpu.md (\"A failure seen on the first try\"); spec/dynamo.md §5",
        checked_in: "core/src/invariants/planner/recorded.rs: check (PlannerFailed)",
    }
    DyStalled = "DY-STALLED" {
        statement: "The recorded sweep ends within its step budget: a sweep still running after `--max-steps` steps (leaked blocks starving a stage while the virtual clock never reaches the soft timeout) is a finding.",
        source: "spec/dynamo.md §5 (liveness)",
        checked_in: "core/src/invariants/planner/recorded.rs: check (PlannerFailed)",
    }
    DyRunnerTable = "DY-RUNNER-TABLE" {
        statement: "The block ids a recorded step hands the model runner (SchedulerOutput's new and cached request data) are the manager's tables: every non-null entry equal, every table the same length.",
        source: "spec/dynamo.md §4 (what a GPU would read)",
        checked_in: "core/src/invariants/planner/recorded.rs: check (RunnerTables)",
    }
}

impl InvariantId {
    /// The ID spelled `text`, if it is one.
    pub fn parse(text: &str) -> Option<InvariantId> {
        InvariantId::ALL.iter().copied().find(|id| id.as_str() == text)
    }
}

impl fmt::Display for InvariantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, not `write_str`: tables align IDs with width specifiers.
        f.pad(self.as_str())
    }
}

/// Render the catalog as the Markdown of `spec/invariants.md`.
pub fn render_markdown() -> String {
    let mut s = String::from(
        "# Invariant catalog\n\n\
         The table is generated from `core/src/invariants/catalog.rs` (`kvsim invariants --markdown`); a test\n\
         keeps it identical to the code. Each ID has exactly one check, and `tests/tests/invariant_plans.rs`\n\
         (planner invariants) or `tests/tests/model_invariants.rs` (model invariants) shows a bad plan or a model\n\
         mutant tripping it while the fixed version passes. The section after the table, the §8.1 mapping, is\n\
         written by hand.\n\n\
         | ID | Statement | Source | Checked in |\n|---|---|---|---|\n",
    );
    for i in CATALOG {
        s.push_str(&format!(
            "| `{}` | {} | {} | `{}` |\n",
            i.id, i.statement, i.source, i.checked_in
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per ID, in the enum's order: an ID without a statement (or a row without an
    /// ID) cannot exist.
    #[test]
    fn one_row_per_id_in_order() {
        let rows: Vec<InvariantId> = CATALOG.iter().map(|i| i.id).collect();
        assert_eq!(rows, InvariantId::ALL.to_vec());
    }

    #[test]
    fn every_id_parses_back() {
        for &id in InvariantId::ALL {
            assert_eq!(InvariantId::parse(id.as_str()), Some(id));
        }
        assert_eq!(InvariantId::parse("PL-NOPE"), None);
    }
}
