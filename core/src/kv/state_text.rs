//! Tests only: the whole state of a model as text, in a canonical order (no map
//! iteration order, no change counters, no spare storage), so that two models that
//! took different code paths can be compared after every op.

use std::fmt::Write;

use super::kv_cache_manager::KvCacheManager;

/// Everything a later op can read: the pool (ref counts, the free queue in order, every
/// key and its blocks, every block's keys) and each group's per-request state.
pub fn model_state(kv: &KvCacheManager) -> String {
    let p = &kv.pool;
    let mut s = String::new();
    let refs: Vec<u32> = (0..p.num_blocks()).map(|b| p.ref_cnt(b)).collect();
    let queue: Vec<u32> = p.free_queue().collect();
    let back: Vec<u32> = p.free_queue_back().collect();
    writeln!(s, "refs {refs:?}\nqueue {queue:?}\nback {back:?}").unwrap();
    writeln!(s, "entries {:?}", p.cache_entries()).unwrap();
    writeln!(s, "secondary {:?}", p.secondary_entries()).unwrap();
    for b in p.cached_block_ids() {
        writeln!(s, "tag {b} {:?}", p.block_hash(b)).unwrap();
    }
    let in_queue: Vec<bool> = (0..p.num_blocks()).map(|b| p.in_free_queue(b)).collect();
    writeln!(s, "in_queue {in_queue:?} evictions {}", p.evictions()).unwrap();
    for (g, m) in kv.groups.iter().enumerate() {
        writeln!(s, "group {} {:?}", m.group_id, m.spec).unwrap();
        writeln!(s, "  with tables {:?}", kv.request_ids(g)).unwrap();
        for req in kv.entry_ids() {
            let table = kv.table_stamped(g, req);
            let (cached, mamba) = (kv.num_cached_blocks(g, req), kv.mamba_entry(g, req));
            writeln!(
                s,
                "  req {req} table {:?} cached {cached:?} mamba {mamba:?}",
                table.1.map(|_| table.0)
            )
            .unwrap();
        }
        writeln!(s, "  cached this step {:?}", m.cached_this_step_sorted()).unwrap();
    }
    s
}
