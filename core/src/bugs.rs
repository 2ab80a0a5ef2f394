//! The seed bugs as mutants (dynamo_fpm.md §8.2): runtime switches that restore
//! the buggy behaviour where the research describes its cause. A planner mutant
//! changes the plan a sweep planner records (the plan itself is then buggy and
//! `kvsim replay PLAN` fails on it); an engine mutant changes how the executor's
//! engine carries out an op Dynamo implements (replay needs `--mutant NAME`).
//! Bugs kvsim does not express are listed, with the reason, in spec/mutants.md.

use std::fmt;
use std::str::FromStr;

use crate::invariants::InvariantId;
use crate::kv::mutant::ModelMutant;
use crate::slips::SlipMutant;

/// Where a mutant lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The sweep planner: the recorded plan carries the bug.
    Planner,
    /// The engine that executes plans (Dynamo's scheduler-side code).
    Engine,
}

/// A seed bug of Dynamo's warm-up planner (dynamo_fpm.md §8.2), switchable back on; `BUGS` has each one's number, site, invariant and cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BugMutant {
    /// §8.2 bug 1 (`shadow-tail-not-reserved`): plan feasibility charges only resident chain blocks, not the shadows' private tails, and registration is attempted without the pool pre-check.
    ShadowTailNotReserved,
    /// §8.2 bug 1 (`registration-not-atomic`): shadow registration mutates refs and tables group by group; a pool shortfall leaves the groups registered so far behind.
    RegistrationNotAtomic,
    /// §8.2 bug 2 (`shed-without-finish`): chains are shed by hand-editing scheduler structures; a chain still waiting when a soft timeout lands mid-build is admitted again.
    ShedWithoutFinish,
    /// §8.2 bug 4 (`registration-in-timed-window`): allocate_slots(delay_cache_blocks=True) leaves the synthetic blocks' prefix-cache commit to the admission step, inside the timed window.
    RegistrationInTimedWindow,
    /// §8.2 bug 5 (`stage-build-ignores-deadline`): the stage monitor never acts on the soft deadline: a stage keeps building and registers shadows after it passed.
    StageBuildIgnoresDeadline,
    /// §8.2 bug 6 (`margin-single-steady-step`): the chain margin is 1 + 1 instead of 1 + repeats, so at a block boundary the shadow needs one block more than the chain holds.
    MarginSingleSteadyStep,
    /// §8.2 bug 7 (`ready-before-placeholders`): a chain counts as parked once its tokens are scheduled, before its last chunk's output placeholder has landed.
    ReadyBeforePlaceholders,
    /// §8.2 bug 8 (`recurrent-state-borrowed`): the gate admits hybrid state layouts to chains and the shadow's state slot does not hold the chain's state at its depth.
    RecurrentStateBorrowed,
    /// §8.2 bug 9 (`zero-alloc-borrow`): the shadow borrows the chain's whole block table with no private tail, so its decode writes land in chain blocks later borrows read.
    ZeroAllocBorrow,
    /// §8.2 bug 10 (`cow-source-not-touched`): the copy-on-write retention takes no reference on the source, so its release consumes the chain's own reference.
    CowSourceNotTouched,
    /// §8.2 bug 11 (`cow-release-in-window`): copy-on-write retentions are released through the fence in the admission step, inside the timed window.
    CowReleaseInWindow,
    /// §8.2 bug 12 (`cow-queue-not-drained`): queued copy-on-write retentions are not drained when a later shadow of the point fails, so blocks stay referenced.
    CowQueueNotDrained,
    /// §8.2 bug 13 (`fence-bypass`): benchmark-built outputs skip the sched_step_seq increment, so a request retired while its step is in flight is freed at once.
    FenceBypass,
    /// §8.2 bug 14 (`no-idle-before-draw`): no idle step drains fenced frees after retiring or shedding, so the next allocation draws from a pool still owed fenced blocks.
    NoIdleBeforeDraw,
    /// §8.2 bug 15 (`local-stage-verdict`): a local shadow-registration failure sends only that rank to fallback while its peers inject the point.
    LocalStageVerdict,
    /// §8.2 bug 17 (`per-rank-capacity`): plans use rank 0's local pool instead of the negotiated minimum, so a rank with a smaller pool cannot admit a planned point.
    PerRankCapacity,
    /// §8.2 bug 20 (`shared-salts`): synthetic prompts are salted per slot only, so a later point's request hits an earlier point's cached blocks.
    SharedSalts,
    /// §8.2 bug 21 (`admission-shaped-decode`): a decode point is measured on its admission step only, with no steady step.
    AdmissionShapedDecode,
    /// §8.2 bug 22 (`nonblocking-stage-exchange`): the stage exchange does not block: each rank acts on its own decision when it is made, not once every rank's message arrived.
    NonblockingStageExchange,
    /// §8.2 bug 23 (`align-state-one-block`): align-mode state groups are counted as one block per request instead of 2 (+ speculative + checkpoint).
    AlignStateOneBlock,
    /// §8.2 bug 24 (`kda-regime-mislabel`): every random-KDA decode row is labelled fake_attention_kv_random_kda, real-KV rows included (V-A).
    KdaRegimeMislabel,
    /// §8.2 bug 25 (`rung-slot-budget`): rungs with 2·B above max_num_running_reqs are kept: B parked chains plus B shadows exceed the scheduler's request slots.
    RungSlotBudget,
}

