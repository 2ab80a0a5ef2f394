//! The explored system: one tiny `KvCacheManager` plus the scheduler-side request
//! state the kvtrace replayer keeps (`core/src/kvtrace/exec.rs`, kvtrace-format.md §2.2),
//! and the op alphabet over it. Like a stateright model it is a few pure functions
//! (initial state, enabled ops, apply); the search lives in `mod.rs`.

use std::fmt;

use kvsim_core::kv::{
    AllocateArgs, ComputedBlocks, KvCacheManager, KvConfig, ModelMutant, Request, RequestStatus, NULL_BLOCK,
};

/// Request names in emitted traces, by slot.
pub const REQUEST_NAMES: [&str; 3] = ["a", "b", "c"];

/// The token the toy model emits at position `position` of any sequence, so that
/// identical histories continue identically (kvtrace-format.md §5, step 4).
pub fn output_token(position: u64) -> u64 {
    1000 + position
}

/// One letter of the op alphabet (spec/exhaustive.md §2). `req` is a slot index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `add_request` with the slot's fixed prompt (a freed slot may be re-added).
    Add {
        /// The slot.
        req: u8,
    },
    /// `allocate_slots` of `num_new_tokens`. With `lookup` it is an admission:
    /// `get_computed_blocks` first, its hit adopted. `delay` = `delay_cache_blocks`.
    Allocate {
        /// The slot.
        req: u8,
        /// Tokens.
        num_new_tokens: u8,
        /// Admission (a lookup first).
        lookup: bool,
        /// `delay_cache_blocks`.
        delay: bool,
    },
    /// `commit` of the uncommitted allocation, with the toy model's output token
    /// when the sequence becomes fully computed and may still grow.
    Commit {
        /// The slot.
        req: u8,
    },
    /// `cache_blocks` up to the request's `num_computed_tokens`.
    CacheBlocks {
        /// The slot.
        req: u8,
    },
    /// `preempt`.
    Preempt {
        /// The slot.
        req: u8,
    },
    /// `free`.
    Free {
        /// The slot.
        req: u8,
    },
    /// `reset_prefix_cache`.
    ResetPrefixCache,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |r: u8| REQUEST_NAMES[r as usize];
        match *self {
            Op::Add { req } => write!(f, "add {}", name(req)),
            Op::Allocate {
                req,
                num_new_tokens,
                lookup,
                delay,
            } => {
                let lookup = if lookup { "lookup+" } else { "" };
                let delay = if delay { " delay" } else { "" };
                write!(f, "{lookup}allocate {} {num_new_tokens}{delay}", name(req))
            }
            Op::Commit { req } => write!(f, "commit {}", name(req)),
            Op::CacheBlocks { req } => write!(f, "cache_blocks {}", name(req)),
            Op::Preempt { req } => write!(f, "preempt {}", name(req)),
            Op::Free { req } => write!(f, "free {}", name(req)),
            Op::ResetPrefixCache => f.write_str("reset_prefix_cache"),
        }
    }
}

/// Things an op can make happen; the search records the shortest sequence that
/// reaches each (stateright's `sometimes`: never reaching one is vacuous, not green).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// An admission adopted a prefix hit of at least one block.
    PrefixHit,
    /// A hit block had ref 0: `touch` pulled it out of the free queue.
    TouchFreeBlock,
    /// A hit block was held by another request: two tables share it.
    SharedHit,
    /// `get_new_blocks` handed out a block that still carried a hash (lazy eviction).
    EvictCachedBlock,
    /// `allocate_slots` returned `None` (not enough free blocks).
    AllocationRefused,
    /// One prefix-cache key maps to two blocks (no de-duplication).
    DuplicateKey,
    /// `reset_prefix_cache` succeeded and dropped at least one key.
    ResetDroppedKeys,
    /// `reset_prefix_cache` was refused (blocks were held).
    ResetRefused,
    /// A preempted request was admitted again.
    Readmission,
    /// An allocation freed a block that left the sliding window.
    WindowFree,
    /// A lookup's hybrid fixed point re-asked a group at a shorter hit.
    FixedPointReask,
}

