//! vLLM's `KVCacheManager` API (vllm_kv.md §5) over one shared pool.

use super::block_pool::{BlockPool, PoolError};
use super::changes::{self, ModelChanges};
use super::coordinator::Coordinator;
use super::manager::{empty_lists, GroupManager, GroupReq, ReqStates, SteadyMemo, TableLog};
use super::mutant::ModelMutant;
use super::request::{ReqId, Request, RequestStatus};
use super::spec::{ConfigError, CoordinatorKind, KvConfig};

/// The result of `get_computed_blocks`: per-group hit blocks and token counts.
#[derive(Clone, Debug, Default)]
pub struct ComputedBlocks {
    /// Hit blocks per group.
    pub blocks: Vec<Vec<u32>>,
    /// Tokens hit.
    pub num_computed_tokens: u64,
    /// The longest single-group hit beyond them.
    pub shared_prefix_boundary: u64,
    /// The hybrid fixed point re-asked a group at a shorter length (`CacheHit`); never
    /// observed, a coverage fact only.
    pub fixed_point_reasked: bool,
    /// Lists a hybrid lookup works in, kept for their storage (not part of the result).
    scratch: Vec<Vec<u32>>,
}

impl PartialEq for ComputedBlocks {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.blocks,
            self.num_computed_tokens,
            self.shared_prefix_boundary,
            self.fixed_point_reasked,
        ) == (
            &other.blocks,
            other.num_computed_tokens,
            other.shared_prefix_boundary,
            other.fixed_point_reasked,
        )
    }
}

impl Eq for ComputedBlocks {}

impl ComputedBlocks {
    /// vLLM returns its empty singleton when every group is empty; only a
    /// non-singleton hit list runs `allocate_new_computed_blocks` (§5.1).
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(Vec::is_empty)
    }
}

/// Whether some group is Mamba "align" (its needs follow other rules).
fn any_mamba_align(groups: &[GroupManager]) -> bool {
    groups.iter().any(GroupManager::is_mamba_align)
}

/// Arguments of `allocate_slots` beyond the request (core subset of §5.3).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocateArgs<'a> {
    /// Tokens to allocate slots for.
    pub num_new_tokens: u64,
    /// The pending lookup to adopt (blocks and token count), if any.
    pub hits: Option<&'a ComputedBlocks>,
    /// Lookahead slots.
    pub num_lookahead_tokens: u64,
    /// Register the blocks in the prefix cache later.
    pub delay_cache_blocks: bool,
    /// The whole sequence must fit (admission).
    pub full_sequence_must_fit: bool,
    /// Blocks to leave free.
    pub reserved_blocks: u64,
}

/// vLLM 0.33's `KVCacheManager` over one shared pool (vllm_kv.md §5).
#[derive(Debug)]
pub struct KvCacheManager {
    /// The validated configuration.
    pub config: KvConfig,
    /// The block pool.
    pub pool: BlockPool,
    /// One manager per cache group.
    pub groups: Vec<GroupManager>,
    /// The coordinator.
    pub coordinator: Coordinator,
    /// A deliberate slip (issue 19), off in every real run.
    slip: Option<super::ManagerSlip>,
    /// Group managers a `reset_to` with fewer groups set aside, kept for their storage
    /// (tables, maps) so that a later reset with more groups does not regrow it.
    spare_groups: Vec<GroupManager>,
    /// Some group is Mamba "align" (fixed by the config; every allocation asks).
    mamba_align: bool,
    /// Every request's entries in every group's dicts (tables, cached counts).
    reqs: ReqStates,
}

reuse_clone!(KvCacheManager {
    config,
    pool,
    groups,
    coordinator,
    slip,
    spare_groups,
    mamba_align,
    reqs
});

impl KvCacheManager {
    /// A manager of `config`; `Err` when vLLM would refuse it.
    pub fn new(config: KvConfig) -> Result<Self, ConfigError> {
        Self::with_mutant(config, None)
    }

