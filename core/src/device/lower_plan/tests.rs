//! The lowering's unit tests: built-in plans lowered and checked read by read on a CPU model
//! of the device.

use super::*;
use crate::device::content::ZERO_TOKEN;
use crate::device::ids::BlockId;
use crate::plan::load_plan;

fn load(name: &str) -> Plan {
    let path = format!("{}/../tests/data/plans/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    load_plan(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn shadow_plan_lowers_to_a_valid_program() {
    let l = lower_plan(&load("shadow_decode.json"), &LowerOptions::default()).expect("lowers");
    assert_eq!(l.mismatch, None);
    assert_eq!(l.program.problems(), Vec::<String>::new());
    assert_eq!(l.steps, vec![0, 1, 2, 3]);
    // Two groups of one rank; bs 4 and head dim 8 run on the generic kernel.
    assert_eq!(l.program.layout.groups.len(), 2);
    assert!(l
        .program
        .layout
        .groups
        .iter()
        .all(|g| !crate::device::lower::mma_takes(g)));
    // Step 1 zeroes the shadow's tail blocks; step 2 decodes the shadow at position 8 over
    // the chain's blocks and its own tail, inside the timed window of point 1.
    let zeroed: Vec<_> = l.program.steps[1]
        .ops
        .iter()
        .filter_map(|op| match op {
            GpuOp::ZeroBlocks { group, blocks } => Some((group.0, blocks.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(zeroed, vec![(0, vec![BlockId(5)]), (1, vec![BlockId(6)])]);
    let step2 = &l.program.steps[2].ops;
    assert!(matches!(step2[0], GpuOp::BeginTimed { point: PointId(1) }));
    let decode = step2
        .iter()
        .find_map(|op| match op {
            GpuOp::DecodeAttention(d) => Some(d),
            _ => None,
        })
        .expect("a decode");
    let s = &decode.seqs[0];
    assert_eq!(l.request(s.req).1, "point1");
    assert_eq!(s.tokens.len(), 9);
    assert_eq!(s.tokens[8], 42);
    assert_eq!(
        s.tables[0].blocks,
        vec![BlockId(1), BlockId(2), BlockId(5)],
        "full group: the chain's blocks, then the tail"
    );
    assert!(l.sim_violations.is_empty(), "{:?}", l.sim_violations);
    assert!(decode_kv_bytes_per_step(&l.program)[2] > 0);
    assert_eq!(decode_only_steps(&l.program), vec![false, false, true, false]);
}

/// A first bad read: (plan step, request, plan group, block, position).
type Bad = (u64, String, u32, u32, Option<u32>);

/// What the device will report, predicted on the host: replays the program's writes over
/// per-(group, block) slot contents and checks every read as the kernels do.
fn predict(l: &LoweredPlan) -> Vec<Bad> {
    use std::collections::HashMap;
    let layout = &l.program.layout;
    // (group, block) -> per slot: (token, position) written there.
    type Slots = Vec<Option<(u32, u32)>>;
    let mut kv: HashMap<(u32, u32), Slots> = HashMap::new();
    let mut state: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    let mut out = Vec::new();
    for (si, step) in l.program.steps.iter().enumerate() {
        for op in &step.ops {
            match op {
                GpuOp::Prefill(p) => {
                    let bs = layout.groups[p.group.0 as usize].block_size_tokens;
                    for (i, &t) in p.tokens.iter().enumerate() {
                        let pos = p.start_pos + i as u32;
                        let b = p.block_table[(pos / bs) as usize].0;
                        if b != 0 {
                            kv.entry((p.group.0, b)).or_insert_with(|| vec![None; bs as usize])[(pos % bs) as usize] =
                                Some((t, pos));
                        }
                    }
                }
                GpuOp::ZeroBlocks { group, blocks } => {
                    for b in blocks {
                        kv.remove(&(group.0, b.0));
                        state.insert((group.0, b.0), Vec::new());
                    }
                }
                GpuOp::CopyBlocks { group, copies } => {
                    for c in copies {
                        match kv.get(&(group.0, c.src.0)).cloned() {
                            Some(v) => kv.insert((group.0, c.dst.0), v),
                            None => kv.remove(&(group.0, c.dst.0)),
                        };
                        let st = state.get(&(group.0, c.src.0)).cloned().unwrap_or_default();
                        state.insert((group.0, c.dst.0), st);
                    }
                }
                GpuOp::StateUpdate(u) => {
                    let have = state.get(&(u.group.0, u.src_block.0)).cloned().unwrap_or_default();
                    if have != u.history {
                        let (_, g) = l.plan_group(u.group);
                        out.push((l.steps[si], l.request(u.req).1.to_string(), g, u.src_block.0, None));
                    }
                    let mut h = u.history.clone();
                    h.extend(&u.tokens);
                    state.insert((u.group.0, u.dst_block.0), h);
                }
                GpuOp::DecodeAttention(d) => {
                    for s in &d.seqs {
                        for t in &s.tables {
                            let g = &layout.groups[t.group.0 as usize];
                            let bs = g.block_size_tokens;
                            let bad = g.kind.attend_range(s.ctx_tokens()).find(|&p| {
                                let b = t.blocks[(p / bs) as usize].0;
                                let got = kv.get(&(t.group.0, b)).and_then(|v| v[(p % bs) as usize]);
                                let want = s.tokens[p as usize];
                                // A zero position must hold zeros (zeroed or never written).
                                (want == ZERO_TOKEN && got.is_some()) || (want != ZERO_TOKEN && got != Some((want, p)))
                            });
                            if let Some(p) = bad {
                                let (_, pg) = l.plan_group(t.group);
                                let b = t.blocks[(p / bs) as usize].0;
                                out.push((l.steps[si], l.request(s.req).1.to_string(), pg, b, Some(p)));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn good_plans_read_what_they_wrote() {
    for name in ["shadow_decode.json", "native_full_swa.json"] {
        let l = lower_plan(&load(name), &LowerOptions::default()).expect("lowers");
        assert_eq!(l.mismatch, None, "{name}");
        assert!(l.sim_violations.is_empty(), "{name}: {:?}", l.sim_violations);
        assert_eq!(predict(&l), Vec::<Bad>::new(), "{name}");
    }
}

#[test]
fn bad_plans_fail_where_the_simulator_fails() {
    // The sliding-window block of positions 3568..3583 is zeroed before r0's decode reads it.
    let l = lower_plan(&load("bad_window_evicted.json"), &LowerOptions::default()).expect("lowers");
    assert_eq!(l.sim_violations[0].invariant, "PL-WINDOW");
    assert_eq!(l.sim_violations[0].at.step, 1);
    // It stays bad for every later decode (nothing rewrites it); the first is at step 1.
    let bad = predict(&l);
    assert_eq!(bad[0], (1, "r0".to_string(), 1, 480, Some(3568)));
    assert!(bad.iter().all(|b| (b.1.as_str(), b.3) == ("r0", 480)), "{bad:?}");
    // The shadow reads positions 4..7 of a chain that computed only 4 tokens.
    let l = lower_plan(&load("bad_shadow_unfinished.json"), &LowerOptions::default()).expect("lowers");
    assert_eq!(l.sim_violations[0].invariant, "PL-SHADOW-PARKED");
    assert_eq!(l.sim_violations[0].at.step, 2);
    assert_eq!(
        predict(&l),
        vec![
            (2, "point1".to_string(), 0, 2, Some(4)),
            (2, "point1".to_string(), 1, 4, Some(5))
        ]
    );
}

/// Full attention + sliding window 8, 4-token blocks, 4 experts (top 2); request `a` gets
/// 9 synthetic positions, then decodes twice (positions 9 and 10).
fn synthetic_plan() -> Plan {
    let text = r#"{"format": "kvsim-plan/1",
      "scenario": {"name": "tiny-moe", "model": {"groups": [
          {"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8},
          {"kind": "sliding_window", "sliding_window": 8, "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8}],
        "experts": 4, "top_k": 2, "vocab_size": 100},
        "pool_blocks": 32,
        "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 64, "enable_caching": true},
        "seed": 1},
      "steps": [
        {"step": 0, "ops": [
          {"op": "add_request", "req": "a", "prompt": {"source": "ids", "ids": [1,2,3,4,5,6,7,8,9,10]}},
          {"op": "schedule", "req": "a", "num_new_tokens": 10, "delay_cache_blocks": true},
          {"op": "fake_compute", "req": "a", "tokens": 9},
          {"op": "cache_blocks", "req": "a", "num_tokens": 9}]},
        {"step": 1, "ops": [
          {"op": "begin_timed", "point": 0},
          {"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [11]}]},
          {"op": "end_timed", "point": 0},
          {"op": "process_outputs"}]},
        {"step": 2, "ops": [
          {"op": "schedule", "req": "a", "num_new_tokens": 1},
          {"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [12]}]},
          {"op": "process_outputs"}]}]}"#;
    load_plan(text).expect("valid plan")
}

#[test]
fn synthetic_kv_as_zeros_reads_zeros() {
    let plan = synthetic_plan();
    let opts = LowerOptions {
        synthetic_kv: SyntheticKv::Zero,
        ..LowerOptions::default()
    };
    let l = lower_plan(&plan, &opts).expect("lowers");
    assert_eq!(l.mismatch, None);
    assert_eq!(l.program.problems(), Vec::<String>::new());
    // Step 0 zeroes the blocks of positions 0..8 (3 blocks per group) and computes nothing.
    assert!(l.program.steps[0]
        .ops
        .iter()
        .all(|op| matches!(op, GpuOp::ZeroBlocks { .. })));
    let decode = |step: usize| {
        l.program.steps[step]
            .ops
            .iter()
            .find_map(|op| match op {
                GpuOp::DecodeAttention(d) => Some(d.seqs[0].tokens.clone()),
                _ => None,
            })
            .expect("a decode")
    };
    let t1 = decode(1);
    assert_eq!(t1.len(), 10);
    assert!(t1[..9].iter().all(|&t| t == ZERO_TOKEN));
    assert_eq!(t1[9], 10);
    let t2 = decode(2);
    assert!(t2[..9].iter().all(|&t| t == ZERO_TOKEN));
    assert_eq!(&t2[9..], &[10, 11]);
    assert_eq!(predict(&l), Vec::<Bad>::new());
    // The default materialises the same positions from the prompt: no zero positions.
    let l = lower_plan(&plan, &LowerOptions::default()).expect("lowers");
    assert!(l
        .program
        .steps
        .iter()
        .flat_map(|s| &s.ops)
        .all(|op| !matches!(op, GpuOp::DecodeAttention(d) if d.seqs.iter().any(|s| s.tokens.contains(&ZERO_TOKEN)))));
    assert_eq!(predict(&l), Vec::<Bad>::new());
}

#[test]
fn hidden_state_moe_runs_after_the_attention() {
    let plan = synthetic_plan();
    let kinds = |opts: &LowerOptions| -> Vec<&'static str> {
        let l = lower_plan(&plan, opts).expect("lowers");
        assert_eq!(l.program.problems(), Vec::<String>::new());
        l.program.steps[2]
            .ops
            .iter()
            .filter_map(|op| match op {
                GpuOp::DecodeAttention(_) => Some("decode"),
                GpuOp::Moe(m) if m.hidden.is_empty() => Some("moe"),
                GpuOp::Moe(m) => {
                    assert_eq!(m.hidden, vec![0]);
                    Some("moe_hidden")
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(kinds(&LowerOptions::default()), vec!["moe", "decode"]);
    let hidden = LowerOptions {
        moe_input: MoeInput::Hidden,
        ..LowerOptions::default()
    };
    assert_eq!(kinds(&hidden), vec!["decode", "moe_hidden"]);
}

#[test]
fn every_plan_in_the_data_directory_lowers() {
    let dir = format!("{}/../tests/data/plans", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("plans directory") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = path.file_name().and_then(|f| f.to_str()).expect("name").to_string();
        // Bad plans lower too (up to a mismatch, if any): the program must still be valid.
        let l = lower_plan(&load(&name), &LowerOptions::default()).expect("lowers");
        assert_eq!(l.program.problems(), Vec::<String>::new(), "{name}");
        assert_eq!(l.steps.len(), l.program.steps.len(), "{name}");
        n += 1;
    }
    assert!(n >= 2);
}

#[test]
fn every_window_times_a_points_steady_steps_too() {
    use crate::fpm::gate::Strategy;
    use crate::fpm::{planner, scenarios::find_scenario, sweep::SweepOptions};
    let s = find_scenario("glm53-flash").expect("built-in");
    let plan = planner::plan(
        Some(planner::for_strategy(Strategy::Native)),
        &s,
        &SweepOptions::default(),
    )
    .expect("plans")
    .plan;
    let windows = |every_window| {
        let opts = LowerOptions {
            every_window,
            ..LowerOptions::default()
        };
        let l = lower_plan(&plan, &opts).expect("lowers");
        assert_eq!(l.program.problems(), Vec::<String>::new());
        let mut n: std::collections::BTreeMap<u32, usize> = Default::default();
        for op in l.program.steps.iter().flat_map(|s| &s.ops) {
            if let GpuOp::BeginTimed { point } = op {
                *n.entry(point.0).or_default() += 1;
            }
        }
        n
    };
    let first = windows(false);
    let every = windows(true);
    assert!(first.values().all(|&k| k == 1), "{first:?}");
    assert_eq!(first.keys().collect::<Vec<_>>(), every.keys().collect::<Vec<_>>());
    assert!(every.values().any(|&k| k > 1), "{every:?}");
}

#[test]
fn random_kda_state_is_refused_not_reported_as_corrupt() {
    let mut plan = load("shadow_decode.json");
    for op in plan.steps.iter_mut().flat_map(|st| &mut st.ops) {
        if let PlanOp::RegisterShadow { random_state, .. } = op {
            *random_state = true;
        }
    }
    let err = lower_plan(&plan, &LowerOptions::default()).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, LowerError::Unsupported(ref m) if m.contains("random KDA")),
        "{err}"
    );
}

/// `plan` with a second rank running the same steps (requests are per rank).
fn two_ranks(mut plan: Plan) -> Plan {
    plan.scenario.dp_ranks = 2;
    let steps = std::mem::take(&mut plan.steps);
    for st in steps {
        let mut other = st.clone();
        other.rank = 1;
        plan.steps.push(st);
        plan.steps.push(other);
    }
    plan
}

#[test]
fn rank_programs_split_the_whole_and_read_what_it_reads() {
    use crate::device::ranks::split_ranks;
    for (name, bad) in [("shadow_decode.json", false), ("bad_shadow_unfinished.json", true)] {
        let whole = lower_plan(&two_ranks(load(name)), &LowerOptions::default()).expect("lowers");
        assert_eq!(whole.mismatch, None, "{name}");
        assert_eq!(whole.exchange.len(), whole.program.steps.len());
        assert!(whole.exchange.iter().all(|s| s.len() == 2));
        let parts = split_ranks(&whole, 2);
        let mut ops = 0;
        let mut reads: Vec<Bad> = Vec::new();
        for p in &parts {
            assert_eq!(
                p.lowered.program.problems(),
                Vec::<String>::new(),
                "{name} rank {}",
                p.rank
            );
            assert_eq!(p.lowered.program.layout.groups.len(), whole.groups_per_rank);
            assert_eq!(p.lowered.program.steps.len(), whole.program.steps.len());
            assert_eq!(p.lowered.exchange, whole.exchange);
            for (si, step) in p.lowered.program.steps.iter().enumerate() {
                ops += step.ops.len();
                assert!(p.lowered.origins[si].iter().all(|o| o.rank == p.rank));
                // Each op is the whole program's op, renumbered to the rank's groups.
                for (oi, op) in step.ops.iter().enumerate() {
                    let w = &whole.program.steps[si].ops[p.op_map[si][oi]];
                    assert_eq!(std::mem::discriminant(op), std::mem::discriminant(w));
                }
            }
            reads.extend(predict(&p.lowered));
        }
        assert_eq!(ops, whole.program.steps.iter().map(|s| s.ops.len()).sum::<usize>());
        let mut want = predict(&whole);
        want.sort();
        reads.sort();
        assert_eq!(reads, want, "{name}");
        assert_eq!(reads.is_empty(), !bad, "{name}: {reads:?}");
    }
}

#[test]
fn a_rank_message_survives_the_wire_and_a_stale_one_does_not() {
    use crate::device::ranks::{agree, RankMsg};
    let m = RankMsg {
        stage_ok: false,
        free_blocks: 17,
        injected: Some(0),
    };
    assert_eq!(RankMsg::from_wire(&m.to_wire(9), 9), Some(m));
    assert_eq!(RankMsg::from_wire(&m.to_wire(9), 10), None);
    let n = RankMsg {
        stage_ok: true,
        free_blocks: 5,
        injected: Some(3),
    };
    let a = agree(&[
        m,
        n,
        RankMsg {
            stage_ok: true,
            free_blocks: 9,
            injected: Some(3),
        },
    ]);
    assert_eq!((a.all_ok, a.min_free_blocks, a.points), (false, 5, vec![0, 3]));
}
