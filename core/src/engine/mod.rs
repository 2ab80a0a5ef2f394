//! One rank's engine as plans see it: vLLM's KV-cache manager plus the scheduler
//! state Dynamo depends on (dynamo_fpm.md §11): request lifecycle, the
//! deferred-free fence, async output placeholders, shadows, shed requests,
//! copy-on-write retentions, timed windows, and what every block holds.
//!
//! `apply` runs one plan op. The engine states the facts a planner check judges
//! (`crate::invariants::planner::PlannerEvent`) and returns an `OpOutcome` with the
//! violations those checks found; model invariants are checked by the executor
//! after every op (`crate::invariants::model`).

mod apply;
pub mod content;
mod faults;
mod forward;
mod lifecycle;
mod poach;
mod points;
mod recorded;
mod schedule;
mod shadow;

use std::collections::{BTreeMap, BTreeSet};

use content::PrefixHashes;

use crate::bugs::{BugMutant, Mutant};
use crate::invariants::planner::PointCoordinate;
use crate::kv::{KvCacheManager, ReqId, Request};
use crate::plan::Scenario;
use crate::slips::SlipMutant;

/// A request the engine knows about.
#[derive(Clone, Debug)]
pub struct EngineReq {
    /// The model's request.
    pub req: Request,
    /// Prefix-cache hit tokens at admission.
    pub hit_tokens: u64,
    /// Of those, the tokens of a hit the plan did not expect (PL-NO-POACH) that the engine
    /// admitted anyway, as vLLM would ([`Engine::admit_poached_hits`]); 0 otherwise.
    pub poached_tokens: u64,
    /// For a shadow: the chain it borrows from, and the context it was cut at.
    pub shadow_of: Option<(String, u64)>,
    /// Per group: prefix hashes at the group's block size (content tags).
    pub prefix: Vec<PrefixHashes>,
    /// Positions below this hold synthetic KV the request knowingly reads.
    pub synthetic_upto: u64,
    /// A random-KDA shadow: its recurrent state at this depth is the deterministic
    /// random fill, not the chain's (dynamo_fpm.md §8.1 invariant 49).
    pub random_state_at: Option<u64>,
    /// Added in the step that injected a point: the point's own request, whose
    /// admission the point's deadline check judges, not the stage check.
    pub point_request: bool,
}

/// Outputs of a forward that have not been processed yet.
#[derive(Clone, Debug)]
pub struct PendingOutput {
    /// The step whose forward produced them (`sched_step_seq`).
    pub step_seq: u64,
    /// The step at whose end they land (later than `step_seq` when outputs are delayed).
    pub land_seq: u64,
    /// The request.
    pub req: String,
    /// Sampled tokens (none for a partial prefill chunk).
    pub tokens: Vec<u64>,
    /// Tokens the step scheduled for the request (in flight until it lands).
    pub scheduled: u64,
}

/// Blocks detached by a fenced free, held until their step's outputs are processed.
#[derive(Clone, Debug)]
pub struct Deferred {
    /// The step that freed them (`sched_step_seq`).
    pub step_seq: u64,
    /// The request freed.
    pub req: String,
    /// Its blocks, held until that step's outputs are processed.
    pub blocks: Vec<u32>,
}

/// A disagreement between the plan and the model (the plan cannot have been
/// produced against this scenario).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Mismatch(pub String);

/// One rank: the KV-cache model plus the scheduler-side state Dynamo's planner depends on (fence, placeholders, shadows, CoW retentions, timed windows) and a content tag per block. It states facts (`PlannerEvent`); the checks judge them.
#[derive(Clone, Debug)]
pub struct Engine {
    /// This engine's attention-DP rank.
    pub rank: u32,
    /// The plan's scenario.
    pub scenario: Scenario,
    /// The rank's KV-cache manager.
    pub kv: KvCacheManager,
    /// Live requests by plan name.
    pub requests: BTreeMap<String, EngineReq>,
    next_rid: ReqId,
    /// Incremented at every step start (`sched_step_seq`).
    pub step_seq: u64,
    /// The last step whose outputs were processed (`processed_step_seq`).
    pub processed_seq: u64,
    /// Blocks of fenced frees, held until their step's outputs are processed.
    pub deferred: Vec<Deferred>,
    /// Forward outputs not processed yet.
    pub pending_outputs: Vec<PendingOutput>,
    /// Copy-on-write sources holding an extra reference until released.
    pub cow_retained: Vec<u32>,
    /// The step each copy-on-write retention was taken in (parallel to `cow_retained`).
    pub cow_steps: Vec<u64>,
    /// Blocks taken away by a pool-shrink fault.
    pub phantom: Vec<u32>,
    /// Requests shed for good.
    pub shed: BTreeSet<String>,
    /// What each block holds (by block id); `None` = never written.
    pub content: Vec<Option<u128>>,
    /// The benchmark point whose timed window is open.
    pub timed: Option<u64>,
    /// Requests in the current step's forward batch.
    pub in_forward: BTreeSet<String>,
    /// Point injected by this rank in the current step (as the group sees it).
    pub injected: Option<u64>,
    /// Injections decided on this rank, delivered to the group at `due` step seq.
    pub inject_queue: Vec<(u64, u64)>,
    /// Messages from this rank reach the group this many steps late (fault).
    pub message_lag: u64,
    /// Outputs produced in the current step land this many steps late (fault).
    pub output_delay: u64,
    /// A shadow registration fails locally after this many more succeed (fault).
    pub fail_registration_after: Option<u32>,
    /// A `stage_failure` fault has failed a registration on this rank.
    pub registration_failed_by_fault: bool,
    /// The soft deadline has passed (fault / clock).
    pub deadline_passed: bool,
    /// The step (`step_seq`) of the last point injection.
    pub inject_seq: Option<u64>,
    /// The largest message lag of any rank: the blocking stage exchange waits for it.
    pub group_lag: u64,
    /// Points injected on this rank: (step of the injection, whether it was timed
    /// there, steady timed windows since).
    pub points: BTreeMap<u64, (u64, bool, u64)>,
    /// Points injected on this rank that the artifact records (a result or a
    /// skip): every point but the eager warm-up replicas.
    pub points_recorded: u64,
    /// Rare events reached (coverage goals), by name.
    pub events: BTreeMap<&'static str, u64>,
    /// What the plan says each decode point's coordinate is (PL-COORDINATE); points absent
    /// here are not judged.
    pub coordinates: BTreeMap<u64, PointCoordinate>,
    /// A deliberate bug switched on (`--mutant`).
    pub mutant: Option<Mutant>,
    /// Off (the default, and always in `kvsim check`, `sweep` and `replay`): a PL-NO-POACH
    /// finding stops its `schedule` (result "poached"), so the request is not scheduled. On: the
    /// finding is still reported, then the request is admitted with its hit and computes only
    /// the uncached rest of its prompt, as vLLM would (`engine/poach.rs`). The GPU lowering of
    /// a flagged plan turns it on to run what vLLM would run after the finding.
    pub admit_poached_hits: bool,
}

