//! The replayer: scheduler-side request state of kvtrace-format.md §2.2 and one
//! compiled op at a time applied to the model (§3).

use super::compile::{Alloc, Checked, Commit, Op, OpData, Span, Str};
use super::live::{Live, Slots, Unread};
use crate::kv::{AllocateArgs, ComputedBlocks, KvCacheManager, KvConfig, PoolError, ReqId, RequestStatus};

pub enum OpError {
    Invalid(String),
    Model(PoolError),
}

impl From<String> for OpError {
    fn from(s: String) -> Self {
        OpError::Invalid(s)
    }
}

impl From<&str> for OpError {
    fn from(s: &str) -> Self {
        OpError::Invalid(s.to_string())
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        OpError::Model(e)
    }
}

/// What a successful op returned; the observer renders it (`Lookup` from
/// `pending()`, `Alloc` from `new_blocks`).
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Null,
    Bool(bool),
    Lookup,
    Alloc,
}

pub struct Replayer {
    kv: KvCacheManager,
    /// Live requests by interned id.
    slots: Slots,
    /// Live ids sorted by name (the observation's `requests` order).
    order: Vec<u32>,
    /// A quiet replay (no observation): no `order` is kept, and requests are hashed
    /// only once the model first reads them (`Request::renew_unhashed`).
    quiet: bool,
    /// The live set changed since the last observation.
    live_changed: bool,
    /// Everything must be rendered afresh (a new replay, or the model was handed out).
    stale: bool,
    next_rid: u32,
    /// The request whose lookup (`hit`) only the very next op may consume.
    pending: Option<u32>,
    /// The last lookup's result, kept after it is consumed: the next lookup fills its
    /// block lists instead of allocating new ones, and nothing is moved.
    hit: ComputedBlocks,
    /// What `hit` answers (`LookupKey`): a lookup that asks it again, the cache unchanged,
    /// finds `hit` already filled. `None` when `hit` answers nothing known.
    hit_key: Option<LookupKey>,
    /// The last successful allocation's new blocks per group.
    pub new_blocks: Vec<Vec<u32>>,
    /// Lookups whose hybrid fixed point re-asked a group at a shorter length (coverage).
    pub fixed_point_reasks: u64,
}

/// What a lookup's result depends on: the request (its id is never reused within a
/// replay), how many block hashes it has and its token count (its hashes only grow), and
/// the pool's hash version (bumped on every change to the cached keys and their blocks).
type LookupKey = (ReqId, usize, u64, u64);

/// The live request `id`, or the op's `InvalidOp` message. A free function so
/// that it borrows only the slots, not the model. Inlined: every op looks one up.
#[inline(always)]
fn live_mut<'a>(slots: &'a mut Slots, data: &OpData, id: u32) -> Result<&'a mut Live, String> {
    slots.get_mut(id).ok_or_else(|| unknown_id(data, id))
}

/// The `InvalidOp` message of an op naming a request that is not live. Cold: only
/// failing ops build it.
#[cold]
#[inline(never)]
fn unknown_id(data: &OpData, id: u32) -> String {
    format!("unknown request id {:?}", data.ids.name(id))
}

/// A compiled field check, failing with its stored `InvalidOp` message.
fn checked<T>(data: &OpData, c: Checked<T>) -> Result<T, OpError> {
    c.map_err(|e| OpError::Invalid(data.str(e).to_string()))
}

/// `checked`, by reference: the fields stay where the op is, not repacked into registers.
#[inline(always)]
fn checked_ref<'a, T>(data: &OpData, c: &'a Checked<T>) -> Result<&'a T, OpError> {
    c.as_ref().map_err(|&e| OpError::Invalid(data.str(e).to_string()))
}

impl Replayer {
    pub fn new(kv: KvCacheManager) -> Self {
        Replayer {
            kv,
            slots: Slots::default(),
            order: Vec::new(),
            quiet: false,
            live_changed: true,
            stale: true,
            next_rid: 0,
            pending: None,
            hit: ComputedBlocks::default(),
            hit_key: None,
            new_blocks: Vec::new(),
            fixed_point_reasks: 0,
        }
    }