impl Event {
    /// Every event.
    pub const ALL: [Event; 11] = [
        Event::PrefixHit,
        Event::TouchFreeBlock,
        Event::SharedHit,
        Event::EvictCachedBlock,
        Event::AllocationRefused,
        Event::DuplicateKey,
        Event::ResetDroppedKeys,
        Event::ResetRefused,
        Event::Readmission,
        Event::WindowFree,
        Event::FixedPointReask,
    ];

    /// Its bit in an event set (`Effects`, `ALL_EVENTS`).
    pub fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// Every event's bit.
pub const ALL_EVENTS: u16 = (1 << Event::ALL.len()) - 1;

/// The events one op caused among those wanted, and the model exception it raised, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effects {
    events: u16,
    /// The events to look for: the search asks only for those it has not reached yet
    /// (it records each event's first, shortest sequence), and some cost a pass over
    /// the pool per op.
    want: u16,
    pub error: Option<String>,
}

impl Effects {
    fn wanting(want: u16) -> Self {
        Effects {
            events: 0,
            want,
            error: None,
        }
    }

    fn wants(&self, e: Event) -> bool {
        self.want & e.bit() != 0
    }

    fn add(&mut self, e: Event, happened: bool) {
        if happened && self.wants(e) {
            self.events |= e.bit();
        }
    }

    /// Any event happened.
    pub fn any(&self) -> bool {
        self.events != 0
    }

    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        Event::ALL.into_iter().filter(|e| self.events & e.bit() != 0)
    }
}

/// A live request: the manager's view and the replayer's uncommitted allocation.
#[derive(Debug)]
pub struct Slot {
    pub req: Request,
    pub uncommitted: Option<u64>,
}

#[derive(Debug)]
pub struct State {
    pub kv: KvCacheManager,
    /// One per request slot; `None` when not live.
    pub slots: Vec<Option<Slot>>,
}

// The search copies a state into one scratch state per transition: a `clone_from` that
// reuses the scratch's storage (kvsim_core's kv/reuse_clone.rs).
kvsim_core::reuse_clone!(Slot { req, uncommitted });
kvsim_core::reuse_clone!(State { kv, slots });

/// The lists an allocation works in, kept by the caller across `apply_with` calls: the
/// search applies an op per transition, and fresh lists were an allocation each.
#[derive(Default)]
pub struct Buffers {
    hit: ComputedBlocks,
    new_blocks: Vec<Vec<u32>>,
}

/// The fixed parameters: config, one prompt per slot, the output budget.
#[derive(Clone, Debug)]
pub struct System {
    pub config: KvConfig,
    pub prompts: Vec<Vec<u64>>,
    pub max_output_tokens: u64,
    pub mutant: Option<ModelMutant>,
}

impl System {
    pub fn init(&self) -> State {
        assert!(self.prompts.len() <= REQUEST_NAMES.len(), "bounds are validated");
        let kv = KvCacheManager::with_mutant(self.config.clone(), self.mutant).expect("bounds build a valid config");
        State {
            kv,
            slots: vec![None; self.prompts.len()],
        }
    }

    /// Every op enabled in `s`, in a fixed order (the search's BFS order).
    pub fn actions(&self, s: &State, out: &mut Vec<Op>) {
        out.clear();
        for (r, slot) in s.slots.iter().enumerate() {
            let req = r as u8;
            let Some(slot) = slot else {
                out.push(Op::Add { req });
                continue;
            };
            let q = &slot.req;
            if slot.uncommitted.is_some() {
                out.push(Op::Commit { req });
            } else if q.status == RequestStatus::Running {
                allocations(out, req, q.num_tokens() - q.num_computed_tokens, false);
            } else {
                // Waiting or preempted, so without blocks: admission, with a lookup or
                // skipping the prefix cache (kvtrace-format.md §5 step 3).
                debug_assert_eq!(q.num_computed_tokens, 0);
                let hit = s.kv.get_computed_blocks(q).num_computed_tokens;
                allocations(out, req, q.num_tokens() - hit, true);
                allocations(out, req, q.num_tokens(), false);
            }
            if q.num_computed_tokens > 0 {
                out.push(Op::CacheBlocks { req });
            }
            if q.status == RequestStatus::Running {
                out.push(Op::Preempt { req });
            }
            out.push(Op::Free { req });
        }
        out.push(Op::ResetPrefixCache);
    }

