//! Which experts a MoE op's tokens choose, as the cost model sees it.
//!
//! With token routing (`MoeInput::Token`) the device's router is a pure function of the token
//! ids, and it is exact in f32 (bf16 weights `k/2048`, inputs `k/128`, sums below 2^24 ulps), so
//! [`TokenRouter::route_tokens`] replicates it with integers, ties included (lowest expert first, as
//! `moe_route` picks). Hidden-state routing depends on the attention output, which the model
//! does not compute: [`expected_routing`] gives what uniformly random routing would.

use std::collections::BTreeMap;

use kvsim_core::device::content::{content_hash, fmix32, PLANE_MOE};
use serde::{Deserialize, Serialize};

/// How a MoE op's (token, expert) pairs spread over the experts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Routing {
    /// Tokens x top-k.
    pub pairs: u64,
    /// Experts with at least one token.
    pub active: f64,
    /// Tokens of the most loaded expert.
    pub max_load: f64,
    /// Active experts that the previous MoE op of the program did not use: their weights
    /// come from DRAM; the others' are likely still in L2. Set by [`super::desc::describe`].
    #[serde(default)]
    pub fresh: f64,
    /// The coldest chosen expert's reuse distance in bytes, what the L2 rule compared with the
    /// cache: the weights of the experts used since its last use (its own included) plus the
    /// bytes other kernels streamed since. Absent where a chosen expert had no earlier use, or
    /// the routing is expected over some of the experts (which ones is not known). Set by
    /// [`super::desc::describe`]; the model reads `fresh` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coldest_reuse_bytes: Option<f64>,
    /// `measured` (the device's counts), `replicated` (token routing recomputed) or
    /// `expected` (uniformly random routing).
    pub source: String,
    /// Tokens per expert, when known (measured or replicated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Vec<u32>>,
}

impl Routing {
    /// Tokens per expert: the counts where known, else the pairs spread evenly over the
    /// active experts (expected routing), the most loaded one at `max_load`.
    pub fn expert_loads(&self, experts: u32) -> Vec<f64> {
        if let Some(c) = &self.counts {
            return c.iter().map(|&n| f64::from(n)).collect();
        }
        let active = (self.active.round() as usize).min(experts as usize);
        let mut loads = vec![0.0; experts as usize];
        if active > 0 {
            let even = self.pairs as f64 / active as f64;
            loads[..active].iter_mut().for_each(|l| *l = even);
            loads[0] = self.max_load.max(even);
        }
        loads
    }

    /// From per-expert token counts.
    pub fn from_counts(counts: &[u32], source: &str) -> Routing {
        let active = counts.iter().filter(|&&c| c > 0).count() as f64;
        Routing {
            pairs: counts.iter().map(|&c| u64::from(c)).sum(),
            active,
            max_load: f64::from(counts.iter().copied().max().unwrap_or(0)),
            fresh: active,
            coldest_reuse_bytes: None,
            source: source.into(),
            counts: Some(counts.to_vec()),
        }
    }

    /// Sets [`Routing::fresh`] from the routing of the program's previous MoE op (`None`: no
    /// previous op, every active expert is fresh) over `experts` experts of `expert_bytes`
    /// weight bytes each: experts the previous op did not use are fresh, and of those it used,
    /// the share that cannot have stayed in `l2_bytes` of cache.
    pub fn set_fresh(&mut self, prev: Option<&Routing>, experts: u32, expert_bytes: f64, l2_bytes: f64) {
        let Some(p) = prev else {
            self.fresh = self.active;
            return;
        };
        let overlap = match (&self.counts, &p.counts) {
            (Some(now), Some(before)) => now.iter().zip(before).filter(|(&n, &b)| n > 0 && b > 0).count() as f64,
            // Independent uniform choices: a fraction prev.active / experts was used before.
            _ => self.active * (p.active / f64::from(experts.max(1))).min(1.0),
        };
        let kept = (l2_bytes / (p.active * expert_bytes).max(1.0)).min(1.0);
        self.fresh = (self.active - overlap) + overlap * (1.0 - kept);
    }
}

