//! Applying plan ops to an engine. Effects the model decides (allocations) are
//! re-derived and compared with what the plan recorded; effects the planner
//! decided (shadow blocks, frees, windows) are applied as recorded and judged.

use super::content::{SYNTHETIC_TAG, ZERO_TAG};
use super::{Deferred, Engine, Mismatch, PendingOutput};
use crate::bugs::BugMutant;
use crate::invariants::Violation;
use crate::kv::{AllocateArgs, GroupKind, MambaMode, RequestStatus, NULL_BLOCK};
use crate::plan::{BatchEntry, Expect, PlanOp, ShadowGroup, TailMode};

/// What applying one op found.
#[derive(Clone, Debug, Default)]
pub struct OpOutcome {
    /// Planner-invariant violations caused by this op.
    pub violations: Vec<Violation>,
    /// A short, deterministic description of the op's result (for the trace).
    pub result: String,
}

impl OpOutcome {
    pub(super) fn ok(result: impl Into<String>) -> Self {
        OpOutcome {
            violations: Vec::new(),
            result: result.into(),
        }
    }
}

/// What a block holds; the null block holds nothing.
fn content_at(content: &[Option<u128>], block: u32) -> Option<u128> {
    if block == NULL_BLOCK {
        None
    } else {
        content[block as usize]
    }
}

/// Host-side bookkeeping that must stay outside timed windows (PL-TIMED-HOST).
fn is_host_bookkeeping(op: &PlanOp) -> Option<&'static str> {
    match op {
        PlanOp::CacheBlocks { .. } => Some("cache_blocks (block registration)"),
        PlanOp::RegisterShadow { .. } => Some("shadow registration"),
        PlanOp::ZeroBlocks { .. } => Some("block zeroing"),
        PlanOp::CopyBlock { .. } => Some("block copy"),
        PlanOp::HostWork { .. } => Some("host work"),
        PlanOp::FakeCompute { .. } => Some("synthetic KV injection"),
        PlanOp::ReleaseCow => Some("copy-on-write release"),
        _ => None,
    }
}

