//! Attention-DP ranks as separate device programs (issue 23): one [`LoweredPlan`] per rank,
//! over that rank's groups only, and the per-step exchange the plan models between them.
//!
//! `lower_plan` puts every rank's pools side by side on one device (rank `r`'s group `g` is
//! device group `r * groups + g`). [`split_ranks`] cuts that program into one program per rank
//! (local groups `0..groups`, the same steps, possibly empty), so that each rank can run on its
//! own device or thread; [`RankProgram::op_map`] maps results back to the whole program.
//!
//! Every rank ends every step at an exchange (under attention DP the ranks step in lock-step:
//! dynamo_fpm.md §7.3, the blocking per-step stage round). What it carries is what the plan
//! models across ranks: the stage verdict (AND), the free blocks (the negotiated minimum,
//! §7.1) and the point the rank injected as the group sees it (after `message_lag`). The
//! lowering records each rank's message from its engine ([`LoweredPlan::exchange`]), so a
//! device run can check that what it gathered is what the simulator says the group saw.

use super::ids::GroupId;
use super::lower_plan::{LoweredPlan, OpRef};
use super::program::{GpuOp, GpuProgram, GpuStep};
use crate::plan::{FaultSpec, Plan};

/// What one rank sends at the end of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankMsg {
    /// The rank's stage verdict: false once a `stage_failure` fault failed a registration.
    pub stage_ok: bool,
    /// Free blocks of the rank's pool after the step.
    pub free_blocks: u64,
    /// The point injected in this step as the group sees it (delivered after the lag).
    pub injected: Option<u64>,
}

/// Words of a message on the wire (an all-gather of fixed-size records).
pub const MSG_WORDS: usize = 4;

/// A message as it travels: `[stage_ok, free_blocks, injected + 1 (0 = none), check]`.
pub type Wire = [u64; MSG_WORDS];

impl RankMsg {
    /// The message's words; the last one lets a receiver tell a torn or stale record.
    pub fn to_wire(self, seq: u64) -> Wire {
        let inj = self.injected.map_or(0, |p| p + 1);
        let w = [u64::from(self.stage_ok), self.free_blocks, inj];
        [w[0], w[1], w[2], check_word(seq, &w)]
    }

    /// The message in `w`, if its check word matches exchange `seq`.
    pub fn from_wire(w: &Wire, seq: u64) -> Option<RankMsg> {
        (w[3] == check_word(seq, &[w[0], w[1], w[2]]) && w[0] <= 1).then(|| RankMsg {
            stage_ok: w[0] == 1,
            free_blocks: w[1],
            injected: w[2].checked_sub(1),
        })
    }
}

fn check_word(seq: u64, w: &[u64; 3]) -> u64 {
    // Any mixing that changes with every field and the sequence number does.
    let mut h = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x6b76_7369_6d23;
    for x in w {
        h = (h ^ x).wrapping_mul(0x1000_0000_01b3).rotate_left(29);
    }
    h
}

/// What every rank derives from the gathered messages of a step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Agreed {
    /// Every rank's stage is fine (the AND of the verdicts).
    pub all_ok: bool,
    /// The smallest free-block count (the negotiated minimum).
    pub min_free_blocks: u64,
    /// Points injected in the step, ascending, each once.
    pub points: Vec<u64>,
}

/// The group's agreement over `msgs` (one per rank).
pub fn agree(msgs: &[RankMsg]) -> Agreed {
    let mut points: Vec<u64> = msgs.iter().filter_map(|m| m.injected).collect();
    points.sort_unstable();
    points.dedup();
    Agreed {
        all_ok: msgs.iter().all(|m| m.stage_ok),
        min_free_blocks: msgs.iter().map(|m| m.free_blocks).min().unwrap_or(0),
        points,
    }
}

/// Per rank: how many steps late its messages arrive (`message_lag` faults; the last one of a
/// rank counts, as the engine applies them).
pub fn message_lags(plan: &Plan) -> Vec<u64> {
    let mut lags = vec![0; plan.scenario.dp_ranks as usize];
    for f in &plan.faults {
        if let FaultSpec::MessageLag { rank, steps } = f {
            if let Some(l) = lags.get_mut(*rank as usize) {
                *l = *steps;
            }
        }
    }
    lags
}

