//! Shadow registration (dynamo_fpm.md §3.6): a shadow borrows the chain's shared prefix
//! (ref-counted), draws a private tail (forked copy-on-write or zeroed) and is all-or-nothing;
//! and the release of the copy-on-write sources its injection queued.

use super::apply::OpOutcome;
use super::content::{random_state_tag, PrefixHashes, ZERO_TAG};
use super::{Engine, EngineReq, Mismatch};
use crate::bugs::BugMutant;
use crate::invariants::planner::PlannerEvent;
use crate::kv::{GroupKind, RequestStatus, NULL_BLOCK};
use crate::plan::{ShadowGroup, TailMode};

/// What a failed registration knew: whether its point is covered, whether the planner saw
/// the injected failure coming, whether a fault failed it.
struct FailedRegistration {
    covered: bool,
    anticipated: bool,
    injected: bool,
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn register_shadow(
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
        out.check(PlannerEvent::ShadowRegistering {
            shadow,
            deadline_passed: self.deadline_passed,
        });
        let injected_failure = self.take_injected_failure();
        let anticipated = injected_failure && !ok;
        let ok = ok && !injected_failure;
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
        let mut tables = Vec::with_capacity(self.kv.groups.len());
        let mut drawn = 0usize;
        for (g, grp) in groups.iter().enumerate() {
            let random_group = random_state && matches!(self.kv.config.groups[g].kind, GroupKind::Mamba { .. });
            tables.push(self.draw_shadow_group(shadow, g, grp, &chain_tables, random_group)?);
            drawn += grp.tail.len();
            if !random_group {
                self.fill_tail(shadow, g, grp, tail, ctx, &mut out);
            }
        }
        self.fence_check(&format!("shadow {shadow} registration"), drawn, &mut out);
        if !ok {
            let failed = FailedRegistration {
                covered,
                anticipated,
                injected: injected_failure,
            };
            self.fail_registration(shadow, groups, &tables, before, failed, &mut out);
            return Ok(out);
        }
        let r = (chain, ctx, tail, random_state);
        self.adopt_shadow(shadow, r, groups, tables, &chain_tokens, &mut out)?;
        Ok(out)
    }

    /// A `stage_failure` fault fails this registration locally. A planner that saw it coming
    /// reports the failure itself (ok = false, nothing drawn): that is a local stage failure
    /// (dynamo_fpm.md §7.3), not a coverage bug.
    fn take_injected_failure(&mut self) -> bool {
        match self.fail_registration_after {
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
        }
    }

    /// One group of a shadow: its shared blocks checked against the chain's and touched, its
    /// tail drawn from the pool as the plan recorded it. Returns the group's table.
    fn draw_shadow_group(
        &mut self,
        shadow: &str,
        g: usize,
        grp: &ShadowGroup,
        chain_tables: &[Vec<u32>],
        random_group: bool,
    ) -> Result<Vec<u32>, Mismatch> {
        // Random-KDA state groups share nothing with the chain: null placeholders
        // below the private span; the chain's state is neither referenced nor
        // modified (invariant 49).
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
        if random_group {
            // Zeroed natively, then filled with the deterministic random state
            // (the fill wins in the content model).
            let tag = random_state_tag(self.rank, shadow, g);
            for &b in &grp.tail {
                self.content[b as usize] = Some(tag);
            }
        }
        let mut t = grp.shared.clone();
        t.extend_from_slice(&grp.tail);
        Ok(t)
    }

