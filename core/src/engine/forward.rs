//! Forwards: every read a batch makes is checked against the content its reader expects
//! (PL-WINDOW facts), then the batch's new KV is written; synthetic KV (`fake_compute`) is
//! marked as such.

use super::apply::{content_at, OpOutcome};
use super::content::SYNTHETIC_TAG;
use super::{Engine, Mismatch, PendingOutput};
use crate::invariants::planner::PlannerEvent;
use crate::kv::{GroupKind, MambaMode, RequestStatus, NULL_BLOCK};
use crate::plan::BatchEntry;

impl Engine {
    pub(super) fn state_index(kind: GroupKind, bs: u64, n: u64) -> usize {
        match kind {
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::None,
            } => 0,
            _ => (n.div_ceil(bs) as usize).saturating_sub(1),
        }
    }

    pub(super) fn forward(&mut self, batch: &[BatchEntry]) -> Result<OpOutcome, Mismatch> {
        let mut out = OpOutcome::default();
        self.in_forward = batch.iter().map(|e| e.req.clone()).collect();
        self.state_coordinate(batch, &mut out);
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
                    out.check(PlannerEvent::ShadowRead {
                        shadow: &e.req,
                        chain,
                        busy: self.in_forward.contains(chain),
                        placeholders: c.req.num_output_placeholders,
                        computed: c.req.num_computed_tokens,
                        ctx: *ctx,
                    });
                }
            }
        }
        for e in batch {
            // The planned count, cut for a request admitted with a poached hit (poach.rs).
            let n = self.forward_tokens(e);
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
            let end = c.saturating_add(n);
            if end > r.req.num_tokens() + r.req.num_output_placeholders {
                return Err(Mismatch(format!("forward of {} past its known tokens", e.req)));
            }
            let tables = self.kv.get_block_ids(r.req.id);
            let mut tokens = r.req.tokens.clone();
            tokens.extend(in_flight);
            // A chunk its poached hit covered whole reads and writes nothing (poach.rs).
            let covered = n == 0 && e.tokens > 0;
            for (g, &(kind, bs)) in groups.iter().enumerate().filter(|_| !covered) {
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
                        out.check(PlannerEvent::StateRead {
                            req: &e.req,
                            group: g,
                            depth: c,
                            block,
                            holds: actual == Some(expected) || synthetic_null,
                        });
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
                // The forward's query sits at position c: its context is c + 1 positions.
                let lo = kind.attend_start(c + 1);
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
                        let read = PlannerEvent::AttentionRead {
                            req: &e.req,
                            block,
                            index: i,
                            group: g,
                            kind: kind.name(),
                            below: c,
                            holds: content_at(&self.content, block) == Some(expected),
                        };
                        if out.check(read) {
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
            // Outputs are processed in step order: behind a delayed step's, this one's wait too.
            let queued = !self.pending_outputs.is_empty();
            if self.scenario.scheduler.async_scheduling || self.output_delay > 0 || queued {
                // The step's result lands later for every request it scheduled,
                // partial prefill chunks included: until then its tokens are in
                // flight, and vLLM frees out-of-window blocks only below the
                // processed tokens (vllm_kv.md, skipped-block freeing).
                r.req.num_output_placeholders += e.output.len() as u64;
                r.req.num_in_flight_tokens += n;
                self.pending_outputs.push(PendingOutput {
                    step_seq: self.step_seq,
                    land_seq: self.step_seq + self.output_delay,
                    req: e.req.clone(),
                    tokens: e.output.clone(),
                    scheduled: n,
                });
            } else if !e.output.is_empty() {
                r.req.append_output(&e.output);
            }
        }
        out.result = format!("forward {}", batch.len());
        Ok(out)
    }

    /// Inside a point's timed window: the computed tokens the batch reads, for PL-COORDINATE.
    fn state_coordinate(&self, batch: &[BatchEntry], out: &mut OpOutcome) {
        let Some(point) = self.timed else { return };
        let (Some(coordinate), Some(&(at, _, steady))) = (self.coordinates.get(&point), self.points.get(&point)) else {
            return;
        };
        let steady = if at == self.step_seq { 0 } else { steady };
        let computed: Vec<u64> = batch
            .iter()
            .filter_map(|e| self.requests.get(&e.req))
            .map(|r| r.req.num_computed_tokens)
            .collect();
        out.check(PlannerEvent::TimedForward {
            point,
            steady,
            computed: &computed,
            coordinate,
        });
    }

    pub(super) fn fake_compute(&mut self, id: &str, n: u64) -> Result<OpOutcome, Mismatch> {
        let groups: Vec<(GroupKind, u64)> = self.kv.config.groups.iter().map(|g| (g.kind, g.block_size)).collect();
        let r = self
            .requests
            .get_mut(id)
            .ok_or_else(|| Mismatch(format!("fake compute of unknown request {id}")))?;
        // Fresh: nothing computed, or (admitted with a poached hit, poach.rs) only the hit,
        // whose shared blocks keep what they hold: the synthetic KV covers the rest.
        let from = r.req.num_computed_tokens;
        let fresh = from == 0 || (r.poached_tokens > 0 && from == r.hit_tokens);
        if r.req.status != RequestStatus::Running || !fresh || n <= from || n > r.req.num_tokens() {
            return Err(Mismatch(format!(
                "{id}: synthetic KV for {n} tokens needs a freshly scheduled request"
            )));
        }
        let tables = self.kv.get_block_ids(r.req.id);
        for (g, &(kind, bs)) in groups.iter().enumerate() {
            let blocks: Vec<usize> = match kind {
                GroupKind::Mamba { .. } => vec![Self::state_index(kind, bs, n)],
                _ => ((from / bs) as usize..n.div_ceil(bs) as usize).collect(),
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
}