/// One mutant's catalog entry.
pub struct BugInfo {
    /// The mutant.
    pub mutant: BugMutant,
    /// Its `--mutant` name.
    pub name: &'static str,
    /// The bug's number in dynamo_fpm.md §8.2.
    pub bug: u32,
    /// Where the bug lives: the planner (in the plan) or the engine (needs `--mutant` on replay).
    pub site: Site,
    /// The invariant that must catch it.
    pub invariant: InvariantId,
    /// What the mutant restores (the research's cause, in one line).
    pub cause: &'static str,
}

use BugMutant as M;

/// Every seed-bug mutant, in bug order.
pub const BUGS: &[BugInfo] = &[
    BugInfo {
        mutant: M::ShadowTailNotReserved,
        name: "shadow-tail-not-reserved",
        bug: 1,
        site: Site::Planner,
        invariant: InvariantId::PlCoverage,
        cause: "plan feasibility charges only resident chain blocks, not the shadows' private tails, and registration is attempted without the pool pre-check",
    },
    BugInfo {
        mutant: M::RegistrationNotAtomic,
        name: "registration-not-atomic",
        bug: 1,
        site: Site::Planner,
        invariant: InvariantId::PlShadowAtomic,
        cause: "shadow registration mutates refs and tables group by group; a pool shortfall leaves the groups registered so far behind",
    },
    BugInfo {
        mutant: M::ShedWithoutFinish,
        name: "shed-without-finish",
        bug: 2,
        site: Site::Planner,
        invariant: InvariantId::PlNoReadmit,
        cause: "chains are shed by hand-editing scheduler structures; a chain still waiting when a soft timeout lands mid-build is admitted again",
    },
    BugInfo {
        mutant: M::RegistrationInTimedWindow,
        name: "registration-in-timed-window",
        bug: 4,
        site: Site::Planner,
        invariant: InvariantId::PlTimedHost,
        cause: "allocate_slots(delay_cache_blocks=True) leaves the synthetic blocks' prefix-cache commit to the admission step, inside the timed window",
    },
    BugInfo {
        mutant: M::StageBuildIgnoresDeadline,
        name: "stage-build-ignores-deadline",
        bug: 5,
        site: Site::Planner,
        invariant: InvariantId::PlDeadline,
        cause: "the stage monitor never acts on the soft deadline: a stage keeps building and registers shadows after it passed",
    },
    BugInfo {
        mutant: M::MarginSingleSteadyStep,
        name: "margin-single-steady-step",
        bug: 6,
        site: Site::Planner,
        invariant: InvariantId::PlCoverage,
        cause: "the chain margin is 1 + 1 instead of 1 + repeats, so at a block boundary the shadow needs one block more than the chain holds",
    },
    BugInfo {
        mutant: M::ReadyBeforePlaceholders,
        name: "ready-before-placeholders",
        bug: 7,
        site: Site::Planner,
        invariant: InvariantId::PlShadowParked,
        cause: "a chain counts as parked once its tokens are scheduled, before its last chunk's output placeholder has landed",
    },
    BugInfo {
        mutant: M::RecurrentStateBorrowed,
        name: "recurrent-state-borrowed",
        bug: 8,
        site: Site::Planner,
        invariant: InvariantId::PlWindow,
        cause: "the gate admits hybrid state layouts to chains and the shadow's state slot does not hold the chain's state at its depth",
    },
    BugInfo {
        mutant: M::ZeroAllocBorrow,
        name: "zero-alloc-borrow",
        bug: 9,
        site: Site::Planner,
        invariant: InvariantId::PlWindow,
        cause: "the shadow borrows the chain's whole block table with no private tail, so its decode writes land in chain blocks later borrows read",
    },
    BugInfo {
        mutant: M::CowSourceNotTouched,
        name: "cow-source-not-touched",
        bug: 10,
        site: Site::Engine,
        invariant: InvariantId::KvRef,
        cause: "the copy-on-write retention takes no reference on the source, so its release consumes the chain's own reference",
    },
    BugInfo {
        mutant: M::CowReleaseInWindow,
        name: "cow-release-in-window",
        bug: 11,
        site: Site::Planner,
        invariant: InvariantId::PlTimedHost,
        cause: "copy-on-write retentions are released through the fence in the admission step, inside the timed window",
    },
    BugInfo {
        mutant: M::CowQueueNotDrained,
        name: "cow-queue-not-drained",
        bug: 12,
        site: Site::Planner,
        invariant: InvariantId::PlCleanEnd,
        cause: "queued copy-on-write retentions are not drained when a later shadow of the point fails, so blocks stay referenced",
    },
    BugInfo {
        mutant: M::FenceBypass,
        name: "fence-bypass",
        bug: 13,
        site: Site::Engine,
        invariant: InvariantId::PlInflightFree,
        cause: "benchmark-built outputs skip the sched_step_seq increment, so a request retired while its step is in flight is freed at once",
    },
    BugInfo {
        mutant: M::NoIdleBeforeDraw,
        name: "no-idle-before-draw",
        bug: 14,
        site: Site::Planner,
        invariant: InvariantId::PlFence,
        cause: "no idle step drains fenced frees after retiring or shedding, so the next allocation draws from a pool still owed fenced blocks",
    },
    BugInfo {
        mutant: M::LocalStageVerdict,
        name: "local-stage-verdict",
        bug: 15,
        site: Site::Planner,
        invariant: InvariantId::PlDpLockstep,
        cause: "a local shadow-registration failure sends only that rank to fallback while its peers inject the point",
    },
    BugInfo {
        mutant: M::PerRankCapacity,
        name: "per-rank-capacity",
        bug: 17,
        site: Site::Planner,
        invariant: InvariantId::PlCapacity,
        cause: "plans use rank 0's local pool instead of the negotiated minimum, so a rank with a smaller pool cannot admit a planned point",
    },
    BugInfo {
        mutant: M::SharedSalts,
        name: "shared-salts",
        bug: 20,
        site: Site::Planner,
        invariant: InvariantId::PlNoPoach,
        cause: "synthetic prompts are salted per slot only, so a later point's request hits an earlier point's cached blocks",
    },
    BugInfo {
        mutant: M::AdmissionShapedDecode,
        name: "admission-shaped-decode",
        bug: 21,
        site: Site::Planner,
        invariant: InvariantId::PlSteady,
        cause: "a decode point is measured on its admission step only, with no steady step",
    },
    BugInfo {
        mutant: M::NonblockingStageExchange,
        name: "nonblocking-stage-exchange",
        bug: 22,
        site: Site::Engine,
        invariant: InvariantId::PlDpLockstep,
        cause: "the stage exchange does not block: each rank acts on its own decision when it is made, not once every rank's message arrived",
    },
    BugInfo {
        mutant: M::AlignStateOneBlock,
        name: "align-state-one-block",
        bug: 23,
        site: Site::Planner,
        invariant: InvariantId::PlCapacity,
        cause: "align-mode state groups are counted as one block per request instead of 2 (+ speculative + checkpoint)",
    },
    BugInfo {
        mutant: M::KdaRegimeMislabel,
        name: "kda-regime-mislabel",
        bug: 24,
        site: Site::Planner,
        invariant: InvariantId::ArRegime,
        cause: "every random-KDA decode row is labelled fake_attention_kv_random_kda, real-KV rows included (V-A)",
    },
    BugInfo {
        mutant: M::RungSlotBudget,
        name: "rung-slot-budget",
        bug: 25,
        site: Site::Planner,
        invariant: InvariantId::PlSlots,
        cause: "rungs with 2·B above max_num_running_reqs are kept: B parked chains plus B shadows exceed the scheduler's request slots",
    },
];