/// One rank's share of a lowered plan.
#[derive(Clone, Debug)]
pub struct RankProgram {
    /// The rank.
    pub rank: u32,
    /// Its program over its own groups (`0..groups_per_rank`), with every program step of the
    /// whole plan (a step where the rank has no work is empty). `requests` is the whole plan's
    /// (request ids stay global); `notes`, `mismatch` and `sim_violations` stay with the whole.
    pub lowered: LoweredPlan,
    /// Per step, per op of this rank's program: the op's index in the whole program's step.
    pub op_map: Vec<Vec<usize>>,
}

impl RankProgram {
    /// The whole program's device group of this rank's group `g`.
    pub fn global_group(&self, g: GroupId) -> GroupId {
        GroupId(self.rank * self.lowered.groups_per_rank as u32 + g.0)
    }
}

/// Cuts `whole` (every rank side by side) into one program per rank. Timing marks go with the
/// rank that opened the window (the lowering may close a window left open at the end of the
/// program on behalf of the last op's rank).
pub fn split_ranks(whole: &LoweredPlan, ranks: u32) -> Vec<RankProgram> {
    let ng = whole.groups_per_rank as u32;
    let mut out: Vec<RankProgram> = (0..ranks)
        .map(|r| {
            let groups = whole
                .program
                .layout
                .groups
                .iter()
                .skip((r * ng) as usize)
                .take(ng as usize)
                .cloned()
                .collect();
            let layout = super::layout::DeviceLayout {
                groups,
                moe: whole.program.layout.moe,
            };
            RankProgram {
                rank: r,
                lowered: LoweredPlan {
                    program: GpuProgram {
                        layout,
                        steps: Vec::new(),
                    },
                    steps: whole.steps.clone(),
                    origins: Vec::new(),
                    requests: whole.requests.clone(),
                    groups_per_rank: whole.groups_per_rank,
                    mismatch: None,
                    sim_violations: Vec::new(),
                    notes: Vec::new(),
                    exchange: Vec::new(),
                },
                op_map: Vec::new(),
            }
        })
        .collect();
    let mut window_rank: Option<u32> = None;
    for (si, step) in whole.program.steps.iter().enumerate() {
        for rp in &mut out {
            rp.lowered.program.steps.push(GpuStep { ops: Vec::new() });
            rp.lowered.origins.push(Vec::new());
            rp.op_map.push(Vec::new());
        }
        for (oi, op) in step.ops.iter().enumerate() {
            let at: Option<OpRef> = whole.origins.get(si).and_then(|o| o.get(oi)).copied();
            let rank = match op {
                GpuOp::BeginTimed { .. } => {
                    let r = at.map_or(0, |a| a.rank);
                    window_rank = Some(r);
                    r
                }
                GpuOp::EndTimed { .. } => window_rank.take().unwrap_or_else(|| at.map_or(0, |a| a.rank)),
                _ => at.map_or(0, |a| a.rank),
            };
            let Some(rp) = out.get_mut(rank as usize) else { continue };
            let base = rank * ng;
            rp.lowered.program.steps[si].ops.push(local_op(op, base));
            rp.lowered.origins[si].push(at.unwrap_or(OpRef {
                step: whole.steps.get(si).copied().unwrap_or(0),
                rank,
                op_index: 0,
            }));
            rp.op_map[si].push(oi);
        }
    }
    for rp in &mut out {
        // Every rank checks the whole gathered step against what the group saw.
        rp.lowered.exchange = whole.exchange.clone();
    }
    out
}

/// `op` with its device groups renumbered from `base` (the rank's first group) to 0.
fn local_op(op: &GpuOp, base: u32) -> GpuOp {
    let g = |x: GroupId| GroupId(x.0 - base);
    let mut op = op.clone();
    match &mut op {
        GpuOp::Prefill(p) => p.group = g(p.group),
        GpuOp::DecodeAttention(d) => {
            for s in &mut d.seqs {
                for t in &mut s.tables {
                    t.group = g(t.group);
                }
            }
        }
        GpuOp::StateUpdate(s) => s.group = g(s.group),
        GpuOp::ZeroBlocks { group, .. } | GpuOp::CopyBlocks { group, .. } => *group = g(*group),
        GpuOp::Moe(_) | GpuOp::BeginTimed { .. } | GpuOp::EndTimed { .. } | GpuOp::HostWork { .. } => {}
    }
    op
}

impl RankMsg {
    /// What `e` sends at the end of a step.
    pub fn of_engine(e: &crate::engine::Engine) -> RankMsg {
        RankMsg {
            stage_ok: !e.registration_failed_by_fault,
            free_blocks: e.kv.pool.num_free_blocks() as u64,
            injected: e.injected,
        }
    }
}