    /// A manager whose pool carries a deliberate bug (for proving checks can fail).
    pub fn with_mutant(config: KvConfig, mutant: Option<ModelMutant>) -> Result<Self, ConfigError> {
        config.validate()?;
        let kind = config.coordinator();
        let coordinator = Coordinator::new(
            kind,
            &config.groups,
            config.scheduler_block_size(),
            config.hash_block_size(),
        );
        let align = coordinator.cache_hit_alignment(&config.groups);
        let groups: Vec<GroupManager> = config
            .groups
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                let mut m = GroupManager::new(i as u32, g, config.enable_caching, config.admission_cap(g));
                m.cache_hit_alignment = align;
                m
            })
            .collect();
        let pool = BlockPool::with_mutant(config.num_blocks, config.enable_caching, mutant);
        let mamba_align = any_mamba_align(&groups);
        let mut reqs = ReqStates::default();
        reqs.reset(groups.len());
        Ok(KvCacheManager {
            pool,
            groups,
            coordinator,
            config,
            slip: None,
            spare_groups: Vec::new(),
            mamba_align,
            reqs,
        })
    }

    /// Become `KvCacheManager::new(config.clone())`, reusing this manager's storage
    /// (pool columns, tables, maps): a benchmark replaying many traces builds each
    /// trace's model without allocating. `Err` (self unchanged) when vLLM would refuse it.
    pub fn reset_to(&mut self, config: &KvConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.reset_to_valid(config);
        Ok(())
    }

    /// `reset_to` a config already validated (a compiled trace's, checked when it was read).
    pub fn reset_to_valid(&mut self, config: &KvConfig) {
        debug_assert!(config.validate().is_ok());
        let kind = config.coordinator();
        self.coordinator = Coordinator::new(
            kind,
            &config.groups,
            config.scheduler_block_size(),
            config.hash_block_size(),
        );
        let align = self.coordinator.cache_hit_alignment(&config.groups);
        while self.groups.len() > config.groups.len() {
            let m = self.groups.pop().expect("longer than the config's groups");
            self.spare_groups.push(m);
        }
        for (i, &g) in config.groups.iter().enumerate() {
            let cap = config.admission_cap(g);
            if i == self.groups.len() {
                if let Some(m) = self.spare_groups.pop() {
                    self.groups.push(m);
                }
            }
            match self.groups.get_mut(i) {
                Some(m) => m.reset_to(i as u32, g, config.enable_caching, cap),
                None => self
                    .groups
                    .push(GroupManager::new(i as u32, g, config.enable_caching, cap)),
            }
            self.groups[i].cache_hit_alignment = align;
        }
        self.pool.reset_to(config.num_blocks, config.enable_caching, None);
        self.reqs.reset(config.groups.len());
        self.config.clone_from(config);
        self.slip = None;
        self.mamba_align = any_mamba_align(&self.groups);
    }

    /// The coordinator's kind.
    pub fn coordinator_kind(&self) -> CoordinatorKind {
        self.coordinator.kind
    }

    /// The scheduler block size.
    pub fn scheduler_block_size(&self) -> u64 {
        self.coordinator.scheduler_block_size
    }

    /// The hash block size.
    pub fn hash_block_size(&self) -> u64 {
        self.coordinator.hash_block_size
    }

    /// The hash granularity a new request must use, or `None` when caching is off.
    pub fn request_hash_block_size(&self) -> Option<u64> {
        self.config.enable_caching.then(|| self.hash_block_size())
    }

    /// Used blocks as a fraction of the pool.
    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// `new_step_starts`: clears Mamba's "cached this step" keys.
    pub fn new_step_starts(&mut self) {
        self.groups.iter_mut().for_each(GroupManager::new_step_starts);
    }

    /// `get_computed_blocks`: the longest prefix hit; no ref count changes.
    pub fn get_computed_blocks(&self, req: &Request) -> ComputedBlocks {
        let mut hit = ComputedBlocks::default();
        self.get_computed_blocks_into(req, &mut hit);
        hit
    }

    /// `get_computed_blocks` into `hit`, whose block lists are reused (a replay
    /// recycles the last lookup's instead of allocating new ones).
    pub fn get_computed_blocks_into(&self, req: &Request, hit: &mut ComputedBlocks) {
        if !self.config.enable_caching || req.skip_reading_prefix_cache {
            empty_lists(&mut hit.blocks, self.groups.len());
            (
                hit.num_computed_tokens,
                hit.shared_prefix_boundary,
                hit.fixed_point_reasked,
            ) = (0, 0, false);
            return;
        }
        // At least the last token is always recomputed to get logits.
        let max_len = req.num_tokens().saturating_sub(1);
        let found = self.coordinator.find_longest_cache_hit(
            &self.pool,
            &self.groups,
            &req.block_hashes,
            max_len,
            &mut hit.blocks,
            &mut hit.scratch,
        );
        hit.num_computed_tokens = found.hit_length;
        hit.shared_prefix_boundary = if found.uncached_common_prefix > 0 {
            found.hit_length + found.uncached_common_prefix
        } else {
            0
        };
        hit.fixed_point_reasked = found.fixed_point_reasked;
    }

    /// `allocate_slots`: `Ok(None)` when vLLM returns `None` (§5.3 steps 1–15).
    pub fn allocate_slots(&mut self, req: &Request, a: AllocateArgs<'_>) -> Result<Option<Vec<Vec<u32>>>, PoolError> {
        let mut new_blocks = Vec::new();
        Ok(self.allocate_slots_into(req, a, &mut new_blocks)?.then_some(new_blocks))
    }

    /// `allocate_slots` writing each group's new blocks into `new_blocks` (whose
    /// lists are reused across calls); `Ok(false)` when vLLM returns `None`.
    /// Inlined up to the choice of path: nearly every step takes the one without hits,
    /// a function of its own with a frame and registers sized for it alone.
    #[inline]
    pub fn allocate_slots_into(
        &mut self,
        req: &Request,
        a: AllocateArgs<'_>,
        new_blocks: &mut Vec<Vec<u32>>,
    ) -> Result<bool, PoolError> {
        // A lookup that found nothing is no hit: the general path would take the same steps.
        let no_hits = a.hits.is_none_or(|h| h.num_computed_tokens == 0 && h.is_empty());
        if no_hits && !a.full_sequence_must_fit && self.slip.is_none() && a.num_new_tokens > 0 {
            return self.allocate_without_hits(req, a, new_blocks);
        }
        self.allocate_with_hits(req, a, new_blocks)
    }

    /// `allocate_slots_into` in general (hits offered, the whole sequence to fit, a
    /// Mamba "align" group, a slip on, or nothing to allocate).
    #[inline(never)]
    fn allocate_with_hits(
        &mut self,
        req: &Request,
        a: AllocateArgs<'_>,
        new_blocks: &mut Vec<Vec<u32>>,
    ) -> Result<bool, PoolError> {
        let (hit_blocks, hit_tokens) = match a.hits {
            Some(h) => (h.blocks.as_slice(), h.num_computed_tokens),
            None => (&[][..], 0),
        };
        if a.num_new_tokens == 0 && hit_tokens == 0 {
            return Err(PoolError {
                kind: "ValueError",
                message: "num_new_tokens must be greater than 0 when there are no computed tokens to adopt".into(),
            });
        }
        let num_local_computed = req.num_computed_tokens + hit_tokens;
        let total_computed = num_local_computed.min(self.config.max_model_len);
        let watermark = self.watermark(req);
        let main = total_computed + a.num_new_tokens;
        let need_slot = (main + a.num_lookahead_tokens).min(self.config.max_model_len);
        let cache = self.cacheable(main.min(req.num_tokens()));
        // Blocks that left the window are freed before the capacity check, even if
        // the allocation then fails (§5.3 step 8; kvtrace-format.md §6.4).
        let in_flight = if self.slip == Some(super::ManagerSlip::InFlightIgnored) {
            0
        } else {
            req.num_in_flight_tokens
        };
        let processed = total_computed.saturating_sub(in_flight);
        let full = req.num_tokens().min(self.config.max_model_len);
        // No hit blocks and no Mamba "align" group (most admissions): each group's need is
        // its table's shortfall (`need_no_hit_blocks`), summed inline.
        let no_hit_blocks = super::shortcuts::on() && !self.mamba_align && hit_blocks.iter().all(Vec::is_empty);
        let Self { pool, groups, reqs, .. } = self;
        let (states, log) = reqs.entry(req.id);
        let free = pool.num_free_blocks() as i64;
        if a.full_sequence_must_fit {
            let need = if no_hit_blocks {
                need_no_hit_blocks(groups, states, full, total_computed, true)
            } else {
                num_blocks_to_allocate(groups, pool, states, full, hit_blocks, total_computed, full, true)
            };
            if need + watermark > free {
                return Ok(false);
            }
        }
        for (m, st) in groups.iter_mut().zip(states.iter_mut()) {
            m.remove_skipped_blocks(pool, (req.id, st, log), processed);
        }
        let need = if no_hit_blocks {
            need_no_hit_blocks(groups, states, need_slot, num_local_computed, false)
        } else {
            num_blocks_to_allocate(
                groups,
                pool,
                states,
                need_slot,
                hit_blocks,
                num_local_computed,
                main,
                false,
            )
        };
        let available = pool.num_free_blocks() as i64 - a.reserved_blocks as i64;
        if need + watermark > available {
            return Ok(false);
        }
        let hits_present = a.hits.is_some_and(|h| !h.is_empty());
        if hits_present && !states.iter().any(|st| st.num_cached.is_some()) {
            // Two-phase: touch every group's hits before any group allocates.
            for (i, (m, st)) in groups.iter_mut().zip(states.iter_mut()).enumerate() {
                m.add_local_computed_blocks(pool, (req.id, st, log), &hit_blocks[i], num_local_computed);
            }
        }
        allocate_groups(groups, pool, (req.id, states, log), need_slot, main, new_blocks)?;
        if !a.delay_cache_blocks {
            if let Some((n, hbs)) = cache {
                cache_groups(groups, pool, states, req, n, hbs)?;
            }
        }
        Ok(true)
    }

    /// `allocate_slots` (the steps of `allocate_slots_into`) offered no hits and not
    /// asked to fit the whole sequence: nearly every step. A step its request's steady
    /// memo covers changes no group (most decode steps): only the capacity check is left.
    #[inline(never)]
    fn allocate_without_hits(
        &mut self,
        req: &Request,
        a: AllocateArgs<'_>,
        new_blocks: &mut Vec<Vec<u32>>,
    ) -> Result<bool, PoolError> {
        // `allocate_with_hits`'s steps with no hits: the same values, fewer of them.
        let total_computed = req.num_computed_tokens.min(self.config.max_model_len);
        let main = total_computed + a.num_new_tokens;
        let need_slot = (main + a.num_lookahead_tokens).min(self.config.max_model_len);
        let processed = total_computed.saturating_sub(req.num_in_flight_tokens);
        let cached_now = self
            .cacheable(main.min(req.num_tokens()))
            .filter(|_| !a.delay_cache_blocks);
        let watermark = self.watermark(req);
        // A steady step (nothing to trim, allocate or cache in any group) needs only the
        // capacity check: outside Mamba "align" the request's memo says so (and no group
        // needs a block), with "align" groups `steady_need` walks the groups.
        let mut caching_only = false;
        let steady = if !super::shortcuts::on() {
            None
        } else if self.mamba_align {
            let states = self.reqs.get(req.id);
            states.and_then(|states| steady_need(&self.groups, states, req, (processed, need_slot, main), cached_now))
        } else {
            let hbs = self.hash_block_size();
            let cached = cached_now.map(|(n, per_hash)| n.min(req.block_hashes.len() as u64 * per_hash));
            let Self { groups, reqs, .. } = &mut *self;
            let memo = reqs.steady(req.id, |states| {
                // A step that draws a block in the first group is no steady one: no memo
                // is made for it (its entries change anyway).
                let covered = states[0].blocks.len() as u64 * groups[0].spec.block_size;
                (need_slot <= covered).then(|| SteadyMemo::of(groups, states, processed, hbs))
            });
            match memo {
                Some(m) if m.holds_but_caching(processed, need_slot) => {
                    caching_only = !m.caches_nothing(cached);
                    (!caching_only).then_some(0)
                }
                _ => None,
            }
        };
        if let Some(need) = steady {
            let available = self.pool.num_free_blocks() as i64 - a.reserved_blocks as i64;
            if need + watermark > available {
                return Ok(false);
            }
            empty_lists(new_blocks, self.groups.len());
            return Ok(true);
        }
        if caching_only {
            // The memo's other bounds hold: no group trims, needs a block or lacks a
            // table, so the general steps below would only check capacity and register.
            let available = self.pool.num_free_blocks() as i64 - a.reserved_blocks as i64;
            if watermark > available {
                return Ok(false);
            }
            empty_lists(new_blocks, self.groups.len());
            if let Some((n, hbs)) = cached_now {
                let Self { pool, groups, reqs, .. } = self;
                let (states, _) = reqs.entry(req.id);
                cache_groups(groups, pool, states, req, n, hbs)?;
            }
            return Ok(true);
        }
        // Any other step: one pass over the groups trims the windows and sums the needs
        // (`GroupManager::need_without_hits`); when no group needs a block and every
        // group has a table, no group is asked to allocate (it would return at once).
        let mamba_align = self.mamba_align;
        let Self { pool, groups, reqs, .. } = self;
        let (states, log) = reqs.entry(req.id);
        let (mut need, mut all_tables) = (0, true);
        for (m, st) in groups.iter_mut().zip(states.iter_mut()) {
            // Trimming nulls table entries but keeps each table's length, and a group's
            // need reads only its own table: the same as trimming every group first.
            m.remove_skipped_blocks(pool, (req.id, &mut *st, &mut *log), processed);
            let (n, has_table) = if m.is_mamba_align() {
                // Its own rules (may be negative); no hits, so no sentinel, nothing evictable.
                let n = m.num_blocks_to_allocate(pool, st, need_slot, &[], req.num_computed_tokens, main, false);
                (n, st.has_table)
            } else {
                m.need_without_hits(st, need_slot, req.num_computed_tokens)
            };
            need += n;
            all_tables &= has_table;
        }
        let available = pool.num_free_blocks() as i64 - a.reserved_blocks as i64;
        if need + watermark > available {
            return Ok(false);
        }
        // A Mamba "align" group notes every allocation: the groups are always asked then.
        if need > 0 || !all_tables || mamba_align {
            allocate_groups(groups, pool, (req.id, states, log), need_slot, main, new_blocks)?;
        } else {
            empty_lists(new_blocks, groups.len());
        }
        if let Some((n, hbs)) = cached_now {
            cache_groups(groups, pool, states, req, n, hbs)?;
        }
        Ok(true)
    }

    /// The free blocks an admission must leave: the watermark for a request not yet
    /// running (waiting or preempted), none for a running one.
    #[inline(always)]
    fn watermark(&self, req: &Request) -> i64 {
        if matches!(req.status, RequestStatus::Waiting | RequestStatus::Preempted) {
            self.config.watermark_blocks as i64
        } else {
            0
        }
    }

    /// `cache_blocks`: register full blocks up to `num_computed_tokens`.
    pub fn cache_blocks(&mut self, req: &Request, num_computed_tokens: u64) -> Result<(), PoolError> {
        let Some((n, hbs)) = self.cacheable(num_computed_tokens) else {
            return Ok(());
        };
        let (states, _) = self.reqs.entry(req.id);
        cache_groups(&mut self.groups, &mut self.pool, states, req, n, hbs)
    }

    /// `cache_blocks(req, num_computed_tokens)` would change nothing and raise nothing.
    pub fn caches_nothing(&self, req: &Request, num_computed_tokens: u64) -> bool {
        self.cacheable(num_computed_tokens).is_none_or(|(n, hbs)| {
            self.groups.iter().enumerate().all(|(g, m)| {
                let cached = self.reqs.group(g, req.id).and_then(|st| st.num_cached);
                m.caches_nothing(cached, req, n, hbs)
            })
        })
    }

    /// What `cache_blocks` hands each group: the cacheable tokens of `num_computed_tokens`
    /// and the hash block size; `None` when caching is off (nothing is cached).
    #[inline]
    fn cacheable(&self, num_computed_tokens: u64) -> Option<(u64, u64)> {
        self.config.enable_caching.then(|| {
            (
                self.coordinator.num_cacheable_tokens(num_computed_tokens),
                self.hash_block_size(),
            )
        })
    }

    /// `free`: each group tail-first, groups in order.
    pub fn free(&mut self, req: ReqId) {
        let Some(mut states) = self.reqs.remove(req) else {
            return;
        };
        let log = &mut self.reqs.log;
        for (m, st) in self.groups.iter_mut().zip(states.iter_mut()) {
            m.free(&mut self.pool, (req, st, log));
        }
        self.reqs.recycle(states);
    }

    /// `pop_blocks_for_free`: detach the tables for a deferred free (group order).
    pub fn pop_blocks_for_free(&mut self, req: ReqId) -> Vec<u32> {
        let mut out = Vec::new();
        let Some(mut states) = self.reqs.remove(req) else {
            return out;
        };
        let log = &mut self.reqs.log;
        for (m, st) in self.groups.iter_mut().zip(states.iter_mut()) {
            m.pop_blocks_for_free((req, st, log), &mut out);
        }
        self.reqs.recycle(states);
        out
    }

    /// Release blocks detached by `pop_blocks_for_free` (tail-first).
    pub fn free_detached(&mut self, blocks: &[u32]) {
        if self.slip == Some(super::ManagerSlip::DetachedFreedHeadFirst) {
            return self.pool.free_blocks(blocks.iter().copied());
        }
        self.pool.free_blocks(blocks.iter().rev().copied());
    }

    /// Switch a manager slip on in every group (issue 19's mutants; never in a real run).
    pub fn set_slip(&mut self, slip: Option<super::ManagerSlip>) {
        self.slip = slip;
        for m in &mut self.groups {
            m.slip = slip;
        }
    }

    /// Free blocks that left a window or chunk after `processed` tokens.
    pub fn remove_skipped_blocks(&mut self, req: ReqId, processed: u64) {
        let Some((states, log)) = self.reqs.get_mut(req) else {
            return;
        };
        for (m, st) in self.groups.iter_mut().zip(states.iter_mut()) {
            m.remove_skipped_blocks(&mut self.pool, (req, st, log), processed);
        }
    }

    /// Install a table the planner built by hand (a shadow): every listed block is
    /// referenced (touched or freshly drawn by the caller). `num_cached[g]` is the
    /// group's `num_cached_block` (blocks already registered in the prefix cache);
    /// `None` = the whole table, so nothing of it is ever cached again.
    pub fn adopt_tables(&mut self, req: ReqId, tables: &[Vec<u32>], num_cached: &[Option<u64>]) {
        let (states, log) = self.reqs.entry(req);
        for (g, (st, t)) in states.iter_mut().zip(tables).enumerate() {
            log.touch(g as u32, req, st);
            st.has_table = true;
            st.blocks.clear();
            st.blocks.extend_from_slice(t);
            let cached = num_cached
                .get(g)
                .copied()
                .flatten()
                .map_or(t.len(), |n| (n as usize).min(t.len()));
            st.num_cached = Some(cached);
        }
    }

    /// Log what every op changes from now on, for `take_changes` (the incremental
    /// model invariants); logging stays off otherwise.
    pub fn watch_changes(&mut self) {
        self.pool.changes.enable(self.pool.num_blocks());
        self.reqs.log.changes.enable();
    }

    /// What changed since the last call (or since `watch_changes`); empty when not watching.
    pub fn take_changes(&mut self) -> ModelChanges {
        if !self.pool.changes.is_enabled() {
            return ModelChanges::default();
        }
        changes::drain(&mut self.pool.changes, &mut self.reqs.log.changes)
    }

    /// `reset_prefix_cache`: refused while any block is referenced.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.reset_ignores_held() {
            return self.pool.reset_prefix_cache_unchecked();
        }
        self.pool.reset_prefix_cache()
    }

    /// `reset_prefix_cache` would be refused (and so change nothing).
    pub fn reset_refused(&self) -> bool {
        !self.reset_ignores_held() && self.pool.reset_refused()
    }

    /// Issue 19's slip: the reset goes ahead while blocks are held.
    fn reset_ignores_held(&self) -> bool {
        self.slip == Some(super::ManagerSlip::ResetIgnoresHeld)
    }

    /// Changes whenever any group's tables may have (observers re-render them only then).
    pub fn tables_version(&self) -> u64 {
        self.reqs.log.version()
    }

    /// `get_block_ids`: every group's whole table, nulls included.
    pub fn get_block_ids(&self, req: ReqId) -> Vec<Vec<u32>> {
        self.tables(req).map(<[u32]>::to_vec).collect()
    }

    /// The request's table in every group, in group order (nulls included; empty
    /// where it has none).
    pub fn tables(&self, req: ReqId) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.groups.len()).map(move |g| self.table(g, req))
    }

    /// Group `g`'s table of the request (nulls included); empty if it has none.
    #[inline]
    pub fn table(&self, g: usize, req: ReqId) -> &[u32] {
        self.table_stamped(g, req).0
    }

    /// Group `g`'s table of the request and a stamp that changes whenever the table
    /// may have (`None` without a table).
    #[inline]
    pub fn table_stamped(&self, g: usize, req: ReqId) -> (&[u32], Option<u64>) {
        match self.reqs.group(g, req) {
            Some(st) if st.has_table => (st.blocks.as_slice(), Some(st.stamp)),
            _ => (&[], None),
        }
    }

    /// Group `g`'s `num_cached_block` of the request: its blocks already cached.
    pub fn num_cached_blocks(&self, g: usize, req: ReqId) -> Option<usize> {
        self.reqs.group(g, req).and_then(|st| st.num_cached)
    }

    /// Whether group `g` tracks the request's cached blocks (it is running there).
    pub fn tracks_cached(&self, g: usize, req: ReqId) -> bool {
        self.num_cached_blocks(g, req).is_some()
    }

    /// Requests with a table in group `g` (sorted, for checks).
    pub fn request_ids(&self, g: usize) -> Vec<ReqId> {
        let mut v: Vec<ReqId> = self
            .reqs
            .ids()
            .filter(|&r| self.reqs.group(g, r).is_some_and(|st| st.has_table))
            .collect();
        v.sort_unstable();
        v
    }

    /// Requests with entries in the groups' dicts, sorted (`state_text`).
    #[cfg(test)]
    pub(crate) fn entry_ids(&self) -> Vec<ReqId> {
        let mut ids: Vec<ReqId> = self.reqs.ids().collect();
        ids.sort_unstable();
        ids
    }

    /// Group `g`'s Mamba "align" bookkeeping of the request (`state_text`): whether it
    /// allocated, its last state's index, its retired entries.
    #[cfg(test)]
    pub(crate) fn mamba_entry(&self, g: usize, req: ReqId) -> (bool, Option<usize>, Option<usize>) {
        self.reqs.group(g, req).map_or((false, None, None), |st| {
            (st.allocated, st.last_state_idx, st.num_retired)
        })
    }
}