impl Engine {
    /// Apply one op. `Err` = the plan disagrees with the model.
    pub fn apply(&mut self, op: &PlanOp) -> Result<OpOutcome, Mismatch> {
        let mut pre = Vec::new();
        if let (Some(point), Some(what)) = (self.timed, is_host_bookkeeping(op)) {
            pre.push(Self::violation(
                "PL-TIMED-HOST",
                format!("{what} inside the timed window of point {point}"),
            ));
        }
        let mut out = match op {
            PlanOp::AddRequest {
                req,
                prompt,
                cache_salt,
            } => self.add_request(req, prompt.materialise(), cache_salt.clone()),
            PlanOp::Schedule {
                req,
                num_new_tokens,
                use_prefix_cache,
                full_sequence_must_fit,
                delay_cache_blocks,
                expect,
            } => self.schedule(
                req,
                *num_new_tokens,
                *use_prefix_cache,
                *full_sequence_must_fit,
                *delay_cache_blocks,
                expect,
            )?,
            PlanOp::Forward { batch } => self.forward(batch)?,
            PlanOp::ProcessOutputs { lag } => self.process_outputs(*lag),
            PlanOp::FakeCompute { req, tokens } => self.fake_compute(req, *tokens)?,
            PlanOp::CacheBlocks { req, num_tokens } => {
                let r = self.req(req)?;
                if *num_tokens > r.req.num_computed_tokens {
                    return Err(Mismatch(format!(
                        "cache_blocks of {num_tokens} tokens but {req} computed {}",
                        r.req.num_computed_tokens
                    )));
                }
                let request = r.req.clone();
                self.kv
                    .cache_blocks(&request, *num_tokens)
                    .map_err(|e| Mismatch(e.to_string()))?;
                OpOutcome::ok("cached")
            }
            PlanOp::Finish { req, fenced } => self.finish(req, *fenced)?,
            PlanOp::Shed { req, fenced } => {
                self.event("shed");
                let building = self
                    .requests
                    .get(req)
                    .is_some_and(|r| r.req.num_computed_tokens < r.req.num_prompt_tokens);
                if self.deadline_passed && building {
                    // A soft timeout landed while the request was still being prefilled.
                    self.event("shed-mid-build");
                }
                let out = self.finish(req, *fenced)?;
                self.shed.insert(req.clone());
                out
            }
            PlanOp::Preempt { req } => {
                let rid = self.req(req)?.req.id;
                self.kv.free(rid);
                let r = self.requests.get_mut(req).expect("checked");
                r.req.num_computed_tokens = 0;
                r.req.status = RequestStatus::Preempted;
                OpOutcome::ok("preempted")
            }
            PlanOp::RegisterShadow {
                shadow,
                chain,
                ctx,
                headroom,
                tail,
                groups,
                ok,
                covered,
                random_state,
            } => self.register_shadow(
                shadow,
                chain,
                *ctx,
                *headroom,
                *tail,
                groups,
                (*ok, *covered, *random_state),
            )?,
            PlanOp::ReleaseCow => {
                // `_kvwarm_take_cow_copies` (§3.6): the copies this injection queued;
                // copies an earlier injection left queued are not its to release.
                let now = self.step_seq;
                let mut blocks = Vec::new();
                let mut kept = (Vec::new(), Vec::new());
                for (b, s) in std::mem::take(&mut self.cow_retained)
                    .into_iter()
                    .zip(std::mem::take(&mut self.cow_steps))
                {
                    if s == now {
                        blocks.push(b);
                    } else {
                        kept.0.push(b);
                        kept.1.push(s);
                    }
                }
                (self.cow_retained, self.cow_steps) = kept;
                let n = blocks.len();
                self.kv.pool.free_blocks(blocks);
                OpOutcome::ok(format!("released {n}"))
            }
            PlanOp::ZeroBlocks { blocks, .. } => {
                for &b in blocks {
                    self.content[b as usize] = Some(ZERO_TAG);
                }
                OpOutcome::ok(format!("zeroed {}", blocks.len()))
            }
            PlanOp::CopyBlock { src, dst, .. } => {
                self.content[*dst as usize] = self.content[*src as usize];
                OpOutcome::ok("copied")
            }
            PlanOp::ResetPrefixCache { expect } => {
                let mut out = OpOutcome::default();
                if !self.deferred.is_empty() {
                    out.violations.push(Self::violation(
                        "PL-FENCE",
                        format!("prefix-cache reset with {} fenced frees pending", self.deferred.len()),
                    ));
                }
                // DECISION: blocks a `shrink_pool` fault took away model a smaller
                // pool, which vLLM's reset would not see: they are handed back for
                // the reset and the same number taken away again after it.
                let phantom = std::mem::take(&mut self.phantom);
                let n = phantom.len();
                self.kv.pool.free_blocks(phantom);
                let done = self.kv.reset_prefix_cache();
                if let Ok(b) = self.kv.pool.get_new_blocks(n) {
                    self.phantom = b;
                }
                if expect.is_some_and(|e| e != done) {
                    return Err(Mismatch(format!(
                        "reset_prefix_cache returned {done}, the plan saw {expect:?}"
                    )));
                }
                out.result = format!("reset {done}");
                out
            }
            PlanOp::BeginTimed { point } => {
                if let Some(open) = self.timed {
                    return Err(Mismatch(format!(
                        "timed window of point {point} opened inside point {open}'s"
                    )));
                }
                self.timed = Some(*point);
                let now = self.step_seq;
                if let Some((at, admitted, steady)) = self.points.get_mut(point) {
                    if *at < now {
                        *steady += 1;
                    } else {
                        *admitted = true;
                    }
                }
                OpOutcome::ok(format!("timed {point}"))
            }
            PlanOp::EndTimed { point } => {
                if self.timed != Some(*point) {
                    return Err(Mismatch(format!(
                        "end of timed window {point} but {:?} is open",
                        self.timed
                    )));
                }
                self.timed = None;
                OpOutcome::ok(format!("untimed {point}"))
            }
            PlanOp::InjectPoint { point, replica } => {
                let mut out = OpOutcome::ok(format!("inject {point}"));
                // Dynamo samples the deadline before a new point only once a point
                // has a result or a skip (`_bench_stop_at_timeout_boundary`, §1.12):
                // a rank's first point, and the eager warm-up replicas before it
                // (discarded, so neither), run whatever the clock says.
                if self.deadline_passed && self.points_recorded > 0 {
                    out.violations.push(Self::violation(
                        "PL-DEADLINE",
                        format!("point {point} injected after the soft deadline passed"),
                    ));
                }
                self.points.entry(*point).or_insert((self.step_seq, false, 0));
                if !replica {
                    self.points_recorded += 1;
                }
                self.inject_seq = Some(self.step_seq);
                // The blocking stage exchange (PR #14728, dynamo_fpm.md §7.1, §8.2 bug 22):
                // every rank acts once every rank's message arrived, i.e. after the
                // group's largest lag; the non-blocking one acts on its own lag.
                let lag = if self.bug(BugMutant::NonblockingStageExchange) {
                    self.message_lag
                } else {
                    self.group_lag
                };
                if lag == 0 {
                    self.injected = Some(*point);
                } else {
                    self.inject_queue.push((self.step_seq + lag, *point));
                    out.result = format!("inject {point} (delivered {lag} steps late)");
                }
                out
            }
            PlanOp::HostWork { label } => OpOutcome::ok(label.clone()),
            PlanOp::EndSweep => self.end_sweep(),
            PlanOp::Observe(obs) => self.observe(obs)?,
            PlanOp::PlannerFailed { kind, error } => self.planner_failed(*kind, error)?,
        };
        pre.append(&mut out.violations);
        out.violations = pre;
        Ok(out)
    }

