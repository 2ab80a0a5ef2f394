//! The coordinators (vllm_kv.md §4): how groups agree on one prefix hit, and how
//! many tokens each group may cache.

use super::block_pool::BlockPool;
use super::hash::BlockHash;
use super::manager::{empty_lists, find_longest_cache_hit_into, GroupManager};
use super::spec::{CoordinatorKind, GroupSpec};

/// Groups with equal specs, looked up jointly (hybrid `SpecGroup`).
#[derive(Debug)]
pub struct SpecGroup {
    /// The shared spec.
    pub spec: GroupSpec,
    /// Its groups.
    pub group_ids: Vec<u32>,
}

reuse_clone!(SpecGroup { spec, group_ids });

/// The agreed hit length and the longest single-group hit beyond it
/// (`num_uncached_common_prefix_tokens`); the per-group hit blocks are written
/// into the caller's lists.
pub struct CacheHit {
    /// Tokens every group accepts.
    pub hit_length: u64,
    /// The longest single-group hit beyond it.
    pub uncached_common_prefix: u64,
    /// The hybrid fixed point re-asked a non-full-attention group at a shorter length than
    /// its first answer: a later group shortened an earlier group's hit (a coverage fact).
    pub fixed_point_reasked: bool,
}

/// vLLM's KV-cache coordinator (unitary, hybrid fixed point, or no prefix cache; vllm_kv.md §4).
#[derive(Debug)]
pub struct Coordinator {
    /// Which coordinator.
    pub kind: CoordinatorKind,
    /// The scheduler block size (the lcm of the group block sizes).
    pub scheduler_block_size: u64,
    /// The hash block size (their gcd).
    pub hash_block_size: u64,
    /// Hybrid only: spec groups with full-attention specs sorted first.
    pub spec_groups: Vec<SpecGroup>,
}

reuse_clone!(Coordinator {
    kind,
    scheduler_block_size,
    hash_block_size,
    spec_groups
});

impl Coordinator {
    /// The coordinator of `kind` over `groups`.
    pub fn new(kind: CoordinatorKind, groups: &[GroupSpec], scheduler_block_size: u64, hash_block_size: u64) -> Self {
        let mut spec_groups: Vec<SpecGroup> = Vec::new();
        if kind == CoordinatorKind::Hybrid {
            for (i, g) in groups.iter().enumerate() {
                match spec_groups.iter_mut().find(|sg| sg.spec == *g) {
                    Some(sg) => sg.group_ids.push(i as u32),
                    None => spec_groups.push(SpecGroup {
                        spec: *g,
                        group_ids: vec![i as u32],
                    }),
                }
            }
            spec_groups.sort_by_key(|sg| !sg.spec.kind.is_full_attention_spec());
        }
        Coordinator {
            kind,
            scheduler_block_size,
            hash_block_size,
            spec_groups,
        }
    }

    /// Hit alignment pushed to every manager (no partial hits in the core subset).
    pub fn cache_hit_alignment(&self, groups: &[GroupSpec]) -> u64 {
        match self.kind {
            CoordinatorKind::Hybrid => self.scheduler_block_size,
            _ => groups[0].block_size,
        }
    }

    /// `get_num_cacheable_tokens`: hybrid rounds down to the scheduler block.
    pub fn num_cacheable_tokens(&self, n: u64) -> u64 {
        match self.kind {
            CoordinatorKind::Hybrid => n / self.scheduler_block_size * self.scheduler_block_size,
            _ => n,
        }
    }

    /// The longest prefix every group can take from the cache (§4); each group's hit
    /// blocks go to `blocks` (one list per group, reused); `scratch` holds lists
    /// the hybrid lookup works in, kept by the caller for their storage.
    pub fn find_longest_cache_hit(
        &self,
        pool: &BlockPool,
        managers: &[GroupManager],
        hashes: &[BlockHash],
        max_length: u64,
        blocks: &mut Vec<Vec<u32>>,
        scratch: &mut Vec<Vec<u32>>,
    ) -> CacheHit {
        let n = managers.len();
        match self.kind {
            CoordinatorKind::NoPrefixCache => {
                empty_lists(blocks, n);
                CacheHit {
                    hit_length: 0,
                    uncached_common_prefix: 0,
                    fixed_point_reasked: false,
                }
            }
            CoordinatorKind::Unitary => {
                let m = &managers[0];
                let hit_length = find_longest_cache_hit_into(
                    pool,
                    hashes,
                    self.hash_block_size,
                    max_length,
                    &[0],
                    m.spec,
                    m.spec.block_size,
                    blocks,
                );
                CacheHit {
                    hit_length,
                    uncached_common_prefix: 0,
                    fixed_point_reasked: false,
                }
            }
            CoordinatorKind::Hybrid => self.hybrid_hit(pool, n, hashes, max_length, blocks, scratch),
        }
    }

    fn hybrid_hit(
        &self,
        pool: &BlockPool,
        n: usize,
        hashes: &[BlockHash],
        max_length: u64,
        out: &mut Vec<Vec<u32>>,
        answer: &mut Vec<Vec<u32>>,
    ) -> CacheHit {
        let align = self.scheduler_block_size;
        let mut hit_length = max_length;
        let mut longest = 0u64;
        empty_lists(out, n);
        // Per group: the length of its last answer (`None` before it has one); its
        // blocks are then in `out`. `answer` is the finder's scratch, swapped into `out`.
        // On the stack for the usual few groups.
        let (mut stack, mut heap) = ([None; 8], Vec::new());
        let lengths: &mut [Option<u64>] = if n <= stack.len() {
            &mut stack[..n]
        } else {
            heap.resize(n, None);
            &mut heap
        };
        let simple = self.spec_groups.len() == 2 && self.spec_groups[0].spec.kind.is_full_attention_spec();
        let mut reasked = false;
        loop {
            let mut curr = hit_length;
            for sg in &self.spec_groups {
                let first = lengths[sg.group_ids[0] as usize];
                if let Some(len) = first.filter(|_| sg.spec.kind.is_full_attention_spec()) {
                    curr = curr.min(len);
                    continue;
                }
                reasked |= first.is_some_and(|len| curr < len);
                let len = find_longest_cache_hit_into(
                    pool,
                    hashes,
                    self.hash_block_size,
                    curr,
                    &sg.group_ids,
                    sg.spec,
                    align,
                    answer,
                );
                curr = len;
                for (gid, b) in sg.group_ids.iter().zip(answer.iter_mut()) {
                    std::mem::swap(&mut out[*gid as usize], b);
                    lengths[*gid as usize] = Some(len);
                }
                longest = longest.max(curr);
            }
            if curr >= hit_length {
                break;
            }
            hit_length = curr;
            if simple {
                break;
            }
        }
        for sg in self
            .spec_groups
            .iter()
            .filter(|sg| sg.spec.kind.is_full_attention_spec())
        {
            let keep = hit_length.div_ceil(sg.spec.block_size) as usize;
            for gid in &sg.group_ids {
                out[*gid as usize].truncate(keep);
            }
        }
        CacheHit {
            hit_length,
            uncached_common_prefix: longest.saturating_sub(hit_length),
            fixed_point_reasked: reasked,
        }
    }
}
