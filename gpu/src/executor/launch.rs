//! The launches of prepared ops: one kernel launch per op kind (MoE's three are in `moe`).

use super::moe::MoeScratch;
use super::prepare::{Prepared, PreparedDecode, PreparedState};
use super::{cfg, GpuExecutor};
use crate::error::GpuError;
use crate::kernels::RECORD_WORDS;
use cudarc::driver::{CudaSlice, PushKernelArg};
use std::time::Instant;

impl GpuExecutor {
    /// Issues one prepared op (timing marks excepted: the run loop handles them).
    pub(super) fn launch(
        &self,
        p: &Prepared,
        verify: &CudaSlice<u32>,
        moe: Option<&mut MoeScratch>,
        last_out: Option<&CudaSlice<f32>>,
    ) -> Result<(), GpuError> {
        match p {
            Prepared::Merged => {}
            Prepared::WriteKv {
                group,
                tokens,
                positions,
                blocks,
                ntok,
            } => self.launch_write_kv(*group, tokens, positions, blocks, *ntok)?,
            Prepared::Decode(d) => self.launch_decode(d, verify)?,
            Prepared::State(s) => self.launch_state(s, verify)?,
            Prepared::Zero { group, blocks, n } => self.launch_blocks("zero_blocks", *group, blocks, *n)?,
            Prepared::Copy { group, pairs, n } => self.launch_blocks("copy_blocks", *group, pairs, *n)?,
            Prepared::Moe(m) => self.launch_moe(m, moe, last_out)?,
            Prepared::HostWork(nanos) => {
                let t = Instant::now();
                while (t.elapsed().as_nanos() as u64) < *nanos {
                    std::hint::spin_loop();
                }
            }
            Prepared::Begin(_) | Prepared::End(_) => unreachable!("marks are handled by execute"),
        }
        Ok(())
    }

    /// The K/V rows of a run of prefills into one group.
    fn launch_write_kv(
        &self,
        group: usize,
        tokens: &CudaSlice<u32>,
        positions: &CudaSlice<u32>,
        blocks: &CudaSlice<u32>,
        ntok: u32,
    ) -> Result<(), GpuError> {
        let g = &self.layout.groups[group];
        let (layers, heads, dim, bs) = (
            g.layers as i32,
            g.kv_heads as i32,
            g.head_dim as i32,
            g.block_size_tokens as i32,
        );
        let planes = g.planes() as i32;
        let block_elems = g.block_elems();
        // SAFETY: write_kv writes one row per token into its (validated) block.
        unsafe {
            self.stream
                .launch_builder(&self.common["write_kv"])
                .arg(&self.pools[group])
                .arg(tokens)
                .arg(positions)
                .arg(blocks)
                .arg(&layers)
                .arg(&heads)
                .arg(&dim)
                .arg(&bs)
                .arg(&planes)
                .arg(&block_elems)
                .launch(cfg((ntok, g.layers, 1), 128, 0))
        }?;
        Ok(())
    }

    pub(super) fn launch_decode(&self, d: &PreparedDecode, verify: &CudaSlice<u32>) -> Result<(), GpuError> {
        for l in &d.launches {
            let g = &self.layout.groups[l.group];
            let module = &self.attn[&l.kernel];
            let head_tiles = g.gqa_group() / l.kernel.head_tile();
            let nseq = l.reqs.len() as u32;
            let rec = verify.slice(l.record_base * RECORD_WORDS..);
            let (layers, kv_heads, group) = (g.layers as i32, g.kv_heads as i32, g.gqa_group() as i32);
            let (bs, split_tokens, nsplit) = (
                g.block_size_tokens as i32,
                l.split.split_tokens as i32,
                l.split.nsplit as i32,
            );
            let scale_log2 = std::f32::consts::LOG2_E / (g.head_dim as f32).sqrt();
            let grid = (l.split.nsplit * head_tiles, nseq, g.layers * g.kv_heads);
            // SAFETY: argument list matches every attn_* kernel; every index stays inside the
            // buffers sized in prepare_decode_at (tables, tags, q, partials) and the pool (block
            // ids checked by validation).
            unsafe {
                self.stream
                    .launch_builder(&module.decode)
                    .arg(&self.pools[l.group])
                    .arg(&l.tables)
                    .arg(&l.table_stride)
                    .arg(&l.lo)
                    .arg(&l.hi)
                    .arg(&l.tags)
                    .arg(&l.tag_stride)
                    .arg(&l.q)
                    .arg(&l.part_o)
                    .arg(&l.part_ml)
                    .arg(&l.out)
                    .arg(&l.counters)
                    .arg(&rec)
                    .arg(&layers)
                    .arg(&kv_heads)
                    .arg(&group)
                    .arg(&bs)
                    .arg(&split_tokens)
                    .arg(&nsplit)
                    .arg(&scale_log2)
                    .launch(cfg(grid, l.kernel.threads(), l.kernel.dynamic_smem()))
            }?;
        }
        Ok(())
    }

    fn launch_state(&self, s: &PreparedState, verify: &CudaSlice<u32>) -> Result<(), GpuError> {
        let PreparedState {
            group,
            tokens,
            ntok,
            src,
            dst,
            digest,
            record,
        } = s;
        let g = &self.layout.groups[*group];
        let (heads, state_dim) = (g.kv_heads as i32, g.head_dim as i32);
        let rec = verify.slice(record * RECORD_WORDS..);
        // SAFETY: state_update touches rows of blocks src and dst (validated).
        unsafe {
            self.stream
                .launch_builder(&self.common["state_update"])
                .arg(&self.pools[*group])
                .arg(tokens)
                .arg(ntok)
                .arg(src)
                .arg(dst)
                .arg(&heads)
                .arg(&state_dim)
                .arg(&digest.tokens)
                .arg(&digest.checksum)
                .arg(&rec)
                .launch(cfg((g.layers * g.kv_heads, 1, 1), 128, 0))
        }?;
        Ok(())
    }

    /// Zeroes (`zero_blocks`, a list of ids) or copies (`copy_blocks`, a list of src, dst pairs)
    /// whole blocks.
    fn launch_blocks(&self, name: &'static str, group: usize, blocks: &CudaSlice<u32>, n: u32) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let g = &self.layout.groups[group];
        let block_vecs = g.block_bytes() / 16;
        let chunks = (block_vecs / 2048).clamp(1, 64) as u32;
        // SAFETY: whole blocks of the (validated) ids.
        unsafe {
            self.stream
                .launch_builder(&self.common[name])
                .arg(&self.pools[group])
                .arg(blocks)
                .arg(&block_vecs)
                .launch(cfg((n, chunks, 1), 256, 0))
        }?;
        Ok(())
    }
}