    fn req(&self, id: &str) -> Result<&super::EngineReq, Mismatch> {
        self.requests
            .get(id)
            .ok_or_else(|| Mismatch(format!("request \"{id}\" is not live on rank {}", self.rank)))
    }

    fn add_request(&mut self, id: &str, prompt: Vec<u64>, salt: Option<String>) -> OpOutcome {
        let mut out = OpOutcome::ok("added");
        if self.shed.contains(id) {
            out.violations.push(Self::violation(
                "PL-NO-READMIT",
                format!("request \"{id}\" was shed and is admitted again"),
            ));
        }
        let r = self.new_request(prompt, salt);
        self.requests.insert(id.to_string(), r);
        out
    }

    fn fence_check(&self, what: &str, drawn: usize, out: &mut OpOutcome) {
        if drawn > 0 && !self.deferred.is_empty() {
            out.violations.push(Self::violation(
                "PL-FENCE",
                format!(
                    "{what} drew {drawn} blocks with {} fenced frees pending",
                    self.deferred.len()
                ),
            ));
        }
    }

    fn schedule(
        &mut self,
        id: &str,
        n: u64,
        use_cache: bool,
        fsmf: bool,
        delay: bool,
        expect: &Expect,
    ) -> Result<OpOutcome, Mismatch> {
        let r = self.req(id)?;
        let admitting = r.req.status != RequestStatus::Running;
        // A stage build (a chain rung or a native exact-context prefill: a request
        // prefilling its own prompt, neither a shadow, nor on synthetic KV, nor
        // admitted by a point's injection) neither
        // starts nor continues after the soft deadline (§1.12, §3.3 step 4; §8.2 bug 5).
        let stage_after_deadline = self.deadline_passed
            && !r.point_request
            && r.shadow_of.is_none()
            && r.synthetic_upto == 0
            && r.req.num_computed_tokens < r.req.num_prompt_tokens;
        let hits =
            (admitting && use_cache && r.req.num_computed_tokens == 0).then(|| self.kv.get_computed_blocks(&r.req));
        let hit_tokens = hits.as_ref().map_or(0, |h| h.num_computed_tokens);
        if hit_tokens > 0 && expect.hit_tokens.is_none() {
            // A request the plan admits expecting no prefix hit (a benchmark request
            // computing its own KV) must not hit another request's blocks (§8.2 bug 20).
            let mut out = OpOutcome::default();
            out.violations.push(Self::violation(
                "PL-NO-POACH",
                format!("{id} hits {hit_tokens} cached tokens it did not compute (prefix-cache poaching)"),
            ));
            out.result = "poached".into();
            return Ok(out);
        }
        if r.req.num_computed_tokens.saturating_add(hit_tokens).saturating_add(n)
            > r.req.num_tokens() + r.req.num_output_placeholders
        {
            return Err(Mismatch(format!(
                "{id}: scheduling {n} tokens beyond the known sequence"
            )));
        }
        let request = r.req.clone();
        let free_before = self.kv.pool.num_free_blocks();
        let args = AllocateArgs {
            num_new_tokens: n,
            hits: hits.as_ref(),
            num_lookahead_tokens: 0,
            delay_cache_blocks: delay,
            full_sequence_must_fit: fsmf,
            reserved_blocks: 0,
        };
        let got = self
            .kv
            .allocate_slots(&request, args)
            .map_err(|e| Mismatch(e.to_string()))?;
        let mut out = OpOutcome::default();
        if stage_after_deadline {
            out.violations.push(Self::violation(
                "PL-DEADLINE",
                format!(
                    "{id}: {} prompt tokens {} after the soft deadline passed (a stage build keeps going)",
                    n,
                    if admitting { "admitted" } else { "scheduled" }
                ),
            ));
        }
        match (got, expect.refused) {
            (None, true) => {
                out.result = "refused".into();
                return Ok(out);
            }
            (None, false) => {
                // The plan's capacity arithmetic promised room the pool does not have
                // (§1.3, §2.2; §8.2 bugs 17, 23).
                out.violations.push(Self::violation(
                    "PL-CAPACITY",
                    format!(
                        "{id}: allocation of {n} tokens refused with {} free blocks; the plan counted on it",
                        self.kv.pool.num_free_blocks()
                    ),
                ));
                out.result = "refused (unplanned)".into();
                return Ok(out);
            }
            (Some(_), true) => {
                return Err(Mismatch(format!(
                    "{id}: allocation succeeded; the plan expected a refusal"
                )))
            }
            (Some(_), false) => {}
        }
        let drawn = free_before.saturating_sub(self.kv.pool.num_free_blocks());
        self.fence_check(&format!("allocation for {id}"), drawn, &mut out);
        if let Some(h) = expect.hit_tokens {
            if h != hit_tokens {
                return Err(Mismatch(format!(
                    "{id}: prefix hit of {hit_tokens} tokens; the plan expected {h}"
                )));
            }
        }
        let r = self.requests.get_mut(id).expect("checked");
        r.req.num_computed_tokens += hit_tokens;
        r.hit_tokens += hit_tokens;
        r.req.status = RequestStatus::Running;
        let tables = self.kv.get_block_ids(r.req.id);
        if let Some(t) = &expect.tables {
            if *t != tables {
                return Err(Mismatch(format!(
                    "{id}: block tables {tables:?}; the plan recorded {t:?}"
                )));
            }
        }
        out.result = format!("hit {hit_tokens} tables {tables:?}");
        if admitting {
            self.slots_check(&mut out);
        }
        Ok(out)
    }

