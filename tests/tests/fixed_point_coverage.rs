//! The generator's traces reach the hybrid fixed point's second pass (issue 19): the
//! conformance cross-check (`conformance/run.sh`: seed 20261129, 160 traces, replayed through
//! vLLM) needs lookups where a later window shortens an earlier window's hit, or a hit
//! computed in one pass would pass unnoticed.

use kvsim_core::kvtrace::{gen, replay_value};

#[test]
fn the_cross_checked_traces_make_the_fixed_point_reask_a_group() {
    let reaching = (0..160)
        .filter(|&index| {
            replay_value(&gen::generate(20_261_129, index))
                .unwrap()
                .fixed_point_reasks
                > 0
        })
        .count();
    assert!(reaching >= 3, "only {reaching} of 160 traces re-ask a group");
}

#[test]
fn layouts_other_than_three_groups_never_reask() {
    for index in (0..64).filter(|i| gen::LAYOUTS[i % gen::LAYOUTS.len()] != "full+swa+swa") {
        let r = replay_value(&gen::generate(7, index)).unwrap();
        assert_eq!(
            r.fixed_point_reasks,
            0,
            "trace {index} ({})",
            gen::LAYOUTS[index % gen::LAYOUTS.len()]
        );
    }
}