impl Engine {
    /// An engine for `rank` of `scenario`; `Err` when the scenario's KV config is refused.
    pub fn new(scenario: &Scenario, rank: u32) -> Result<Self, Mismatch> {
        Self::with_mutant(scenario, rank, None)
    }

    /// An engine with a deliberate bug: a seed-bug mutant in the engine, or a
    /// block-pool model mutant.
    pub fn with_mutant(scenario: &Scenario, rank: u32, mutant: Option<Mutant>) -> Result<Self, Mismatch> {
        let mut kv = KvCacheManager::with_mutant(scenario.kv_config(), mutant.and_then(Mutant::model))
            .map_err(|e| Mismatch(e.0))?;
        if let Some(Mutant::Slip(s)) = mutant {
            kv.set_slip(s.manager());
        }
        Ok(Engine {
            rank,
            content: vec![None; scenario.pool_blocks as usize],
            scenario: scenario.clone(),
            kv,
            requests: BTreeMap::new(),
            next_rid: 0,
            step_seq: 0,
            processed_seq: 0,
            deferred: Vec::new(),
            pending_outputs: Vec::new(),
            cow_retained: Vec::new(),
            cow_steps: Vec::new(),
            phantom: Vec::new(),
            shed: BTreeSet::new(),
            timed: None,
            in_forward: BTreeSet::new(),
            injected: None,
            inject_queue: Vec::new(),
            message_lag: 0,
            output_delay: 0,
            fail_registration_after: None,
            registration_failed_by_fault: false,
            deadline_passed: false,
            inject_seq: None,
            group_lag: 0,
            points: BTreeMap::new(),
            points_recorded: 0,
            events: BTreeMap::new(),
            coordinates: BTreeMap::new(),
            mutant,
            admit_poached_hits: false,
        })
    }

    /// Whether seed-bug mutant `m` is switched on.
    pub fn bug(&self, m: BugMutant) -> bool {
        self.mutant == Some(Mutant::Bug(m))
    }

    /// Whether slip `s` is switched on.
    pub fn slip(&self, s: SlipMutant) -> bool {
        self.mutant == Some(Mutant::Slip(s))
    }

    /// The next shadow registration fails (a `stage_failure` fault is due).
    pub fn registration_fails_next(&self) -> bool {
        self.fail_registration_after == Some(0)
    }

    /// Count a rare event (a coverage goal).
    pub fn event(&mut self, name: &'static str) {
        *self.events.entry(name).or_default() += 1;
    }

    /// References held outside block tables, one entry per reference.
    pub fn retained(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.deferred.iter().flat_map(|d| d.blocks.iter().copied()).collect();
        v.extend(self.cow_retained.iter().copied());
        v.extend(self.phantom.iter().copied());
        v.retain(|&b| b != 0);
        v
    }

    /// A new scheduler step starts (`new_step_starts`, `sched_step_seq += 1`).
    pub fn begin_step(&mut self) {
        self.step_seq += 1;
        self.kv.new_step_starts();
        self.in_forward.clear();
        // An injection decided earlier is delivered now (message lag).
        let now = self.step_seq;
        self.injected = self.inject_queue.iter().find(|(due, _)| *due == now).map(|(_, p)| *p);
        self.inject_queue.retain(|(due, _)| *due > now);
        self.output_delay = 0;
    }

    fn new_request(&mut self, prompt: Vec<u64>, salt: Option<String>) -> EngineReq {
        // Issue 19's slip: the salt never reaches the block hashes.
        let salt = salt.filter(|_| !self.slip(SlipMutant::SaltIgnored));
        let rid = self.next_rid;
        self.next_rid += 1;
        let req = Request::new(rid, prompt, salt, self.kv.request_hash_block_size());
        let prefix = self
            .scenario
            .model
            .groups
            .iter()
            .map(|g| PrefixHashes::new(g.block_size))
            .collect();
        EngineReq {
            req,
            shadow_of: None,
            prefix,
            synthetic_upto: 0,
            random_state_at: None,
            hit_tokens: 0,
            poached_tokens: 0,
            point_request: self.inject_seq == Some(self.step_seq),
        }
    }
}

pub use apply::OpOutcome;
