//! The device layout of a plan's scenario: one device group per (rank, plan group), with the
//! head shapes the kernels take.

use super::{LowerError, LowerOptions};
use crate::device::layout::{DeviceLayout, GroupKind, GroupLayout, MoeLayout, MLA_MAX_LATENT_DIM, MMA_MAX_HEAD_DIM};
use crate::plan::Plan;

fn round_up(x: u32, m: u32) -> u32 {
    x.div_ceil(m) * m
}

/// The device layout for a plan's scenario: one group per (rank, plan group).
pub fn device_layout(plan: &Plan, opts: &LowerOptions) -> Result<(DeviceLayout, Vec<String>), LowerError> {
    let s = &plan.scenario;
    let mut notes = Vec::new();
    let mut groups = Vec::new();
    for rank in 0..s.dp_ranks {
        for (i, g) in s.model.groups.iter().enumerate() {
            let bs = u32::try_from(g.block_size)
                .map_err(|_| LowerError::Unsupported(format!("group {i}: block size {}", g.block_size)))?;
            let kind = g
                .group_kind(s.scheduler.enable_caching)
                .ok_or_else(|| LowerError::Unsupported(format!("group {i}: {:?} without its size", g.kind)))?;
            let (kv_heads, q_heads, head_dim) = match kind {
                GroupKind::Mla => {
                    let d = round_up(g.head_dim.max(8), 8);
                    if d > MLA_MAX_LATENT_DIM {
                        return Err(LowerError::Unsupported(format!(
                            "group {i}: MLA latent dim {} > {MLA_MAX_LATENT_DIM}",
                            g.head_dim
                        )));
                    }
                    (1, opts.mla_q_heads, d)
                }
                GroupKind::Mamba { .. } => (g.kv_heads, g.kv_heads, round_up(g.head_dim.max(4), 4)),
                _ => {
                    let d = round_up(g.head_dim.max(4), 4);
                    if d > MMA_MAX_HEAD_DIM {
                        return Err(LowerError::Unsupported(format!(
                            "group {i}: head dim {} > {MMA_MAX_HEAD_DIM}",
                            g.head_dim
                        )));
                    }
                    (g.kv_heads, g.kv_heads * opts.q_per_kv, d)
                }
            };
            if rank == 0 && head_dim != g.head_dim {
                notes.push(format!(
                    "group {i}: device head dim {head_dim} for the plan's {} (rows carry a 4-dim tag)",
                    g.head_dim
                ));
            }
            if rank == 0 && kind == GroupKind::Mla && g.kv_heads != 1 {
                notes.push(format!("group {i}: MLA has one latent head (plan says {})", g.kv_heads));
            }
            groups.push(GroupLayout {
                kind,
                block_size_tokens: bs,
                layers: g.layers,
                kv_heads,
                q_heads,
                head_dim,
                blocks_total: s.pool_blocks,
            });
        }
    }
    let moe = (s.model.experts > 0 && s.model.top_k > 0).then_some(MoeLayout {
        hidden: opts.moe_hidden,
        ffn: opts.moe_ffn,
        experts: s.model.experts,
    });
    let layout = DeviceLayout { groups, moe };
    let problems = layout.problems();
    if !problems.is_empty() {
        return Err(LowerError::Unsupported(problems.join("; ")));
    }
    Ok((layout, notes))
}
