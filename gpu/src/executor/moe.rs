//! MoE on the device: the expert weights, the scratch a run's MoE ops share, their launches
//! and the routing counts read back.

use super::prepare::{Prepared, PreparedDecode};
use super::{cfg, GpuExecutor, MoeRouting};
use crate::error::GpuError;
use crate::program::{DecodeOp, GpuOp, GpuProgram, MoeOp};
use cudarc::driver::{CudaSlice, PushKernelArg};

/// The router and expert weights, initialised on the device (`moe_init`).
pub(super) struct MoeDevice {
    pub(super) router: CudaSlice<u16>,
    pub(super) w1: CudaSlice<u16>,
    pub(super) w2: CudaSlice<u16>,
}

/// Activations, per-expert token lists and routing counts, sized for the largest MoE op.
pub(super) struct MoeScratch {
    pub(super) x: CudaSlice<f32>,
    pub(super) hb: CudaSlice<f32>,
    pub(super) y: CudaSlice<f32>,
    pub(super) lists: CudaSlice<u32>,
    pub(super) wlist: CudaSlice<f32>,
    pub(super) counts: CudaSlice<u32>,
}

/// A `Moe` op with its tokens on the device.
pub(super) struct PreparedMoe {
    pub(super) tokens: CudaSlice<u32>,
    pub(super) ntok: u32,
    pub(super) top_k: u32,
    pub(super) counts_off: usize,
    pub(super) step: usize,
    pub(super) op: usize,
    /// Hidden-state routing: per token the offset of its row in the output of the step's
    /// latest decode (first launch), and the row length; `None` routes on token ids.
    pub(super) hidden: Option<(CudaSlice<u32>, i32)>,
}