    /// Become `Replayer::new(KvCacheManager::new(cfg.clone())?)` for a config already
    /// validated, reusing this replayer's storage (the model's, and the freed requests'
    /// token and hash buffers).
    pub fn reset_to(&mut self, cfg: &KvConfig) {
        self.kv.reset_to_valid(cfg);
        self.slots.reset();
        self.order.clear();
        self.quiet = false;
        self.live_changed = true;
        self.stale = true;
        self.next_rid = 0;
        self.pending = None;
        // A new model restarts the pool's hash version.
        self.hit_key = None;
        self.new_blocks.clear();
        self.fixed_point_reasks = 0;
    }

    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    /// Mutable access from outside the replayer: nothing about it can be assumed.
    pub fn kv_mut(&mut self) -> &mut KvCacheManager {
        self.stale = true;
        self.hit_key = None;
        &mut self.kv
    }

    /// (everything may have changed, the live set changed) since the last call.
    pub fn take_changes(&mut self) -> (bool, bool) {
        (std::mem::take(&mut self.stale), std::mem::take(&mut self.live_changed))
    }

    pub fn get(&self, id: u32) -> Option<&Live> {
        self.slots.get(id)
    }

    /// Until the next `reset_to`, replay quietly: keep no name order of the live ids
    /// (`live_in_order` is then unavailable; placing every new request cost a binary
    /// search and a shift on each add and free) and hash each request's prompt only
    /// when the model first reads the request (a trace that ends with requests still
    /// waiting never hashes those). Nothing observable depends on either.
    pub(super) fn quiet(&mut self) {
        self.quiet = true;
        self.order.clear();
    }

    /// Live requests in name order: (id, slot, request).
    pub fn live_in_order(&self) -> impl Iterator<Item = (u32, u32, &Live)> {
        assert!(!self.quiet, "a quiet replay keeps no name order");
        self.order.iter().map(|&k| {
            let slot = self.slots.slot(k).expect("ordered ids are live");
            (k, slot, self.slots.get(k).expect("ordered ids are live"))
        })
    }

    /// The lookup the next op may consume: its request and result.
    pub fn pending(&self) -> Option<(u32, &ComputedBlocks)> {
        self.pending.map(|id| (id, &self.hit))
    }

    /// Apply one op; every op consumes the pending lookup.
    pub fn apply(&mut self, data: &OpData, op: Op) -> Result<Outcome, OpError> {
        self.apply_inline(data, &op)
    }

    /// `apply`, inlined into a caller's loop over ops (the quiet replay): its
    /// register saves are then paid once per replay instead of once per op. The op
    /// by reference: each arm loads only the fields it reads.
    #[inline(always)]
    pub(super) fn apply_inline(&mut self, data: &OpData, op: &Op) -> Result<Outcome, OpError> {
        let lookup = self.pending.take();
        self.apply_with(data, op, lookup)
    }

    /// `apply`, with the request whose lookup (`hit`) it consumes.
    #[inline(always)]
    fn apply_with(&mut self, data: &OpData, op: &Op, lookup: Option<u32>) -> Result<Outcome, OpError> {
        match *op {
            Op::NotObject => Err("an op must be an object".into()),
            Op::MissingName => Err("missing op name".into()),
            Op::Unknown(name) => Err(format!("unknown op {:?}", data.str(name)).into()),
            Op::AddRequest { id, prompt, salt } => self.add_request(data, checked(data, id)?, prompt, salt),
            Op::NewStep => {
                self.kv.new_step_starts();
                Ok(Outcome::Null)
            }
            Op::GetComputedBlocks(id) => self.get_computed_blocks(data, checked(data, id)?),
            Op::AllocateSlots(ref a) => self.allocate_slots(data, checked_ref(data, a)?, lookup),
            Op::Commit(ref c) => self.commit(data, checked_ref(data, c)?),
            Op::CacheBlocks(c) => self.cache_blocks(data, checked(data, c)?),
            Op::Preempt(id) => self.preempt(data, checked(data, id)?),
            Op::Free(id) => {
                let id = checked(data, id)?;
                // The slot is looked up once, to read the request's id and retire it.
                let Some(rid) = self.slots.remove(id) else {
                    return Err(unknown_id(data, id).into());
                };
                self.kv.free(rid);
                if !self.quiet {
                    let at = self.order_position(data, id);
                    self.order.remove(at);
                }
                self.live_changed = true;
                Ok(Outcome::Null)
            }
            Op::ResetPrefixCache => Ok(Outcome::Bool(self.kv.reset_prefix_cache())),
        }
    }

