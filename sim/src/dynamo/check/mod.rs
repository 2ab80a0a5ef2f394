//! The real planner under the swarm (`kvsim check --planner dynamo`): swarm
//! cases recorded on persistent harness workers and replayed with every
//! invariant; findings shrunk over the case knobs; seed bugs hunted as patches.

pub mod aim;
pub mod case;
pub mod hunt;
pub mod pool;
pub mod run;
pub mod shrink;
pub mod swarm;