/// Tokens of the program's largest MoE op (0 without one).
pub(super) fn max_moe_tokens(program: &GpuProgram) -> usize {
    program
        .steps
        .iter()
        .flat_map(|s| &s.ops)
        .filter_map(|op| match op {
            GpuOp::Moe(MoeOp { tokens, .. }) => Some(tokens.len()),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

impl GpuExecutor {
    pub(super) fn init_moe(&mut self) -> Result<(), GpuError> {
        let Some(m) = self.layout.moe else {
            return Ok(());
        };
        let (h, f, e) = (m.hidden as usize, m.ffn as usize, m.experts as usize);
        let router = self.stream.alloc_zeros::<u16>(e * h)?;
        let w1 = self.stream.alloc_zeros::<u16>(e * f * h)?;
        let w2 = self.stream.alloc_zeros::<u16>(e * h * f)?;
        let init = &self.common["moe_init"];
        for (salt, w) in [(1u32, &router), (2, &w1), (3, &w2)] {
            let n = w.len() as u64;
            // SAFETY: moe_init(u16*, u64, u32) writes n elements of w.
            unsafe {
                self.stream
                    .launch_builder(init)
                    .arg(w)
                    .arg(&n)
                    .arg(&salt)
                    .launch(cfg((1024, 1, 1), 256, 0))
            }?;
        }
        self.moe = Some(MoeDevice { router, w1, w2 });
        Ok(())
    }

    pub(super) fn moe_scratch(&self, max_tokens: usize, counts_words: usize) -> Result<Option<MoeScratch>, GpuError> {
        let Some(m) = self.layout.moe else {
            return Ok(None);
        };
        if max_tokens == 0 {
            return Ok(None);
        }
        let (h, f, e) = (m.hidden as usize, m.ffn as usize, m.experts as usize);
        Ok(Some(MoeScratch {
            x: self.stream.alloc_zeros(max_tokens * h)?,
            hb: self.stream.alloc_zeros(e * max_tokens * f)?,
            y: self.stream.alloc_zeros(max_tokens * h)?,
            lists: self.stream.alloc_zeros(e * max_tokens)?,
            wlist: self.stream.alloc_zeros(e * max_tokens)?,
            counts: self.stream.alloc_zeros(counts_words.max(1))?,
        }))
    }

    /// Row offsets (into the first launch's output of decode `pd`, prepared from `d`) of the
    /// attention output each token of hidden-state MoE `m` routes on: the request's last layer,
    /// every query head. `None` when the decode has no launch.
    pub(super) fn hidden_rows(
        &self,
        pd: &PreparedDecode,
        d: &DecodeOp,
        m: &MoeOp,
    ) -> Result<Option<(CudaSlice<u32>, i32)>, GpuError> {
        let Some(l) = pd.launches.first() else {
            return Ok(None);
        };
        let g = &self.layout.groups[l.group];
        let (layers, row) = (g.layers as usize, (g.q_heads * g.head_dim) as usize);
        let rows: Vec<u32> = m
            .hidden
            .iter()
            .map(|&s| {
                if s == crate::program::HIDDEN_NONE {
                    return crate::program::HIDDEN_NONE;
                }
                let req = d.seqs[s as usize].req;
                let j = l.reqs.iter().position(|&r| r == req).unwrap_or(0);
                ((j * layers + layers - 1) * row) as u32
            })
            .collect();
        Ok(Some((self.upload(rows)?, row as i32)))
    }

    /// Routes, then runs the up and down projections of one MoE op.
    pub(super) fn launch_moe(
        &self,
        p: &PreparedMoe,
        moe: Option<&mut MoeScratch>,
        last_out: Option<&CudaSlice<f32>>,
    ) -> Result<(), GpuError> {
        let PreparedMoe {
            tokens,
            ntok,
            top_k,
            counts_off,
            hidden,
            ..
        } = p;
        let (Some(m), Some(w), Some(s)) = (self.layout.moe, &self.moe, moe) else {
            unreachable!("validated: MoE ops need a MoE layout")
        };
        let (h, f, e) = (m.hidden as i32, m.ffn as i32, m.experts as i32);
        let (nt, k) = (*ntok as i32, *top_k as i32);
        let mut y = s.y.slice_mut(..(*ntok as usize) * m.hidden as usize);
        self.stream.memset_zeros(&mut y)?;
        let counts = s.counts.slice(*counts_off..*counts_off + m.experts as usize);
        let (a, arow, an) = match (hidden, last_out) {
            (Some((rows, n)), Some(out)) => (out, rows, *n),
            _ => (&s.x, &s.lists, 0i32),
        };
        let beta = crate::program::MOE_HIDDEN_BIAS;
        // SAFETY: MoE kernels index X/Hb/Y/lists by token < ntok and expert < E, all sized
        // for the largest MoE op of the program.
        unsafe {
            self.stream
                .launch_builder(&self.common["moe_route"])
                .arg(tokens)
                .arg(&w.router)
                .arg(&h)
                .arg(&e)
                .arg(&k)
                .arg(&nt)
                .arg(&s.x)
                .arg(&counts)
                .arg(&s.lists)
                .arg(&s.wlist)
                .arg(a)
                .arg(arow)
                .arg(&an)
                .arg(&beta)
                .launch(cfg((*ntok, 1, 1), 128, 4 * m.experts))?;
            self.stream
                .launch_builder(&self.common["moe_up"])
                .arg(&w.w1)
                .arg(&s.x)
                .arg(&counts)
                .arg(&s.lists)
                .arg(&s.hb)
                .arg(&h)
                .arg(&f)
                .arg(&nt)
                .launch(cfg((m.experts, m.ffn / 64, 1), 128, 0))?;
            self.stream
                .launch_builder(&self.common["moe_down"])
                .arg(&w.w2)
                .arg(&s.hb)
                .arg(&counts)
                .arg(&s.lists)
                .arg(&s.wlist)
                .arg(&s.y)
                .arg(&h)
                .arg(&f)
                .arg(&nt)
                .launch(cfg((m.experts, m.hidden / 64, 1), 128, 0))?;
        }
        Ok(())
    }

    /// How every MoE op of the run routed its tokens, read back from the scratch counts.
    pub(super) fn moe_routes(&self, s: &MoeScratch, prepared: &[Vec<Prepared>]) -> Result<Vec<MoeRouting>, GpuError> {
        let mut routes = Vec::new();
        let counts = self.stream.clone_dtoh(&s.counts)?;
        let experts = self.layout.moe.map_or(0, |m| m.experts as usize);
        for ops in prepared {
            for p in ops {
                if let Prepared::Moe(PreparedMoe {
                    counts_off, step, op, ..
                }) = p
                {
                    routes.push(MoeRouting {
                        step: *step,
                        op: *op,
                        tokens_per_expert: counts[*counts_off..*counts_off + experts].to_vec(),
                    });
                }
            }
        }
        Ok(routes)
    }
}
