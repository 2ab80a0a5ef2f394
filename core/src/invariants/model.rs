//! Invariants of the KV-cache model itself (vllm_kv.md §7, items 1–6).

use super::{InvariantId, Violation};
use crate::kv::{KvCacheManager, NULL_BLOCK};

/// The model-invariant IDs, in catalog order.
pub const MODEL_INVARIANTS: [&str; 5] = ["KV-REF", "KV-FREEQ", "KV-CACHE", "KV-CONSERVE", "KV-NULL"];

/// Check every model invariant; `retained` lists references held outside any
/// block table (copy-on-write retentions, deferred frees), one entry per reference.
/// Returns every violation found (empty = all hold).
pub fn check_model(kv: &KvCacheManager, retained: &[u32]) -> Vec<Violation> {
    let mut out = Vec::new();
    check_ref_counts(kv, retained, &mut out);
    check_free_queue(kv, &mut out);
    check_prefix_cache(kv, &mut out);
    check_conservation(kv, &mut out);
    check_null_block(kv, &mut out);
    out
}

/// KV-REF: a block's ref count equals the number of holders (table entries across
/// requests and groups, plus retained references); no table holds a block twice.
fn check_ref_counts(kv: &KvCacheManager, retained: &[u32], out: &mut Vec<Violation>) {
    let mut holders = vec![0u32; kv.pool.num_blocks() as usize];
    // The table (numbered from 1) that last counted each block, to spot a block twice in one.
    let mut last_seen = vec![0u32; kv.pool.num_blocks() as usize];
    let mut table = 0u32;
    for (g, m) in kv.groups.iter().enumerate() {
        for req in kv.request_ids(g) {
            table += 1;
            for &b in kv.table(g, req).iter().filter(|&&b| b != NULL_BLOCK) {
                if last_seen[b as usize] == table {
                    out.push(Violation {
                        id: InvariantId::KvRef,
                        detail: format!("block {b} appears twice in request {req}'s group {} table", m.group_id),
                    });
                }
                last_seen[b as usize] = table;
                holders[b as usize] += 1;
            }
        }
    }
    for &b in retained {
        holders[b as usize] += 1;
    }
    for b in 1..kv.pool.num_blocks() {
        let (r, h) = (kv.pool.ref_cnt(b), holders[b as usize]);
        if r != h {
            out.push(Violation {
                id: InvariantId::KvRef,
                detail: format!("block {b} has ref_cnt {r} but {h} holders"),
            });
            return;
        }
    }
}

/// KV-FREEQ: a non-null block is in the free queue iff its ref count is 0.
fn check_free_queue(kv: &KvCacheManager, out: &mut Vec<Violation>) {
    for b in 1..kv.pool.num_blocks() {
        let (q, r) = (kv.pool.in_free_queue(b), kv.pool.ref_cnt(b));
        if q != (r == 0) {
            out.push(Violation {
                id: InvariantId::KvFreeq,
                detail: format!("block {b}: in free queue = {q}, ref_cnt = {r}"),
            });
            return;
        }
    }
}

/// KV-CACHE: every prefix-cache entry points at a block holding that key, and
/// every key a block holds is registered. The scan is order-free; only when it
/// finds a problem is the sorted (deterministic) scan run to report the first one.
fn check_prefix_cache(kv: &KvCacheManager, out: &mut Vec<Violation>) {
    let p = &kv.pool;
    let mut ok = true;
    p.for_each_entry(|key, ids| ok &= ids.iter().all(|&id| p.holds_key(id, key)));
    for b in 1..p.num_blocks() {
        if let Some(tag) = p.block_hash(b) {
            ok &= p.blocks_for_key(&tag.key).contains(&b);
        }
    }
    p.for_each_secondary(|b, key| ok &= p.blocks_for_key(key).contains(&b));
    if ok {
        return;
    }
    for (key, ids) in p.cache_entries() {
        if let Some(id) = ids.iter().find(|&&id| !p.holds_key(id, &key)) {
            out.push(Violation {
                id: InvariantId::KvCache,
                detail: format!(
                    "cache entry (hash {:032x}, group {}) points at block {id}, which does not hold it",
                    key.hash, key.group
                ),
            });
            return;
        }
    }
    for b in 1..p.num_blocks() {
        if let Some(key) = p.keys_of(b).into_iter().find(|k| !p.blocks_for_key(k).contains(&b)) {
            out.push(Violation {
                id: InvariantId::KvCache,
                detail: format!("block {b} holds key (group {}) missing from the cache map", key.group),
            });
            return;
        }
    }
}

/// KV-CONSERVE: free blocks plus referenced blocks account for every usable block.
fn check_conservation(kv: &KvCacheManager, out: &mut Vec<Violation>) {
    let referenced = (1..kv.pool.num_blocks()).filter(|&b| kv.pool.ref_cnt(b) > 0).count();
    let free = kv.pool.num_free_blocks();
    let usable = kv.pool.num_blocks() as usize - 1;
    if free + referenced != usable {
        out.push(Violation {
            id: InvariantId::KvConserve,
            detail: format!("{free} free + {referenced} referenced != {usable} usable blocks"),
        });
    }
}

/// KV-NULL: the null block is never free, never referenced, never cached.
fn check_null_block(kv: &KvCacheManager, out: &mut Vec<Violation>) {
    let p = &kv.pool;
    if p.in_free_queue(NULL_BLOCK) || p.ref_cnt(NULL_BLOCK) != 0 || p.block_hash(NULL_BLOCK).is_some() {
        out.push(Violation {
            id: InvariantId::KvNull,
            detail: format!(
                "null block: in free queue = {}, ref_cnt = {}, hashed = {}",
                p.in_free_queue(NULL_BLOCK),
                p.ref_cnt(NULL_BLOCK),
                p.block_hash(NULL_BLOCK).is_some()
            ),
        });
    }
}
