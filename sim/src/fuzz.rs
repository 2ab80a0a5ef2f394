//! A robustness fuzzer for the loaders and the executor: arbitrary bytes,
//! arbitrary JSON, and structured mutations of valid plans and kvtraces. Every
//! input must produce a typed result; a panic is a bug.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kvsim_core::kvtrace;
use kvsim_core::plan::load_plan;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::exec::run_plan;

/// A panic found by the fuzzer, with the input that caused it.
#[derive(Debug, Clone)]
pub struct Crash {
    /// The iteration.
    pub iteration: u64,
    /// What was fuzzed.
    pub target: &'static str,
    /// The input.
    pub input: String,
    /// The panic message.
    pub message: String,
}

/// What a fuzz run did.
#[derive(Debug, Clone, Default)]
pub struct FuzzSummary {
    /// Iterations.
    pub iterations: u64,
    /// Plans accepted.
    pub plans_accepted: u64,
    /// Plans run clean.
    pub plans_executed_clean: u64,
    /// Traces replayed.
    pub traces_replayed: u64,
    /// Panics found.
    pub crashes: Vec<Crash>,
}

/// A valid seed plan exercising most ops (shadows, fences, timed windows, ranks).
pub fn seed_plan() -> Value {
    let g = |kind: &str, extra: Value| {
        let mut v = json!({"kind": kind, "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8});
        if let Value::Object(m) = extra {
            v.as_object_mut().unwrap().extend(m);
        }
        v
    };
    let prompt = |r: std::ops::Range<u64>| json!({"source": "ids", "ids": r.collect::<Vec<_>>()});
    json!({
        "format": "kvsim-plan/1",
        "scenario": {
            "name": "fuzz-seed",
            "model": {"groups": [g("full_attention", json!({})), g("sliding_window", json!({"sliding_window": 4}))], "vocab_size": 100, "experts": 4, "top_k": 2},
            "pool_blocks": 24,
            "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 48, "enable_caching": true},
            "dp_ranks": 2,
            "seed": 3
        },
        "faults": [{"fault": "delay_outputs", "step": 2, "by": 1}],
        "steps": [
            {"step": 0, "rank": 0, "ops": [
                {"op": "add_request", "req": "c", "prompt": prompt(0..8)},
                {"op": "schedule", "req": "c", "num_new_tokens": 8},
                {"op": "forward", "batch": [{"req": "c", "tokens": 8, "output": [9]}]},
                {"op": "process_outputs"},
                {"op": "inject_point", "point": 1}]},
            {"step": 0, "rank": 1, "ops": [{"op": "inject_point", "point": 1}, {"op": "add_request", "req": "x", "prompt": {"source": "salted", "salt": "s", "len": 6, "vocab": 100}}]},
            {"step": 1, "rank": 0, "ops": [
                {"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 8, "headroom": 4, "tail": "zero",
                 "groups": [{"shared": [1, 2], "tail": [5]}, {"shared": [3, 4], "tail": [6]}], "ok": true, "covered": true},
                {"op": "cache_blocks", "req": "c", "num_tokens": 8},
                {"op": "begin_timed", "point": 1},
                {"op": "forward", "batch": [{"req": "s", "tokens": 1, "output": [1]}]},
                {"op": "end_timed", "point": 1}]},
            {"step": 2, "rank": 0, "ops": [
                {"op": "finish", "req": "s", "fenced": true},
                {"op": "shed", "req": "c"},
                {"op": "process_outputs"},
                {"op": "copy_block", "group": 0, "src": 1, "dst": 2},
                {"op": "zero_blocks", "group": 1, "blocks": [3]},
                {"op": "reset_prefix_cache"},
                {"op": "end_sweep"}]}
        ]
    })
}

fn random_value(rng: &mut ChaCha8Rng, depth: u32) -> Value {
    match rng.gen_range(0..if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.gen::<bool>()),
        2 => json!(rng.gen_range(-3i64..40)),
        3 => [
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e300),
            json!(0.5),
            json!(4_294_967_296u64),
        ][rng.gen_range(0..5)]
        .clone(),
        4 => json!(
            [
                "",
                "c",
                "s",
                "kvtrace/1",
                "kvsim-plan/1",
                "full_attention",
                "mamba",
                "ids",
                "zero"
            ][rng.gen_range(0..9)]
        ),
        5 => json!(rng.gen_range(0u64..30)),
        6 => Value::Array((0..rng.gen_range(0..4)).map(|_| random_value(rng, depth + 1)).collect()),
        _ => {
            let keys = [
                "op",
                "req",
                "ids",
                "tokens",
                "step",
                "rank",
                "block_size",
                "kind",
                "num_new_tokens",
                "groups",
                "ctx",
            ];
            Value::Object(
                (0..rng.gen_range(0..4))
                    .map(|_| {
                        (
                            keys[rng.gen_range(0..keys.len())].to_string(),
                            random_value(rng, depth + 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

/// Apply 1–4 random edits somewhere inside `v`.
fn mutate(rng: &mut ChaCha8Rng, v: &mut Value) {
    for _ in 0..rng.gen_range(1..=4) {
        let mut cur = &mut *v;
        loop {
            let descend = rng.gen_bool(0.75);
            let next_index = match cur {
                Value::Array(a) if !a.is_empty() && descend => Some(rng.gen_range(0..a.len())),
                Value::Object(m) if !m.is_empty() && descend => Some(rng.gen_range(0..m.len())),
                _ => None,
            };
            match (next_index, cur) {
                (Some(i), Value::Array(a)) => cur = &mut a[i],
                (Some(i), Value::Object(m)) => {
                    let key = m.keys().nth(i).cloned().expect("index in range");
                    cur = m.get_mut(&key).expect("key exists");
                }
                (_, target) => {
                    match (rng.gen_range(0..4), &mut *target) {
                        (0, Value::Array(a)) if !a.is_empty() => {
                            let i = rng.gen_range(0..a.len());
                            let dup = a[i].clone();
                            a.insert(rng.gen_range(0..=a.len()), dup);
                        }
                        (1, Value::Array(a)) if !a.is_empty() => {
                            a.remove(rng.gen_range(0..a.len()));
                        }
                        (2, Value::Object(m)) if !m.is_empty() => {
                            let key = m.keys().nth(rng.gen_range(0..m.len())).cloned().expect("non-empty");
                            m.remove(&key);
                        }
                        _ => *target = random_value(rng, 0),
                    }
                    break;
                }
            }
        }
    }
}

fn guarded(f: impl FnOnce()) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Run `iterations` fuzz inputs from `seed`. Deterministic for a given seed.
pub fn fuzz(seed: u64, iterations: u64) -> FuzzSummary {
    fuzz_with(seed, iterations, &mut |_, _| {})
}

/// `fuzz`, reporting (inputs done, iterations) every 256 inputs and at the end.
pub fn fuzz_with(seed: u64, iterations: u64, progress: &mut dyn FnMut(u64, u64)) -> FuzzSummary {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let plan_seed = seed_plan();
    let trace_seeds: Vec<Value> = (0..8).map(|i| kvtrace::gen::generate(seed, i)).collect();
    let mut s = FuzzSummary::default();
    for it in 0..iterations {
        s.iterations += 1;
        let kind = rng.gen_range(0..10);
        let (target, text): (&'static str, String) = match kind {
            0 => (
                "plan",
                (0..rng.gen_range(0..64)).map(|_| rng.gen::<u8>() as char).collect(),
            ),
            1 => ("kvtrace", random_value(&mut rng, 0).to_string()),
            2..=5 => {
                let mut p = plan_seed.clone();
                mutate(&mut rng, &mut p);
                ("plan", p.to_string())
            }
            _ => {
                let mut t = trace_seeds[rng.gen_range(0..trace_seeds.len())].clone();
                mutate(&mut rng, &mut t);
                ("kvtrace", t.to_string())
            }
        };
        let mut accepted = false;
        let mut clean = false;
        let result = guarded(|| {
            if target == "plan" {
                if let Ok(plan) = load_plan(&text) {
                    accepted = true;
                    clean = run_plan(&plan).passed();
                }
            } else {
                let _ = kvtrace::replay(&text);
            }
        });
        match result {
            Ok(()) => {
                s.plans_accepted += u64::from(accepted);
                s.plans_executed_clean += u64::from(clean);
                s.traces_replayed += u64::from(target == "kvtrace");
            }
            Err(message) => s.crashes.push(Crash {
                iteration: it,
                target,
                input: text,
                message,
            }),
        }
        if (it + 1) % 256 == 0 || it + 1 == iterations {
            progress(it + 1, iterations);
        }
    }
    s
}