impl BugMutant {
    /// Its catalog entry.
    pub fn info(self) -> &'static BugInfo {
        BUGS.iter()
            .find(|b| b.mutant == self)
            .expect("every mutant has an entry")
    }
    /// Its `--mutant` name.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

/// Any mutant `--mutant` accepts: a seed bug, a block-pool model bug or a slip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutant {
    /// A seed bug of Dynamo's planner.
    Bug(BugMutant),
    /// A block-pool model bug (kvsim's own model, `core/src/kv/mutant.rs`).
    Model(ModelMutant),
    /// A contributor's slip in kvsim (`core/src/slips.rs`).
    Slip(SlipMutant),
}

impl Mutant {
    /// Every mutant, seed bugs first (in bug order), then the model mutants, then the slips.
    pub fn all() -> Vec<Mutant> {
        let mut v: Vec<Mutant> = BUGS.iter().map(|b| Mutant::Bug(b.mutant)).collect();
        v.extend(ModelMutant::ALL.into_iter().map(Mutant::Model));
        v.extend(SlipMutant::ALL.into_iter().map(Mutant::Slip));
        v
    }
    /// Its `--mutant` name.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::Bug(b) => b.name(),
            Mutant::Model(m) => m.name(),
            Mutant::Slip(s) => s.name(),
        }
    }
    /// The invariant that must catch it.
    pub fn invariant(self) -> InvariantId {
        match self {
            Mutant::Bug(b) => b.info().invariant,
            Mutant::Model(m) => m.breaks(),
            Mutant::Slip(s) => s.invariant(),
        }
    }
    /// Whether a violation of `id` is this mutant's bug showing. A leaked block
    /// (leak-on-free) is a ref-0 block outside the free queue as well as a hole in
    /// the count: KV-FREEQ, checked first, reports it too.
    pub fn caught_by(self, id: &str) -> bool {
        id == self.invariant().as_str()
            || (self == Mutant::Model(ModelMutant::LeakOnFree) && id == InvariantId::KvFreeq.as_str())
    }

    /// Whether replaying a plan needs `--mutant` (the bug is in the executor's engine).
    pub fn in_engine(self) -> bool {
        match self {
            Mutant::Bug(b) => b.info().site == Site::Engine,
            Mutant::Model(_) => true,
            Mutant::Slip(s) => s.in_engine(),
        }
    }
    /// The seed bug, if it is one.
    pub fn bug(self) -> Option<BugMutant> {
        match self {
            Mutant::Bug(b) => Some(b),
            Mutant::Model(_) | Mutant::Slip(_) => None,
        }
    }
    /// The model mutant, if it is one.
    pub fn model(self) -> Option<ModelMutant> {
        match self {
            Mutant::Model(m) => Some(m),
            Mutant::Bug(_) | Mutant::Slip(_) => None,
        }
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mutant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mutant::all().into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let known: Vec<_> = Mutant::all().iter().map(|m| m.name()).collect();
            format!("unknown mutant {s:?}; known: {}", known.join(", "))
        })
    }
}

// Here, not in `kv/`: the model knows nothing of the invariants that judge it.
impl ModelMutant {
    /// The invariant this mutant must trip.
    pub fn breaks(self) -> InvariantId {
        match self {
            ModelMutant::TouchForgetsRef => InvariantId::KvRef,
            ModelMutant::TouchKeepsFreeQueue => InvariantId::KvFreeq,
            ModelMutant::StaleCacheEntry => InvariantId::KvCache,
            ModelMutant::LeakOnFree => InvariantId::KvConserve,
            ModelMutant::HandOutNullBlock => InvariantId::KvNull,
        }
    }
}