/// Which experts' weights are still in L2 from earlier MoE ops: least recently used first out.
/// An expert used by an earlier op is resident when the weights of the experts used since (its
/// own included) fit in the cache. The previous op alone said too little: a prefill that
/// touched every expert leaves them all resident for the decodes after it, and on the H200 a
/// one-token MoE after such a prefill ran 13 µs faster than after a one-token prefill (the
/// cold pass over fresh weights; `unseen-mamba`, docs/timing-history.md).
#[derive(Clone, Debug, Default)]
pub struct ExpertCache {
    /// Per expert: the MoE op that last used it, and the bytes streamed until then.
    last_use: Vec<Option<(u64, f64)>>,
    /// MoE ops seen.
    ops: u64,
    /// Bytes other kernels moved through the cache so far (K/V read and written, states,
    /// zeroed and copied blocks): they evict weights as surely as other experts do.
    streamed: f64,
}

impl ExpertCache {
    /// Sets `routing.fresh` for the next MoE op and records its use. Without per-expert counts
    /// (expected routing) the previous op's rule applies ([`Routing::set_fresh`]), unless the
    /// op reaches every expert: calibration describes runs with every op's counts (measured
    /// or replicated), and a prediction replicates up to `EXACT_ROUTING_MAX_TOKENS` tokens, so
    /// a longer prefill must leave its experts in the cache as a counted one does.
    pub fn use_experts(
        &mut self,
        routing: &mut Routing,
        prev: Option<&Routing>,
        experts: u32,
        expert_bytes: f64,
        l2_bytes: f64,
    ) {
        let counts = match &routing.counts {
            Some(c) => c.clone(),
            // Expected routing that reaches every expert (a prefill beyond the replicated
            // length) used each one: the cache follows it as it follows counted ops.
            None if experts > 0 && routing.active > f64::from(experts) - 0.5 => vec![1; experts as usize],
            None => {
                routing.set_fresh(prev, experts, expert_bytes, l2_bytes);
                routing.coldest_reuse_bytes = None;
                self.last_use.clear();
                return;
            }
        };
        if self.last_use.len() != counts.len() {
            self.last_use = vec![None; counts.len()];
        }
        let mut fresh = 0.0;
        let mut coldest = Some(0.0f64);
        for (e, &n) in counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let distance = self.last_use[e].map(|(t, at)| {
                let since = self.last_use.iter().filter(|u| u.is_some_and(|(u, _)| u >= t)).count();
                since as f64 * expert_bytes + (self.streamed - at)
            });
            if !distance.is_some_and(|d| d <= l2_bytes) {
                fresh += 1.0;
            }
            coldest = coldest.zip(distance).map(|(c, d)| c.max(d));
        }
        for (e, &n) in counts.iter().enumerate() {
            if n > 0 {
                self.last_use[e] = Some((self.ops, self.streamed));
            }
        }
        self.ops += 1;
        routing.fresh = fresh;
        routing.coldest_reuse_bytes = coldest.filter(|_| routing.active > 0.0);
    }

    /// Another kernel moved `bytes` through the cache.
    pub fn stream(&mut self, bytes: f64) {
        self.streamed += bytes;
    }
}

/// The device router's bf16 weight byte for (expert, hidden index): `moe_init` with salt 1.
fn router_byte(e: u32, h: u32, hidden: u32) -> i32 {
    let i = u64::from(e) * u64::from(hidden) + u64::from(h);
    let b = fmix32((i as u32) ^ fmix32(((i >> 32) as u32).wrapping_add(1)));
    (b & 0xff) as i32 - 128
}

/// Token routing, replicated on the host.
pub struct TokenRouter {
    experts: u32,
    hidden: u32,
    /// `[expert][hidden]` weight bytes minus 128.
    weights: Vec<i32>,
    cache: BTreeMap<(u32, u32), Vec<u32>>,
}

impl TokenRouter {
    /// A router over `experts` experts of hidden size `hidden`.
    pub fn new(experts: u32, hidden: u32) -> TokenRouter {
        let weights = (0..experts)
            .flat_map(|e| (0..hidden).map(move |h| router_byte(e, h, hidden)))
            .collect();
        TokenRouter {
            experts,
            hidden,
            weights,
            cache: BTreeMap::new(),
        }
    }