    fn add_request(
        &mut self,
        data: &OpData,
        id: u32,
        prompt: Checked<Span>,
        salt: Checked<Option<Str>>,
    ) -> Result<Outcome, OpError> {
        if self.get(id).is_some() {
            return Err(format!("request id {:?} is already live", data.ids.name(id)).into());
        }
        let span = checked(data, prompt)?;
        let prompt = data.tokens(span);
        let max = self.kv().config.max_model_len;
        if prompt.is_empty() || prompt.len() as u64 >= max {
            return Err(format!("prompt length {} must be in [1, max_model_len={max})", prompt.len()).into());
        }
        let salt_str = checked(data, salt)?;
        let rid = self.next_rid;
        self.next_rid += 1;
        let hbs = self.kv.request_hash_block_size();
        // Room for outputs up to max_model_len (bounded), so commits do not regrow it.
        let room = (max as usize).min(prompt.len() + 1024);
        if self.quiet {
            let unread = Unread {
                prompt: span,
                salt: salt_str,
                room,
                hash_block_size: hbs,
            };
            self.slots.insert_unread(id, rid, unread);
        } else {
            let salt = salt_str.map(|s| data.str(s));
            self.slots.insert(id, |req| req.renew(rid, prompt, room, salt, hbs));
        }
        if !self.quiet {
            let at = self.order_position(data, id);
            self.order.insert(at, id);
        }
        self.live_changed = true;
        Ok(Outcome::Null)
    }

    /// Where `id` is (or goes) in the name-ordered live ids: names are unique, so
    /// this is its own place once it is live.
    fn order_position(&self, data: &OpData, id: u32) -> usize {
        match data.ids.ranks() {
            // A compiled trace ranks its ids by name up front.
            Some(rank) => {
                let mine = rank[id as usize];
                self.order.partition_point(|&k| rank[k as usize] < mine)
            }
            // Compiled op by op (ids still being interned): compare the names.
            None => {
                let name = data.ids.name(id);
                self.order.partition_point(|&k| data.ids.name(k) < name)
            }
        }
    }

    fn get_computed_blocks(&mut self, data: &OpData, id: u32) -> Result<Outcome, OpError> {
        let l = live_mut(&mut self.slots, data, id)?.read(data);
        if l.req.status == RequestStatus::Running || l.req.num_computed_tokens != 0 {
            return Err("get_computed_blocks needs a waiting or preempted request without blocks".into());
        }
        l.req.hash_pending();
        let hit = &mut self.hit;
        // A waiting request asked again after a refused admission, nothing cached or
        // evicted since: the last answer stands (`hit` is never changed by its readers).
        let key = (
            l.req.id,
            l.req.block_hashes.len(),
            l.req.num_tokens(),
            self.kv.pool.hash_version(),
        );
        if self.hit_key != Some(key) || !crate::kv::shortcuts::on() {
            self.kv.get_computed_blocks_into(&l.req, hit);
            self.hit_key = Some(key);
        }
        l.req.shared_prefix_boundary = hit.shared_prefix_boundary;
        self.fixed_point_reasks += u64::from(hit.fixed_point_reasked);
        self.pending = Some(id);
        Ok(Outcome::Lookup)
    }

