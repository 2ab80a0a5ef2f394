//! Coverage goals ("sometimes" properties): rare events a default `kvsim check`
//! run must reach at least once, or the run fails. Each is counted by the engine
//! or the executor where it happens (the name is the event's).

use std::collections::BTreeMap;

/// (event name, what it means).
pub const GOALS: &[(&str, &str)] = &[
    (
        "prefix-block-evicted",
        "an allocation evicts a cached (prefix-cache) block",
    ),
    (
        "shed-mid-build",
        "a soft timeout lands mid-build and a request still prefilling is shed",
    ),
    (
        "registration-failed",
        "a shadow registration fails (the all-or-nothing path)",
    ),
    (
        "copy-on-write",
        "a shadow's tail is a copy-on-write of the chain's partial block",
    ),
    ("window-edge", "a sliding-window read starts exactly on a block edge"),
    (
        "hybrid-fixed-point",
        "the hybrid coordinator re-asks a group at a shorter hit (its fixed point iterates more than once)",
    ),
    (
        "ranks-disagree",
        "attention-DP ranks take different local decisions (a local failure on one rank)",
    ),
];

/// Goals never reached by `reached` (event counts summed over a run).
pub fn missed(reached: &BTreeMap<String, u64>) -> Vec<&'static str> {
    GOALS
        .iter()
        .filter(|(g, _)| reached.get(*g).copied().unwrap_or(0) == 0)
        .map(|(g, _)| *g)
        .collect()
}