    /// The `top_k` experts token `tok` chooses, best first.
    pub fn choose(&mut self, tok: u32, top_k: u32) -> &[u32] {
        let (experts, hidden) = (self.experts as usize, self.hidden as usize);
        let weights = &self.weights;
        self.cache.entry((tok, top_k)).or_insert_with(|| {
            // |w|, |x| <= 128 and hidden <= 2^10 terms: sums fit in i32.
            let x: Vec<i32> = (0..hidden as u32)
                .map(|h| (content_hash(tok, 0, 1023, 0, h, PLANE_MOE) & 0xff) as i32 - 128)
                .collect();
            let mut logits: Vec<Option<i64>> = (0..experts)
                .map(|e| {
                    let dot: i64 = weights[e * hidden..][..hidden]
                        .chunks(256)
                        .zip(x.chunks(256))
                        .map(|(w, v)| i64::from(w.iter().zip(v).map(|(a, b)| a * b).sum::<i32>()))
                        .sum();
                    Some(dot)
                })
                .collect();
            let mut out = Vec::with_capacity(top_k as usize);
            for _ in 0..top_k.min(experts as u32) {
                // Strictly greater: the lowest expert wins a tie, as in `moe_route`.
                let mut best: Option<(usize, i64)> = None;
                for (e, l) in logits.iter().enumerate() {
                    if let Some(v) = *l {
                        if best.is_none_or(|(_, b)| v > b) {
                            best = Some((e, v));
                        }
                    }
                }
                let Some((e, _)) = best else { break };
                logits[e] = None;
                out.push(e as u32);
            }
            out
        })
    }

    /// Per-expert token counts of a MoE op over `tokens`.
    pub fn route_tokens(&mut self, tokens: &[u32], top_k: u32) -> Vec<u32> {
        let mut counts = vec![0u32; self.experts as usize];
        for &t in tokens {
            for &e in self.choose(t, top_k) {
                counts[e as usize] += 1;
            }
        }
        counts
    }
}

/// Expected routing of `tokens` tokens choosing `top_k` distinct experts of `experts`
/// uniformly at random: active experts `E (1 - (1 - k/E)^T)`; the most loaded expert's tokens
/// from the binomial law of one expert's load, experts taken as independent.
pub fn expected_routing(tokens: u64, top_k: u32, experts: u32) -> Routing {
    let (e, k) = (f64::from(experts.max(1)), f64::from(top_k.min(experts)));
    let p = (k / e).clamp(0.0, 1.0);
    let t = tokens as f64;
    let active = e * (1.0 - (1.0 - p).powf(t));
    Routing {
        pairs: tokens * u64::from(top_k.min(experts)),
        active,
        max_load: expected_max_binomial(tokens, p, experts, tokens * u64::from(top_k.min(experts))),
        fresh: active,
        coldest_reuse_bytes: None,
        source: "expected".into(),
        counts: None,
    }
}

