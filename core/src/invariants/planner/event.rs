//! What the engine reports while it applies an op: facts, not verdicts.

use super::coordinate::PointCoordinate;
use crate::kv::GroupKind;
use crate::plan::FailureKind;

/// One fact of an op being applied, with what a planner check needs to judge it.
#[derive(Clone, Copy, Debug)]
pub enum PlannerEvent<'a> {
    /// A host-side bookkeeping op (`what`) applied while point `timed`'s window is open (if any).
    HostOp { what: &'static str, timed: Option<u64> },
    /// Point `point` injected; `deadline_passed` and the points recorded before it.
    PointInjected {
        point: u64,
        deadline_passed: bool,
        recorded_before: u64,
    },
    /// Prompt tokens of a stage build scheduled (`admitting`: its first schedule), and whether
    /// the soft deadline had passed for it.
    StageScheduled {
        req: &'a str,
        tokens: u64,
        admitting: bool,
        after_deadline: bool,
    },
    /// A shadow registration (a warm-up stage) starting.
    ShadowRegistering { shadow: &'a str, deadline_passed: bool },
    /// A forward inside point `point`'s timed window (`steady` = 0: its admission step, k: its
    /// k-th steady step): each batch request's computed tokens before it, and the point's
    /// coordinate as the plan states it.
    TimedForward {
        point: u64,
        steady: u64,
        computed: &'a [u64],
        coordinate: &'a PointCoordinate,
    },
    /// `allocate_slots` ran for `req` with `processed` tokens processed (computed, hits
    /// included, less those in flight): each group's kind, block size and table after it.
    TablesShaped {
        req: &'a str,
        processed: u64,
        groups: &'a [(GroupKind, u64, &'a [u32])],
    },
    /// `req`'s blocks were freed: its tables before the free (in allocation order; a deferred
    /// free's detached list as one table), whether one `free_blocks` call took them all (a
    /// deferred free) or one call per group did (`free`), the blocks that reached ref 0 with
    /// whether the pool queued each at the back (hashed, caching on), sorted by id, and the
    /// free queue's front (front first) and back (back first) after it.
    RequestFreed {
        req: &'a str,
        tables: &'a [Vec<u32>],
        one_call: bool,
        queued: &'a [(u32, bool)],
        queue_front: &'a [u32],
        queue_back: &'a [u32],
    },
    /// The sweep ended; the first point measured on its admission step only, if any.
    SweepEnded { admission_only: Option<u64> },
    /// The pool handed out `drawn` blocks for `what` with `fenced` fenced frees pending.
    PoolDraw { what: &'a str, drawn: usize, fenced: usize },
    /// A prefix-cache reset with `fenced` fenced frees pending.
    PrefixReset { fenced: usize },
    /// `req` freed; whether its step was in flight and whether the free was fenced.
    Freed {
        req: &'a str,
        in_flight: bool,
        fenced: bool,
    },
    /// The fence released `req`'s deferred free of step `step`; the oldest step whose outputs
    /// are still in flight, if any.
    FencedFreeReleased {
        req: &'a str,
        step: u64,
        oldest_in_flight: Option<u64>,
    },
    /// `reset_prefix_cache` returned `done`, with `held_before` non-null blocks in use before
    /// it and `keys_after` prefix-cache keys left after it.
    PrefixCacheReset {
        done: bool,
        held_before: usize,
        keys_after: usize,
    },
    /// `req` admitted; whether it was shed before.
    Admitted { req: &'a str, was_shed: bool },
    /// `req` found `hit_tokens` cached tokens; whether the plan expected a hit at all.
    PrefixHit {
        req: &'a str,
        hit_tokens: u64,
        expects_hit: bool,
    },
    /// An allocation of `tokens` for `req` refused with `free` free blocks; the plan counted on it.
    AllocationRefused { req: &'a str, tokens: u64, free: usize },
    /// `running` requests hold slots out of `slots` (`max_num_seqs`).
    Running { running: usize, slots: usize },
    /// `req` read group `group`'s recurrent state at `depth` from `block`; `holds` whether the
    /// block held the expected state.
    StateRead {
        req: &'a str,
        group: usize,
        depth: u64,
        block: u32,
        holds: bool,
    },
    /// `req` read `block` (table index `index`) of group `group` (kind `kind`) for positions
    /// below `below`; `holds` whether it held the expected content.
    AttentionRead {
        req: &'a str,
        block: u32,
        index: usize,
        group: usize,
        kind: &'static str,
        below: u64,
        holds: bool,
    },
    /// Shadow `shadow` forks group `group`'s tail at `ctx`; whether a source is the null block.
    TailForked {
        shadow: &'a str,
        group: usize,
        ctx: u64,
        from_null: bool,
    },
    /// Shadow `shadow` reads chain `chain`: whether the chain is in the same forward, its
    /// output placeholders, and its computed tokens against the shadow's context.
    ShadowRead {
        shadow: &'a str,
        chain: &'a str,
        busy: bool,
        placeholders: u64,
        computed: u64,
        ctx: u64,
    },
    /// Shadow `shadow` registered with tables in `have` of `groups` cache groups.
    ShadowRegistered {
        shadow: &'a str,
        have: usize,
        groups: usize,
        complete: bool,
    },
    /// A shadow registration failed: whether its point is covered, whether the planner saw an
    /// injected failure coming, whether a fault failed it, and whether it left blocks behind.
    RegistrationFailed {
        shadow: &'a str,
        covered: bool,
        anticipated: bool,
        injected: bool,
        left_behind: bool,
        groups: usize,
    },
    /// At `when` (the sweep's end, an abort): blocks still referenced and prefix-cache keys left.
    Leftovers {
        when: &'a str,
        held: &'a [u32],
        cached_keys: usize,
    },
    /// A recorded step handed the model runner other block ids than the manager holds.
    RunnerTables { mismatch: Option<&'a str> },
    /// The recorded planner raised or stalled (`what` happened), leaving `left`.
    PlannerFailed {
        kind: FailureKind,
        what: &'a str,
        error: &'a str,
        left: &'a str,
    },
}