    /// PL-SLOTS: running requests (shadows and parked chains included) fit the
    /// scheduler's `max_num_seqs` request slots (§3.1 step 4; §8.2 bug 25).
    fn slots_check(&self, out: &mut OpOutcome) {
        let running = self
            .requests
            .values()
            .filter(|r| r.req.status == RequestStatus::Running)
            .count();
        let slots = self.scenario.scheduler.max_num_seqs as usize;
        if running > slots {
            out.violations.push(Self::violation(
                "PL-SLOTS",
                format!("{running} running requests exceed max_num_seqs {slots}"),
            ));
        }
    }

    /// Positions of group `g` that a request with `c` computed tokens reads.
    fn read_range(kind: GroupKind, c: u64) -> u64 {
        match kind {
            GroupKind::FullAttention | GroupKind::Mla => 0,
            GroupKind::SlidingWindow { sliding_window } => (c + 1).saturating_sub(sliding_window),
            GroupKind::ChunkedLocal { attention_chunk_size } => c / attention_chunk_size * attention_chunk_size,
            GroupKind::Mamba { .. } => c,
        }
    }

    fn state_index(kind: GroupKind, bs: u64, n: u64) -> usize {
        match kind {
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::None,
            } => 0,
            _ => (n.div_ceil(bs) as usize).saturating_sub(1),
        }
    }

    fn forward(&mut self, batch: &[BatchEntry]) -> Result<OpOutcome, Mismatch> {
        let mut out = OpOutcome::default();
        self.in_forward = batch.iter().map(|e| e.req.clone()).collect();
        let groups: Vec<(GroupKind, u64)> = self.kv.config.groups.iter().map(|g| (g.kind, g.block_size)).collect();
        for e in batch {
            let r = self
                .requests
                .get(&e.req)
                .ok_or_else(|| Mismatch(format!("forward of unknown request {}", e.req)))?;
            if r.req.status != RequestStatus::Running {
                return Err(Mismatch(format!("forward of {} which is not scheduled", e.req)));
            }
            // A shadow may only read a chain that is parked and drained.
            if let Some((chain, ctx)) = &r.shadow_of {
                if let Some(c) = self.requests.get(chain) {
                    let busy = self.in_forward.contains(chain);
                    if busy || c.req.num_output_placeholders > 0 || c.req.num_computed_tokens < *ctx {
                        out.violations.push(Self::violation(
                            "PL-SHADOW-PARKED",
                            format!(
                                "shadow {} reads chain {chain} (in this forward: {busy}, placeholders: {}, computed {} < ctx {ctx}: {})",
                                e.req,
                                c.req.num_output_placeholders,
                                c.req.num_computed_tokens,
                                c.req.num_computed_tokens < *ctx
                            ),
                        ));
                    }
                }
            }
        }
        for e in batch {
            // Under async scheduling a sampled token not yet processed is already on
            // the device: the forward writes its KV (outputs land in step order).
            let in_flight: Vec<u64> = self
                .pending_outputs
                .iter()
                .filter(|p| p.req == e.req)
                .flat_map(|p| p.tokens.iter().copied())
                .collect();
            let r = self.requests.get_mut(&e.req).expect("checked above");
            let c = r.req.num_computed_tokens;
            let end = c.saturating_add(e.tokens);
            if end > r.req.num_tokens() + r.req.num_output_placeholders {
                return Err(Mismatch(format!("forward of {} past its known tokens", e.req)));
            }
            let tables = self.kv.get_block_ids(r.req.id);
            let mut tokens = r.req.tokens.clone();
            tokens.extend(in_flight);
            for (g, &(kind, bs)) in groups.iter().enumerate() {
                let table = &tables[g];
                if let GroupKind::Mamba { .. } = kind {
                    if c > 0 {
                        let idx = Self::state_index(kind, bs, c);
                        let expected = if r.random_state_at == Some(c) {
                            super::content::random_state_tag(self.rank, &e.req, g)
                        } else if c <= r.synthetic_upto {
                            SYNTHETIC_TAG
                        } else {
                            r.prefix[g].state_tag(&tokens, c as usize)
                        };
                        let block = table.get(idx).copied().unwrap_or(NULL_BLOCK);
                        let actual = content_at(&self.content, block);
                        // Synthetic state read from the null block is zero state, which
                        // is what synthetic KV stands for (align mode leaves the slot of
                        // a synthetic depth unallocated).
                        let synthetic_null = expected == SYNTHETIC_TAG && block == NULL_BLOCK;
                        if actual != Some(expected) && !synthetic_null {
                            out.violations.push(Self::violation(
                                "PL-WINDOW",
                                format!("{} reads recurrent state of group {g} at depth {c} from block {block}, which holds other content", e.req),
                            ));
                        }
                    }
                    let idx = Self::state_index(kind, bs, end);
                    let block = table.get(idx).copied().unwrap_or(NULL_BLOCK);
                    if block == NULL_BLOCK {
                        return Err(Mismatch(format!(
                            "{}: no state block allocated in group {g} for depth {end}",
                            e.req
                        )));
                    }
                    self.content[block as usize] = Some(r.prefix[g].state_tag(&tokens, end as usize));
                    continue;
                }
                let lo = Self::read_range(kind, c);
                if lo > 0 && lo.is_multiple_of(bs) && matches!(kind, GroupKind::SlidingWindow { .. }) {
                    *self.events.entry("window-edge").or_default() += 1;
                }
                if c > lo {
                    for i in (lo / bs) as usize..=((c - 1) / bs) as usize {
                        let block = table.get(i).copied().unwrap_or(NULL_BLOCK);
                        let upto = (((i as u64) + 1) * bs).min(c) as usize;
                        // Positions the request knowingly holds as synthetic KV read as such.
                        let expected = if upto as u64 <= r.synthetic_upto {
                            SYNTHETIC_TAG
                        } else {
                            r.prefix[g].block_tag(&tokens, i, upto)
                        };
                        let actual = content_at(&self.content, block);
                        if actual != Some(expected) {
                            out.violations.push(Self::violation(
                                "PL-WINDOW",
                                format!(
                                    "{} reads block {block} (index {i}) of group {g} ({}) for positions below {c}; it was freed, evicted or overwritten",
                                    e.req,
                                    kind.name()
                                ),
                            ));
                            break;
                        }
                    }
                }
                for i in (c / bs) as usize..=((end - 1) / bs) as usize {
                    let block = table.get(i).copied().unwrap_or(NULL_BLOCK);
                    if block == NULL_BLOCK {
                        return Err(Mismatch(format!(
                            "{}: writes position {} of group {g} without a block",
                            e.req,
                            i as u64 * bs
                        )));
                    }
                    let upto = (((i as u64) + 1) * bs).min(end) as usize;
                    self.content[block as usize] = Some(r.prefix[g].block_tag(&tokens, i, upto));
                }
            }
            r.req.num_computed_tokens = end;
            if self.scenario.scheduler.async_scheduling || self.output_delay > 0 {
                // The step's result lands later for every request it scheduled,
                // partial prefill chunks included: until then its tokens are in
                // flight, and vLLM frees out-of-window blocks only below the
                // processed tokens (vllm_kv.md, skipped-block freeing).
                r.req.num_output_placeholders += e.output.len() as u64;
                r.req.num_in_flight_tokens += e.tokens;
                self.pending_outputs.push(PendingOutput {
                    step_seq: self.step_seq,
                    land_seq: self.step_seq + self.output_delay,
                    req: e.req.clone(),
                    tokens: e.output.clone(),
                    scheduled: e.tokens,
                });
            } else if !e.output.is_empty() {
                r.req.append_output(&e.output);
            }
        }
        out.result = format!("forward {}", batch.len());
        Ok(out)
    }

    fn fake_compute(&mut self, id: &str, n: u64) -> Result<OpOutcome, Mismatch> {
        let groups: Vec<(GroupKind, u64)> = self.kv.config.groups.iter().map(|g| (g.kind, g.block_size)).collect();
        let r = self
            .requests
            .get_mut(id)
            .ok_or_else(|| Mismatch(format!("fake compute of unknown request {id}")))?;
        if r.req.status != RequestStatus::Running || r.req.num_computed_tokens != 0 || n == 0 || n > r.req.num_tokens()
        {
            return Err(Mismatch(format!(
                "{id}: synthetic KV for {n} tokens needs a freshly scheduled request"
            )));
        }
        let tables = self.kv.get_block_ids(r.req.id);
        for (g, &(kind, bs)) in groups.iter().enumerate() {
            let blocks: Vec<usize> = match kind {
                GroupKind::Mamba { .. } => vec![Self::state_index(kind, bs, n)],
                _ => (0..n.div_ceil(bs) as usize).collect(),
            };
            for i in blocks {
                match tables[g].get(i) {
                    Some(&b) if b != NULL_BLOCK => self.content[b as usize] = Some(SYNTHETIC_TAG),
                    // Window groups may already have dropped blocks left of the window.
                    _ if !matches!(kind, GroupKind::FullAttention | GroupKind::Mla) => {}
                    _ => {
                        return Err(Mismatch(format!(
                            "{id}: no block for synthetic position {} in group {g}",
                            i as u64 * bs
                        )))
                    }
                }
            }
        }
        r.req.num_computed_tokens = n;
        r.synthetic_upto = n;
        Ok(OpOutcome::ok(format!("synthetic KV for {n} tokens")))
    }

    fn process_outputs(&mut self, lag: u64) -> OpOutcome {
        let now = self.step_seq;
        let (landing, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_outputs)
            .into_iter()
            .partition(|p| p.land_seq <= now && p.step_seq + lag <= now);
        self.pending_outputs = waiting;
        for p in landing {
            if let Some(r) = self.requests.get_mut(&p.req) {
                r.req.num_output_placeholders -= p.tokens.len() as u64;
                r.req.num_in_flight_tokens -= p.scheduled;
                r.req.append_output(&p.tokens);
            }
        }
        // Processed up to the step before the oldest output still in flight.
        self.processed_seq = self.pending_outputs.iter().map(|p| p.step_seq - 1).min().unwrap_or(now);
        let processed = self.processed_seq;
        let (release, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| d.step_seq <= processed);
        self.deferred = keep;
        for d in &release {
            self.kv.free_detached(&d.blocks);
        }
        OpOutcome::ok(format!("processed to {processed}, released {}", release.len()))
    }

    fn finish(&mut self, id: &str, fenced: bool) -> Result<OpOutcome, Mismatch> {
        let rid = self.req(id)?.req.id;
        let in_flight = (self.in_forward.contains(id) && self.processed_seq < self.step_seq)
            || self.pending_outputs.iter().any(|p| p.req == id);
        // §8.2 bug 13: outputs built by the benchmark skipped `sched_step_seq += 1`, so
        // the request compares as processed and is freed at once.
        let fenced = fenced && !self.bug(BugMutant::FenceBypass);
        let mut out = OpOutcome::ok(if fenced { "finished (fenced)" } else { "finished" });
        if in_flight && !fenced {
            out.violations.push(Self::violation(
                "PL-INFLIGHT-FREE",
                format!("{id} is freed while its step is in flight (outputs not processed)"),
            ));
        }
        if fenced {
            let blocks = self.kv.pop_blocks_for_free(rid);
            self.deferred.push(Deferred {
                step_seq: self.step_seq,
                req: id.to_string(),
                blocks,
            });
        } else {
            self.kv.free(rid);
        }
        self.requests.remove(id);
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn register_shadow(
        &mut self,
        shadow: &str,
        chain: &str,
        ctx: u64,
        _headroom: u64,
        tail: TailMode,
        groups: &[ShadowGroup],
        (ok, covered, random_state): (bool, bool, bool),
    ) -> Result<OpOutcome, Mismatch> {
        let mut out = OpOutcome::default();
        if self.deadline_passed {
            out.violations.push(Self::violation(
                "PL-DEADLINE",
                format!("shadow {shadow} registered (a warm-up stage started) after the soft deadline passed"),
            ));
        }
        // A `stage_failure` fault fails this registration locally. A planner that saw
        // it coming reports the failure itself (ok = false, nothing drawn): that is a
        // local stage failure (dynamo_fpm.md §7.3), not a coverage bug.
        let injected_failure = match self.fail_registration_after {
            Some(0) => {
                self.fail_registration_after = None;
                self.registration_failed_by_fault = true;
                true
            }
            Some(n) => {
                self.fail_registration_after = Some(n - 1);
                false
            }
            None => false,
        };
        let anticipated = injected_failure && !ok;
        let ok = ok && !injected_failure;
        let ngroups = self.kv.groups.len();
        let chain_req = self.req(chain)?;
        let chain_tables = self.kv.get_block_ids(chain_req.req.id);
        let chain_tokens = chain_req.req.tokens.clone();
        if ctx == 0 || ctx as usize > chain_tokens.len() {
            return Err(Mismatch(format!(
                "shadow {shadow} at ctx {ctx} of a {}-token chain",
                chain_tokens.len()
            )));
        }
        let before = (self.kv.pool.num_free_blocks(), self.retained().len());
        let mut tables = Vec::with_capacity(ngroups);
        let mut drawn = 0usize;
        for (g, grp) in groups.iter().enumerate() {
            // Random-KDA state groups share nothing with the chain: null placeholders
            // below the private span; the chain's state is neither referenced nor
            // modified (invariant 49).
            let random_group = random_state && matches!(self.kv.config.groups[g].kind, GroupKind::Mamba { .. });
            if random_group {
                if grp.shared.iter().any(|&b| b != NULL_BLOCK) || grp.cow_from.is_some() {
                    return Err(Mismatch(format!(
                        "shadow {shadow} group {g}: a random-state group borrows nothing from the chain"
                    )));
                }
            } else if !grp.shared.iter().zip(&chain_tables[g]).all(|(a, b)| a == b)
                || grp.shared.len() > chain_tables[g].len()
            {
                return Err(Mismatch(format!(
                    "shadow {shadow} group {g}: shared blocks are not the chain's"
                )));
            } else {
                self.kv.pool.touch(&grp.shared);
            }
            let fresh = self
                .kv
                .pool
                .get_new_blocks(grp.tail.len())
                .map_err(|e| Mismatch(format!("shadow {shadow} group {g}: {e}")))?;
            if fresh != grp.tail {
                return Err(Mismatch(format!(
                    "shadow {shadow} group {g}: tail {:?}; the pool hands out {fresh:?}",
                    grp.tail
                )));
            }
            drawn += fresh.len();
            if random_group {
                // Zeroed natively, then filled with the deterministic random state
                // (the fill wins in the content model).
                let tag = super::content::random_state_tag(self.rank, shadow, g);
                for &b in &grp.tail {
                    self.content[b as usize] = Some(tag);
                }
                let mut t = grp.shared.clone();
                t.extend_from_slice(&grp.tail);
                tables.push(t);
                continue;
            }
            if tail == TailMode::Cow && grp.cow_from.iter().chain(&grp.cow_more).any(|&b| b == NULL_BLOCK) {
                // The chain's block there was dropped by the window (or is the null
                // padding of a prefix hit): the fork would copy nothing
                // (dynamo_planner_on_cpu.md, "A failure seen on the first try").
                out.violations.push(Self::violation(
                    "PL-WINDOW",
                    format!(
                        "shadow {shadow} forks its group-{g} tail from the null block: the chain's history at ctx {ctx} was already dropped"
                    ),
                ));
            }
            for (k, &b) in grp.tail.iter().enumerate() {
                self.content[b as usize] = match (k, tail, grp.cow_from) {
                    (0, TailMode::Cow, Some(src)) if src == NULL_BLOCK => None,
                    (k, TailMode::Cow, _) if k >= 1 && grp.cow_more.get(k - 1) == Some(&NULL_BLOCK) => None,
                    (0, TailMode::Cow, Some(src)) => {
                        // §3.6: `touch(tail_src)` before the copy (§8.2 bug 10 skips it).
                        if !self.bug(BugMutant::CowSourceNotTouched) {
                            self.kv.pool.retain(src);
                        }
                        self.cow_retained.push(src);
                        self.cow_steps.push(self.step_seq);
                        self.event("copy-on-write");
                        self.content[src as usize]
                    }
                    (k, TailMode::Cow, _) if k >= 1 && k <= grp.cow_more.len() => {
                        // Dynamo 1.6.1 forks every tail block from the chain's
                        // block at the same index (the `cow_more` sources).
                        let src = grp.cow_more[k - 1];
                        self.kv.pool.retain(src);
                        self.cow_retained.push(src);
                        self.cow_steps.push(self.step_seq);
                        self.content[src as usize]
                    }
                    _ => Some(ZERO_TAG),
                };
            }
            let mut t = grp.shared.clone();
            t.extend_from_slice(&grp.tail);
            tables.push(t);
        }
        self.fence_check(&format!("shadow {shadow} registration"), drawn, &mut out);
        if !ok {
            self.event("registration-failed");
            // A registration the fault failed is rolled back by the all-or-nothing
            // code: its failure is a coverage question first (PL-COVERAGE).
            if covered && !anticipated && injected_failure {
                out.violations.push(Self::violation(
                    "PL-COVERAGE",
                    format!("shadow {shadow} of a covered point failed to register (a local stage failure)"),
                ));
            }
            if (self.kv.pool.num_free_blocks(), self.retained().len()) != before || !groups.is_empty() {
                out.violations.push(Self::violation(
                    "PL-SHADOW-ATOMIC",
                    format!(
                        "failed registration of shadow {shadow} left {} groups' blocks behind",
                        groups.len()
                    ),
                ));
                // The blocks stay referenced by nobody but the failed attempt.
                self.phantom
                    .extend(tables.iter().flatten().filter(|&&b| b != NULL_BLOCK).copied());
            }
            if covered && !anticipated && !injected_failure {
                out.violations.push(Self::violation(
                    "PL-COVERAGE",
                    format!(
                        "shadow {shadow} of a covered point failed to register (the plan did not reserve what it needs: its tail blocks, or a chain deep enough)"
                    ),
                ));
            }
            out.result = "registration failed".into();
            return Ok(out);
        }
        if groups.len() != ngroups || tables.iter().any(|t| t.is_empty()) {
            let have = tables.iter().filter(|t| !t.is_empty()).count();
            out.violations.push(Self::violation(
                "PL-SHADOW-ATOMIC",
                format!("shadow {shadow} registered in {have} of {ngroups} groups"),
            ));
            tables.resize(ngroups, Vec::new());
        }
        // The shadow decodes position ctx: it knows the chain's tokens up to and
        // including its input token there.
        let prompt = chain_tokens[..(ctx as usize + 1).min(chain_tokens.len())].to_vec();
        let mut r = self.new_request(prompt.clone(), None);
        // A copy-on-write of the chain's partial block at ctx: the shadow reads only
        // positions below ctx, which hold the chain's tokens. When the source holds
        // what the chain wrote there, the copy holds that prefix as the shadow sees it
        // (dynamo_fpm.md §3.6); anything else is copied as is and fails the read.
        if tail == TailMode::Cow {
            let chain_computed = self.req(chain)?.req.num_computed_tokens;
            for (g, grp) in groups.iter().enumerate() {
                let (kind, bs) = (self.kv.config.groups[g].kind, self.kv.config.groups[g].block_size);
                let (Some(src), Some(&dst)) = (grp.cow_from, grp.tail.first()) else {
                    continue;
                };
                if matches!(kind, GroupKind::Mamba { .. }) || ctx.is_multiple_of(bs) {
                    continue;
                }
                let i = (ctx / bs) as usize;
                let upto = ((i as u64 + 1) * bs).min(chain_computed) as usize;
                let mut chain_prefix = super::content::PrefixHashes::new(bs);
                if upto > i * bs as usize
                    && self.content[src as usize] == Some(chain_prefix.block_tag(&chain_tokens, i, upto))
                {
                    self.content[dst as usize] = Some(r.prefix[g].block_tag(&prompt, i, ctx as usize));
                }
            }
        }
        r.req.num_computed_tokens = ctx;
        r.req.status = RequestStatus::Running;
        r.shadow_of = Some((chain.to_string(), ctx));
        r.random_state_at = random_state.then_some(ctx);
        let num_cached: Vec<Option<u64>> = groups.iter().map(|g| g.num_cached).collect();
        self.kv.adopt_tables(r.req.id, &tables, &num_cached);
        self.requests.insert(shadow.to_string(), r);
        self.slots_check(&mut out);
        out.result = format!("shadow tables {tables:?}");
        Ok(out)
    }

    fn end_sweep(&mut self) -> OpOutcome {
        let mut out = OpOutcome::ok("end of sweep");
        // PL-STEADY (§1.10, PR #12358; §8.2 bug 21): every point timed on its
        // admission step was timed on at least one steady step after it. A point
        // whose injection fell short is skipped untimed (`decode_injection_failed`).
        if let Some((point, _)) = self
            .points
            .iter()
            .find(|(_, (_, admitted, steady))| *admitted && *steady == 0)
        {
            out.violations.push(Self::violation(
                "PL-STEADY",
                format!("point {point} was measured on its admission step only (no steady step)"),
            ));
        }
        self.clean_end_check("after the sweep", &mut out);
        out
    }

    /// PL-CLEAN-END: nothing the sweep used stays referenced or cached
    /// (blocks a `shrink_pool` fault took away are not the sweep's).
    pub(super) fn clean_end_check(&self, when: &str, out: &mut OpOutcome) {
        let held: Vec<u32> = (1..self.kv.pool.num_blocks())
            .filter(|&b| self.kv.pool.ref_cnt(b) > 0 && !self.phantom.contains(&b))
            .collect();
        if !held.is_empty() || self.kv.pool.num_cached_keys() > 0 {
            out.violations.push(Self::violation(
                "PL-CLEAN-END",
                format!(
                    "{when} {} blocks are referenced (first {:?}) and {} prefix-cache keys remain",
                    held.len(),
                    &held[..held.len().min(5)],
                    self.kv.pool.num_cached_keys()
                ),
            ));
        }
    }
}
