//! What the engine reports while it applies an op: facts, not verdicts.

use super::coordinate::PointCoordinate;
use crate::kv::GroupKind;
use crate::plan::FailureKind;

/// One fact of an op being applied, with what a planner check needs to judge it.
#[derive(Clone, Copy, Debug)]
pub enum PlannerEvent<'a> {
    /// A host-side bookkeeping op (`what`) applied while point `timed`'s window is open (if any).
    HostOp {
        /// The op.
        what: &'static str,
        /// The point whose window is open.
        timed: Option<u64>,
    },
    /// Point `point` injected; `deadline_passed` and the points recorded before it.
    PointInjected {
        /// The point.
        point: u64,
        /// Whether the soft deadline had passed.
        deadline_passed: bool,
        /// Points recorded before it.
        recorded_before: u64,
    },
    /// Prompt tokens of a stage build scheduled (`admitting`: its first schedule), and whether
    /// the soft deadline had passed for it.
    StageScheduled {
        /// The build's request.
        req: &'a str,
        /// Tokens scheduled.
        tokens: u64,
        /// Its first schedule.
        admitting: bool,
        /// Scheduled after the soft deadline.
        after_deadline: bool,
    },
    /// A shadow registration (a warm-up stage) starting.
    ShadowRegistering {
        /// The shadow.
        shadow: &'a str,
        /// Whether the soft deadline had passed.
        deadline_passed: bool,
    },
    /// A forward inside point `point`'s timed window (`steady` = 0: its admission step, k: its
    /// k-th steady step): each batch request's computed tokens before it, and the point's
    /// coordinate as the plan states it.
    TimedForward {
        /// The point.
        point: u64,
        /// 0 for the admission step, k for the k-th steady step.
        steady: u64,
        /// Each batch request's computed tokens before the forward.
        computed: &'a [u64],
        /// The point's coordinate as the plan states it.
        coordinate: &'a PointCoordinate,
    },
    /// `allocate_slots` ran for `req` with `processed` tokens processed (computed, hits
    /// included, less those in flight): each group's kind, block size and table after it.
    TablesShaped {
        /// The request.
        req: &'a str,
        /// Tokens processed (computed, hits included, less those in flight).
        processed: u64,
        /// Each group's kind, block size and table after the allocation.
        groups: &'a [(GroupKind, u64, &'a [u32])],
    },
    /// `req`'s blocks were freed: its tables before the free (in allocation order; a deferred
    /// free's detached list as one table), whether one `free_blocks` call took them all (a
    /// deferred free) or one call per group did (`free`), the blocks that reached ref 0 with
    /// whether the pool queued each at the back (hashed, caching on), sorted by id, and the
    /// free queue's front (front first) and back (back first) after it.
    RequestFreed {
        /// The request.
        req: &'a str,
        /// Its tables before the free, in allocation order.
        tables: &'a [Vec<u32>],
        /// One `free_blocks` call took them all (a deferred free).
        one_call: bool,
        /// Blocks that reached ref 0, with whether each was queued at the back, by id.
        queued: &'a [(u32, bool)],
        /// The free queue's front after the free, front first.
        queue_front: &'a [u32],
        /// The free queue's back after the free, back first.
        queue_back: &'a [u32],
    },
    /// The sweep ended; the first point measured on its admission step only, if any.
    SweepEnded {
        /// The first point measured on its admission step only.
        admission_only: Option<u64>,
    },
    /// The pool handed out `drawn` blocks for `what` with `fenced` fenced frees pending.
    PoolDraw {
        /// What drew.
        what: &'a str,
        /// Blocks drawn.
        drawn: usize,
        /// Fenced frees pending.
        fenced: usize,
    },
    /// A prefix-cache reset with `fenced` fenced frees pending.
    PrefixReset {
        /// Fenced frees pending.
        fenced: usize,
    },
    /// `req` freed; whether its step was in flight and whether the free was fenced.
    Freed {
        /// The request.
        req: &'a str,
        /// Its step was in flight.
        in_flight: bool,
        /// The free was fenced.
        fenced: bool,
    },
    /// The fence released `req`'s deferred free of step `step`; the oldest step whose outputs
    /// are still in flight, if any.
    FencedFreeReleased {
        /// The request.
        req: &'a str,
        /// The step of the deferred free.
        step: u64,
        /// The oldest step whose outputs are still in flight.
        oldest_in_flight: Option<u64>,
    },
    /// `reset_prefix_cache` returned `done`, with `held_before` non-null blocks in use before
    /// it and `keys_after` prefix-cache keys left after it.
    PrefixCacheReset {
        /// Whether the reset was granted.
        done: bool,
        /// Non-null blocks in use before it.
        held_before: usize,
        /// Prefix-cache keys left after it.
        keys_after: usize,
    },
    /// `req` admitted; whether it was shed before.
    Admitted {
        /// The request.
        req: &'a str,
        /// It was shed before.
        was_shed: bool,
    },
    /// `req` found `hit_tokens` cached tokens; whether the plan expected a hit at all.
    PrefixHit {
        /// The request.
        req: &'a str,
        /// Cached tokens found.
        hit_tokens: u64,
        /// Whether the plan expected a hit.
        expects_hit: bool,
    },
    /// An allocation of `tokens` for `req` refused with `free` free blocks; the plan counted on it.
    AllocationRefused {
        /// The request.
        req: &'a str,
        /// Tokens asked for.
        tokens: u64,
        /// Free blocks.
        free: usize,
    },
    /// `running` requests hold slots out of `slots` (`max_num_seqs`).
    Running {
        /// Running requests.
        running: usize,
        /// Request slots.
        slots: usize,
    },
    /// `req` read group `group`'s recurrent state at `depth` from `block`; `holds` whether the
    /// block held the expected state.
    StateRead {
        /// The request.
        req: &'a str,
        /// The state group.
        group: usize,
        /// The state's depth.
        depth: u64,
        /// The block read.
        block: u32,
        /// Whether it held the expected state.
        holds: bool,
    },
    /// `req` read `block` (table index `index`) of group `group` (kind `kind`) for positions
    /// below `below`; `holds` whether it held the expected content.
    AttentionRead {
        /// The request.
        req: &'a str,
        /// The block read.
        block: u32,
        /// Its table index.
        index: usize,
        /// The group.
        group: usize,
        /// The group's kind.
        kind: &'static str,
        /// Positions read are below this.
        below: u64,
        /// Whether it held the expected content.
        holds: bool,
    },
    /// Shadow `shadow` forks group `group`'s tail at `ctx`; whether a source is the null block.
    TailForked {
        /// The shadow.
        shadow: &'a str,
        /// The group.
        group: usize,
        /// The context it forks at.
        ctx: u64,
        /// Whether a source is the null block.
        from_null: bool,
    },
    /// Shadow `shadow` reads chain `chain`: whether the chain is in the same forward, its
    /// output placeholders, and its computed tokens against the shadow's context.
    ShadowRead {
        /// The shadow.
        shadow: &'a str,
        /// Its chain.
        chain: &'a str,
        /// The chain is in the same forward.
        busy: bool,
        /// The chain's output placeholders.
        placeholders: u64,
        /// The chain's computed tokens.
        computed: u64,
        /// The shadow's context.
        ctx: u64,
    },
    /// Shadow `shadow` registered with tables in `have` of `groups` cache groups.
    ShadowRegistered {
        /// The shadow.
        shadow: &'a str,
        /// Groups it has tables in.
        have: usize,
        /// Cache groups.
        groups: usize,
        /// Whether it registered in every group.
        complete: bool,
    },
    /// A shadow registration failed: whether its point is covered, whether the planner saw an
    /// injected failure coming, whether a fault failed it, and whether it left blocks behind.
    RegistrationFailed {
        /// The shadow.
        shadow: &'a str,
        /// Its point is covered.
        covered: bool,
        /// The planner saw the injected failure coming.
        anticipated: bool,
        /// A fault failed it.
        injected: bool,
        /// It left blocks behind.
        left_behind: bool,
        /// Cache groups.
        groups: usize,
    },
    /// At `when` (the sweep's end, an abort): blocks still referenced and prefix-cache keys left.
    Leftovers {
        /// When (`end of sweep`, an abort).
        when: &'a str,
        /// Blocks still referenced.
        held: &'a [u32],
        /// Prefix-cache keys left.
        cached_keys: usize,
    },
    /// A recorded step handed the model runner other block ids than the manager holds.
    RunnerTables {
        /// What differs, if anything.
        mismatch: Option<&'a str>,
    },
    /// The recorded planner raised or stalled (`what` happened), leaving `left`.
    PlannerFailed {
        /// Raised or stalled.
        kind: FailureKind,
        /// What happened.
        what: &'a str,
        /// The error.
        error: &'a str,
        /// What it left.
        left: &'a str,
    },
}