    /// The output token `commit` appends: one when the commit makes every token
    /// computed and the request has not used up `max_output_tokens`.
    pub fn commit_output(&self, slot: &Slot) -> Option<u64> {
        let q = &slot.req;
        let complete = q.num_computed_tokens + slot.uncommitted? == q.num_tokens();
        let grows = q.num_tokens() - q.num_prompt_tokens < self.max_output_tokens;
        (complete && grows).then(|| output_token(q.num_tokens()))
    }

    /// Apply an enabled op as the kvtrace replayer would (`exec.rs`).
    pub fn apply(&self, s: &mut State, op: Op) -> Effects {
        self.apply_with(s, op, &mut Buffers::default(), ALL_EVENTS)
    }

    /// `apply`, working in `buf`'s lists and looking only for the events in `want`.
    pub fn apply_with(&self, s: &mut State, op: Op, buf: &mut Buffers, want: u16) -> Effects {
        let mut fx = Effects::wanting(want);
        let State { kv, slots } = s;
        match op {
            Op::Add { req } => {
                let r = req as usize;
                debug_assert!(slots[r].is_none());
                let hbs = kv.request_hash_block_size();
                let q = Request::new(u32::from(req), self.prompts[r].clone(), None, hbs);
                slots[r] = Some(Slot {
                    req: q,
                    uncommitted: None,
                });
            }
            Op::Allocate {
                req,
                num_new_tokens,
                lookup,
                delay,
            } => {
                let slot = slots[req as usize].as_mut().expect("enabled ops name live requests");
                allocate(kv, slot, u64::from(num_new_tokens), (lookup, delay), buf, &mut fx);
            }
            Op::Commit { req } => {
                let slot = slots[req as usize].as_mut().expect("enabled ops name live requests");
                let output = self.commit_output(slot);
                let n = slot
                    .uncommitted
                    .take()
                    .expect("commit is enabled only when uncommitted");
                slot.req.num_computed_tokens += n;
                slot.req.append_output(output.as_slice());
            }
            Op::CacheBlocks { req } => {
                let q = &slots[req as usize]
                    .as_ref()
                    .expect("enabled ops name live requests")
                    .req;
                if let Err(e) = kv.cache_blocks(q, q.num_computed_tokens) {
                    fx.error = Some(e.kind.to_string());
                }
            }
            Op::Preempt { req } => {
                let slot = slots[req as usize].as_mut().expect("enabled ops name live requests");
                kv.free(u32::from(req));
                slot.req.num_computed_tokens = 0;
                slot.req.status = RequestStatus::Preempted;
                slot.uncommitted = None;
            }
            Op::Free { req } => {
                kv.free(u32::from(req));
                slots[req as usize] = None;
            }
            Op::ResetPrefixCache => {
                let keys = kv.pool.num_cached_keys();
                let done = kv.reset_prefix_cache();
                fx.add(Event::ResetDroppedKeys, done && keys > 0);
                fx.add(Event::ResetRefused, !done);
            }
        }
        fx.add(
            Event::DuplicateKey,
            fx.wants(Event::DuplicateKey) && has_duplicate_key(kv),
        );
        fx
    }

    /// What `apply(s, op)` would return when it provably leaves `s` as it is and raises
    /// nothing: a `cache_blocks` with no block newly full (most of them: an undelayed
    /// allocation caches its blocks itself) or a refused reset. The search then skips
    /// copying, applying and fingerprinting: the successor is `s`. `None`: apply it.
    pub fn unchanged(&self, s: &State, op: Op, want: u16) -> Option<Effects> {
        let mut fx = Effects::wanting(want);
        match op {
            Op::CacheBlocks { req } => {
                let q = &s.slots[req as usize].as_ref()?.req;
                if !s.kv.caches_nothing(q, q.num_computed_tokens) {
                    return None;
                }
            }
            Op::ResetPrefixCache => {
                if !s.kv.reset_refused() {
                    return None;
                }
                fx.add(Event::ResetRefused, true);
            }
            _ => return None,
        }
        fx.add(
            Event::DuplicateKey,
            fx.wants(Event::DuplicateKey) && has_duplicate_key(&s.kv),
        );
        Some(fx)
    }
}

