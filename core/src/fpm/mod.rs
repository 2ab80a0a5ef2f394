//! FPM benchmark model: grid, scenarios, gate, capacity, planners, artifact.

pub mod artifact;
pub(crate) mod artifact_schema;
pub mod audit;
pub mod capacity;
pub mod gate;
pub mod grid;
pub mod planner;
pub mod scenario_file;
pub mod scenarios;
pub mod sweep;