/// The groups' summed need when none of them would change in `allocate_without_hits`
/// (`GroupManager::steady`, `steady_align`); `None` when one might.
#[inline(always)]
fn steady_need(
    groups: &[GroupManager],
    states: &[GroupReq],
    req: &Request,
    (processed, need_slot, main): (u64, u64, u64),
    cache: Option<(u64, u64)>,
) -> Option<i64> {
    let mut need = 0;
    for (m, st) in groups.iter().zip(states) {
        if m.is_mamba_align() {
            need += m.steady_align(st, req, (processed, main), cache)?;
        } else if !m.steady(st, req, (processed, need_slot), cache) {
            return None;
        }
    }
    Some(need)
}

/// `num_blocks_to_allocate` summed over the groups when no group is offered a hit block
/// and none is Mamba "align" (`GroupManager::need_no_hit_blocks`).
#[inline(always)]
fn need_no_hit_blocks(
    groups: &[GroupManager],
    states: &[GroupReq],
    num_tokens: u64,
    total_computed: u64,
    capped: bool,
) -> i64 {
    // A plain loop: `sum` over the zip was left out of line as a fold of its own.
    let mut need = 0;
    for (m, st) in groups.iter().zip(states) {
        need += m.need_no_hit_blocks(st, num_tokens, total_computed, capped);
    }
    need
}