/// Some prefix-cache key maps to two or more blocks.
fn has_duplicate_key(kv: &KvCacheManager) -> bool {
    let mut duplicate = false;
    kv.pool.for_each_entry(|_, ids| duplicate |= ids.len() > 1);
    duplicate
}

/// `Allocate` ops for 1..=`max_new` new tokens, without and with delayed caching.
fn allocations(out: &mut Vec<Op>, req: u8, max_new: u64, lookup: bool) {
    let max_new = u8::try_from(max_new).expect("bounds keep sequences short");
    for num_new_tokens in 1..=max_new {
        for delay in [false, true] {
            out.push(Op::Allocate {
                req,
                num_new_tokens,
                lookup,
                delay,
            });
        }
    }
}

/// `get_computed_blocks` (when `lookup`) then `allocate_slots`, as the replayer
/// runs them; records hits, touches of free blocks, evictions and window frees.
fn allocate(
    kv: &mut KvCacheManager,
    slot: &mut Slot,
    n: u64,
    (lookup, delay): (bool, bool),
    buf: &mut Buffers,
    fx: &mut Effects,
) {
    let q = &mut slot.req;
    let Buffers { hit, new_blocks } = buf;
    let hit = if lookup {
        kv.get_computed_blocks_into(q, hit);
        Some(&*hit)
    } else {
        None
    };
    if let Some(h) = hit {
        q.shared_prefix_boundary = h.shared_prefix_boundary;
        fx.add(Event::FixedPointReask, h.fixed_point_reasked);
    }
    let hit_tokens = hit.map_or(0, |h| h.num_computed_tokens);
    debug_assert!(q.num_computed_tokens + hit_tokens + n <= q.num_tokens());
    let hit_blocks = || {
        hit.iter()
            .flat_map(|h| h.blocks.iter().flatten())
            .filter(|&&b| b != NULL_BLOCK)
    };
    let touches_free = fx.wants(Event::TouchFreeBlock) && hit_blocks().any(|&b| kv.pool.ref_cnt(b) == 0);
    let shares = fx.wants(Event::SharedHit) && hit_blocks().any(|&b| kv.pool.ref_cnt(b) > 0);
    let hashed_before = if fx.wants(Event::EvictCachedBlock) {
        blocks_where(kv, |b| kv.pool.block_hash(b).is_some())
    } else {
        0
    };
    let window = fx.wants(Event::WindowFree);
    let held_before = if window { held_by(kv, q.id) } else { 0 };
    let args = AllocateArgs {
        num_new_tokens: n,
        hits: hit,
        num_lookahead_tokens: 0,
        delay_cache_blocks: delay,
        full_sequence_must_fit: false,
        reserved_blocks: 0,
    };
    match kv.allocate_slots_into(q, args, new_blocks) {
        Err(e) => fx.error = Some(e.kind.to_string()),
        Ok(false) => fx.add(Event::AllocationRefused, true),
        Ok(true) => {
            fx.add(Event::PrefixHit, hit_tokens > 0);
            fx.add(Event::TouchFreeBlock, touches_free);
            fx.add(Event::SharedHit, shares);
            fx.add(Event::Readmission, q.status == RequestStatus::Preempted);
            let evicted = hashed_before != 0 && new_blocks.iter().flatten().any(|&b| hashed_before & (1 << b) != 0);
            fx.add(Event::EvictCachedBlock, evicted);
            q.num_computed_tokens += hit_tokens;
            q.status = RequestStatus::Running;
            slot.uncommitted = Some(n);
        }
    }
    let left_window = window && held_before & !held_by(kv, q.id) != 0;
    fx.add(Event::WindowFree, left_window);
}

/// The blocks satisfying `pred`, as a bit set (bounds keep ids below 64).
fn blocks_where(kv: &KvCacheManager, pred: impl Fn(u32) -> bool) -> u64 {
    (0..kv.pool.num_blocks())
        .filter(|&b| pred(b))
        .fold(0, |set, b| set | 1 << b)
}

/// The non-null blocks in request `rid`'s tables, as a bit set.
fn held_by(kv: &KvCacheManager, rid: u32) -> u64 {
    let tables = kv.tables(rid).flatten();
    tables.filter(|&&b| b != NULL_BLOCK).fold(0, |set, &b| set | 1 << b)
}