    /// What a borrowed group's tail blocks hold: forks of the chain's blocks (each source
    /// retained until released) or zeros.
    fn fill_tail(&mut self, shadow: &str, g: usize, grp: &ShadowGroup, tail: TailMode, ctx: u64, out: &mut OpOutcome) {
        if tail == TailMode::Cow {
            out.check(PlannerEvent::TailForked {
                shadow,
                group: g,
                ctx,
                from_null: grp.cow_from.iter().chain(&grp.cow_more).any(|&b| b == NULL_BLOCK),
            });
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
    }

    /// A registration that failed: judged, and whatever it left behind kept out of the pool.
    fn fail_registration(
        &mut self,
        shadow: &str,
        groups: &[ShadowGroup],
        tables: &[Vec<u32>],
        before: (usize, usize),
        failed: FailedRegistration,
        out: &mut OpOutcome,
    ) {
        self.event("registration-failed");
        let left_behind = (self.kv.pool.num_free_blocks(), self.retained().len()) != before || !groups.is_empty();
        out.check(PlannerEvent::RegistrationFailed {
            shadow,
            covered: failed.covered,
            anticipated: failed.anticipated,
            injected: failed.injected,
            left_behind,
            groups: groups.len(),
        });
        if left_behind {
            // The blocks stay referenced by nobody but the failed attempt.
            self.phantom
                .extend(tables.iter().flatten().filter(|&&b| b != NULL_BLOCK).copied());
        }
        out.result = "registration failed".into();
    }

    /// A registered shadow becomes a running request at `ctx` holding `tables`.
    fn adopt_shadow(
        &mut self,
        shadow: &str,
        (chain, ctx, tail, random_state): (&str, u64, TailMode, bool),
        groups: &[ShadowGroup],
        mut tables: Vec<Vec<u32>>,
        chain_tokens: &[u64],
        out: &mut OpOutcome,
    ) -> Result<(), Mismatch> {
        let ngroups = self.kv.groups.len();
        let complete = groups.len() == ngroups && tables.iter().all(|t| !t.is_empty());
        out.check(PlannerEvent::ShadowRegistered {
            shadow,
            have: tables.iter().filter(|t| !t.is_empty()).count(),
            groups: ngroups,
            complete,
        });
        if !complete {
            tables.resize(ngroups, Vec::new());
        }
        // The shadow decodes position ctx: it knows the chain's tokens up to and
        // including its input token there.
        let prompt = chain_tokens[..(ctx as usize + 1).min(chain_tokens.len())].to_vec();
        let mut r = self.new_request(prompt.clone(), None);
        if tail == TailMode::Cow {
            self.fork_partial_block(chain, ctx, groups, chain_tokens, (&prompt, &mut r))?;
        }
        r.req.num_computed_tokens = ctx;
        r.req.status = RequestStatus::Running;
        r.shadow_of = Some((chain.to_string(), ctx));
        r.random_state_at = random_state.then_some(ctx);
        let num_cached: Vec<Option<u64>> = groups.iter().map(|g| g.num_cached).collect();
        self.kv.adopt_tables(r.req.id, &tables, &num_cached);
        self.requests.insert(shadow.to_string(), r);
        self.slots_check(out);
        out.result = format!("shadow tables {tables:?}");
        Ok(())
    }

    /// A copy-on-write of the chain's partial block at ctx: the shadow reads only positions
    /// below ctx, which hold the chain's tokens. When the source holds what the chain wrote
    /// there, the copy holds that prefix as the shadow sees it (dynamo_fpm.md §3.6); anything
    /// else is copied as is and fails the read.
    fn fork_partial_block(
        &mut self,
        chain: &str,
        ctx: u64,
        groups: &[ShadowGroup],
        chain_tokens: &[u64],
        (prompt, r): (&[u64], &mut EngineReq),
    ) -> Result<(), Mismatch> {
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
            let mut chain_prefix = PrefixHashes::new(bs);
            if upto > i * bs as usize
                && self.content[src as usize] == Some(chain_prefix.block_tag(chain_tokens, i, upto))
            {
                self.content[dst as usize] = Some(r.prefix[g].block_tag(prompt, i, ctx as usize));
            }
        }
        Ok(())
    }

    /// `_kvwarm_take_cow_copies` (§3.6): the copies this injection queued; copies an earlier
    /// injection left queued are not its to release.
    pub(super) fn release_cow(&mut self) -> OpOutcome {
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
}