    // Inlined into `apply`, like `commit`: the two ops of nearly every step then pay
    // one call's register saves, not two.
    #[inline(always)]
    fn allocate_slots(&mut self, data: &OpData, a: &Alloc, lookup: Option<u32>) -> Result<Outcome, OpError> {
        let l = live_mut(&mut self.slots, data, a.id)?;
        if l.uncommitted.is_some() {
            return Err("the request's last allocation is not committed yet".into());
        }
        let hits = match lookup {
            Some(lid) if a.use_computed && lid == a.id => Some(&self.hit),
            _ => None,
        };
        let hit_tokens = hits.map_or(0, |h| h.num_computed_tokens);
        if l.req
            .num_computed_tokens
            .saturating_add(hit_tokens)
            .saturating_add(a.num_new_tokens)
            > l.req.num_tokens()
        {
            // An unread request has no tokens yet (`Slots::insert_unread`): read, then ask again.
            if !l.is_read() {
                return self.allocate_slots_unread(data, a, lookup);
            }
            return Err("allocation beyond the request's known tokens".into());
        }
        l.req.hash_pending();
        let args = AllocateArgs {
            num_new_tokens: a.num_new_tokens,
            hits,
            num_lookahead_tokens: a.num_lookahead_tokens,
            delay_cache_blocks: a.delay_cache_blocks,
            full_sequence_must_fit: a.full_sequence_must_fit,
            reserved_blocks: 0,
        };
        if !self.kv.allocate_slots_into(&l.req, args, &mut self.new_blocks)? {
            return Ok(Outcome::Null);
        }
        l.req.num_computed_tokens += hit_tokens;
        l.req.status = RequestStatus::Running;
        l.uncommitted = Some(a.num_new_tokens);
        Ok(Outcome::Alloc)
    }

    /// `allocate_slots` of a request no op has read yet: read it, then allocate.
    #[inline(never)]
    fn allocate_slots_unread(&mut self, data: &OpData, a: &Alloc, lookup: Option<u32>) -> Result<Outcome, OpError> {
        live_mut(&mut self.slots, data, a.id)?.read(data);
        self.allocate_slots(data, a, lookup)
    }

    // Rare ops, out of line: the replay loop keeps only the frequent ones.
    #[inline(never)]
    fn cache_blocks(&mut self, data: &OpData, (id, n): (u32, u64)) -> Result<Outcome, OpError> {
        let l = live_mut(&mut self.slots, data, id)?.read(data);
        if n > l.req.num_computed_tokens {
            let have = l.req.num_computed_tokens;
            return Err(format!("num_tokens {n} exceeds num_computed_tokens {have}").into());
        }
        l.req.hash_pending();
        self.kv.cache_blocks(&l.req, n)?;
        Ok(Outcome::Null)
    }

    #[inline(never)]
    fn preempt(&mut self, data: &OpData, id: u32) -> Result<Outcome, OpError> {
        let l = live_mut(&mut self.slots, data, id)?.read(data);
        if l.req.status != RequestStatus::Running {
            return Err("preempt needs a running request".into());
        }
        self.kv.free(l.req.id);
        l.req.num_computed_tokens = 0;
        l.req.status = RequestStatus::Preempted;
        l.uncommitted = None;
        Ok(Outcome::Null)
    }

    #[inline(always)]
    fn commit(&mut self, data: &OpData, c: &Commit) -> Result<Outcome, OpError> {
        let outputs = data.tokens(c.output_tokens);
        let max = self.kv().config.max_model_len;
        let n = c.num_tokens;
        let l = live_mut(&mut self.slots, data, c.id)?;
        if l.req.status != RequestStatus::Running || l.uncommitted.is_none() {
            return Err("commit needs a running request with an uncommitted allocation".into());
        }
        if l.uncommitted != Some(n) {
            return Err(format!("num_tokens {n} differs from the allocation's {:?}", l.uncommitted).into());
        }
        if !outputs.is_empty() {
            if l.req.num_computed_tokens.saturating_add(n) != l.req.num_tokens() {
                return Err("output tokens before every known token is computed".into());
            }
            if l.req.num_tokens() + outputs.len() as u64 > max {
                return Err("output tokens beyond max_model_len".into());
            }
        }
        l.req.num_computed_tokens += n;
        l.req.append_output(outputs);
        l.uncommitted = None;
        Ok(Outcome::Null)
    }
}