/// E[max of `n` independent Binomial(`trials`, `p`)] = sum over m >= 1 of P(max >= m), with
/// P(max >= m) = 1 where `pairs` balls in `n` bins force it (pigeonhole).
fn expected_max_binomial(trials: u64, p: f64, n: u32, pairs: u64) -> f64 {
    let forced = pairs.div_ceil(u64::from(n.max(1)));
    if trials == 0 || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return trials as f64;
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    let mut ln_pmf = trials as f64 * ln_q; // P(X = 0)
    let mut cdf = ln_pmf.exp();
    let mut sum = 0.0;
    for m in 1..=trials {
        // P(max >= m) = 1 - P(X <= m - 1)^n
        let tail = if m <= forced {
            1.0
        } else {
            1.0 - cdf.min(1.0).powi(n as i32)
        };
        if tail < 1e-12 {
            break;
        }
        sum += tail;
        let mf = m as f64;
        ln_pmf += ((trials as f64 - mf + 1.0) / mf).ln() + ln_p - ln_q;
        cdf += ln_pmf.exp();
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_routing_is_top_k_distinct_and_deterministic() {
        let mut r = TokenRouter::new(16, 256);
        let a = r.choose(42, 4).to_vec();
        assert_eq!(a.len(), 4);
        let mut s = a.clone();
        s.sort();
        s.dedup();
        assert_eq!(s.len(), 4);
        assert_eq!(TokenRouter::new(16, 256).choose(42, 4), a.as_slice());
        let counts = r.route_tokens(&(0..100).collect::<Vec<_>>(), 2);
        assert_eq!(counts.iter().sum::<u32>(), 200);
        // Random-looking token ids spread over most experts.
        assert!(counts.iter().filter(|&&c| c > 0).count() >= 12, "{counts:?}");
    }

    /// An expert stays resident until the weights of experts used after it, plus the bytes
    /// other kernels streamed since, no longer fit; without counts the previous op's rule holds.
    #[test]
    fn experts_stay_in_l2_until_newer_experts_or_streamed_bytes_push_them_out() {
        let mb = 1024.0 * 1024.0;
        let (bytes, l2) = (2.0 * mb, 8.0 * mb); // four experts fit
        let mut cache = ExpertCache::default();
        let fresh = |cache: &mut ExpertCache, counts: &[u32]| {
            let mut r = Routing::from_counts(counts, "replicated");
            cache.use_experts(&mut r, None, counts.len() as u32, bytes, l2);
            r.fresh
        };
        assert_eq!(
            fresh(&mut cache, &[1, 1, 1, 1, 0, 0]),
            4.0,
            "first use: every expert cold"
        );
        assert_eq!(
            fresh(&mut cache, &[0, 1, 0, 0, 0, 0]),
            0.0,
            "used two ops ago, still resident"
        );
        assert_eq!(fresh(&mut cache, &[0, 0, 0, 0, 1, 1]), 2.0);
        // Since expert 0's use, experts 0-5 were used: six do not fit in four.
        assert_eq!(fresh(&mut cache, &[1, 0, 0, 0, 0, 0]), 1.0);
        assert_eq!(fresh(&mut cache, &[1, 0, 0, 0, 0, 0]), 0.0);
        // The description names the coldest chosen expert's distance: expert 0 used last op
        // (2 MiB), expert 5 three ops ago with experts 4, 0 and itself since (6 MiB).
        let mut r = Routing::from_counts(&[1, 0, 0, 0, 0, 1], "replicated");
        cache.use_experts(&mut r, None, 6, bytes, l2);
        assert_eq!((r.fresh, r.coldest_reuse_bytes), (0.0, Some(6.0 * mb)));
        let mut r = Routing::from_counts(&[1, 0, 0, 0, 0, 0], "replicated");
        cache.use_experts(&mut r, None, 6, bytes, l2);
        assert_eq!(
            r.coldest_reuse_bytes,
            Some(4.0 * mb),
            "experts 0 and 5 since expert 0's last use"
        );
        cache.stream(7.0 * mb);
        assert_eq!(
            fresh(&mut cache, &[1, 0, 0, 0, 0, 0]),
            1.0,
            "7 MiB of K/V streamed past it"
        );
        // A chosen expert never used before has no distance.
        let mut r = Routing::from_counts(&[1, 0, 1, 0, 0, 0], "replicated");
        let mut empty = ExpertCache::default();
        empty.use_experts(&mut r, None, 6, bytes, l2);
        assert_eq!((r.fresh, r.coldest_reuse_bytes), (2.0, None));
        // Expected routing that reaches every expert (a long prefill) used each one: four
        // experts (8 MiB) stay resident after it, as after a counted op.
        let mut r = expected_routing(5000, 2, 4);
        cache.use_experts(&mut r, None, 4, bytes, l2);
        assert_eq!(r.counts, None);
        let mut r = Routing::from_counts(&[1, 0, 0, 1], "replicated");
        cache.use_experts(&mut r, None, 4, bytes, l2);
        assert_eq!((r.fresh, r.coldest_reuse_bytes), (0.0, Some(8.0 * mb)));
        // Expected routing over some experts (unknown which): the previous op's rule, and the
        // cache forgets.
        let mut r = expected_routing(1, 2, 6);
        cache.use_experts(&mut r, None, 6, bytes, l2);
        assert_eq!(r.fresh, r.active);
        assert_eq!(r.coldest_reuse_bytes, None);
        let mut r = Routing::from_counts(&[1, 0, 0, 0, 0, 0], "replicated");
        cache.use_experts(&mut r, None, 6, bytes, l2);
        assert_eq!(r.fresh, 1.0);
    }

    #[test]
    fn expectation_matches_simple_cases() {
        let one = expected_routing(1, 4, 64);
        assert!((one.active - 4.0).abs() < 1e-9);
        assert!((one.max_load - 1.0).abs() < 1e-9);
        assert_eq!(one.pairs, 4);
        let many = expected_routing(4096, 4, 64);
        assert!((many.active - 64.0).abs() < 1e-6);
        // Mean load 256; the max of 64 is a few standard deviations (~15.5) above it.
        assert!(many.max_load > 270.0 && many.max_load < 320.0, "{}", many.max_load);
        assert_eq!(expected_routing(0, 4, 64).max_load, 0.0);
    }
}