/// `get_num_blocks_to_allocate` summed over the groups (`states`: the request's entries).
#[allow(clippy::too_many_arguments)]
fn num_blocks_to_allocate(
    groups: &[GroupManager],
    pool: &BlockPool,
    states: &[GroupReq],
    num_tokens: u64,
    hits: &[Vec<u32>],
    total_computed: u64,
    main: u64,
    cap: bool,
) -> i64 {
    groups
        .iter()
        .zip(states)
        .enumerate()
        .map(|(i, (m, st))| {
            let h = hits.get(i).map_or(&[][..], Vec::as_slice);
            m.num_blocks_to_allocate(pool, st, num_tokens, h, total_computed, main, cap)
        })
        .sum()
}

/// Each group's `allocate_new_blocks`, its new blocks into its list of `new_blocks`.
/// Inlined into both allocation paths, whose registers are saved already.
#[inline(always)]
fn allocate_groups(
    groups: &mut [GroupManager],
    pool: &mut BlockPool,
    (req, states, log): (ReqId, &mut [GroupReq], &mut TableLog),
    need_slot: u64,
    main: u64,
    new_blocks: &mut Vec<Vec<u32>>,
) -> Result<(), PoolError> {
    new_blocks.resize_with(groups.len(), Vec::new);
    for ((m, st), out) in groups.iter_mut().zip(states.iter_mut()).zip(new_blocks.iter_mut()) {
        out.clear();
        m.allocate_new_blocks_into(pool, (req, st, &mut *log), need_slot, main, out)?;
    }
    Ok(())
}

/// Each group's `cache_blocks` of `n` cacheable tokens. Inlined into `allocate_slots_into`,
/// which calls it on nearly every step and has saved its registers already (a call of
/// its own cost a fifth of its instructions).
#[inline(always)]
fn cache_groups(
    groups: &mut [GroupManager],
    pool: &mut BlockPool,
    states: &mut [GroupReq],
    req: &Request,
    n: u64,
    hbs: u64,
) -> Result<(), PoolError> {
    for (m, st) in groups.iter_mut().zip(states.iter_mut()) {
        m.cache_blocks(pool, req, st, n, hbs)?;
    }
    Ok(())
}
