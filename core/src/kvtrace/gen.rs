//! A seeded generator of valid, realistic kvtrace/1 traces (kvtrace-format.md §5): an FCFS
//! scheduler emulation driven online against the model, so allocation refusals
//! lead to preemptions just as they do in vLLM. Same seed ⇒ same trace.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::session::Session;

/// The layouts of kvtrace-format.md §5, round-robin by trace index.
pub const LAYOUTS: [&str; 16] = [
    "full",
    "full-nocache",
    "mla",
    "full+swa",
    "full+swa-nocache",
    "full+mamba",
    "full+mamba-none",
    "swa",
    "swa-nocache",
    "chunked",
    "chunked-nocache",
    "full+chunked",
    "full+swa+swa",
    "mamba",
    "mamba-none",
    "full2x+swa",
];

/// Every other `full+swa+swa` trace is drawn until a lookup in it makes the hybrid fixed
/// point re-ask a group at a shorter length (a later window shortening an earlier window's
/// hit, issue 19): random workloads reach that in ~3% of such traces, so the cross-checked
/// set would otherwise rarely contain one. At most this many draws.
const SEEK_ATTEMPTS: u64 = 400;

fn layout_config(layout: &str, rng: &mut ChaCha8Rng, seek: bool) -> (Value, u64) {
    let bs: u64 = [4, 8, 16][rng.gen_range(0..3)];
    let mml: u64 = [64, 128, 256][rng.gen_range(0..3)];
    let caching = !layout.ends_with("-nocache") && !layout.ends_with("-none");
    let window = rng.gen_range(2..=3 * bs);
    let swa = json!({"kind": "sliding_window", "sliding_window": window});
    let mode = if caching { "align" } else { "none" };
    let mamba_bs = if caching { bs } else { mml };
    let mamba = json!({"kind": "mamba", "mamba_cache_mode": mode, "block_size": mamba_bs});
    let chunk = json!({"kind": "chunked_local", "attention_chunk_size": bs * rng.gen_range(1..=4)});
    let full = json!({"kind": "full_attention"});
    let base = layout.trim_end_matches("-nocache").trim_end_matches("-none");
    let groups = match base {
        "full" => vec![full],
        "mla" => vec![json!({"kind": "mla"})],
        "full+swa" => vec![full, swa],
        "full+mamba" => vec![full, mamba],
        "swa" => vec![swa],
        "chunked" => vec![chunk],
        "full+chunked" => vec![full, chunk],
        "full+swa+swa" => {
            let w2 = if seek {
                // A smaller later window frees its blocks earlier, so pressure evicts them first.
                rng.gen_range(2..=window.max(3) - 1)
            } else if rng.gen_bool(0.5) {
                window
            } else {
                rng.gen_range(2..=3 * bs)
            };
            vec![full, swa, json!({"kind": "sliding_window", "sliding_window": w2})]
        }
        "mamba" => vec![mamba],
        "full2x+swa" => vec![json!({"kind": "full_attention", "block_size": 2 * bs}), swa],
        _ => vec![full],
    };
    // The pool holds at least one max-length request, scaled by a pressure class.
    let peak: u64 = groups.len() as u64 * mml.div_ceil(bs) + 2;
    let scale = if seek {
        1.0
    } else {
        [1.0, 1.4, 2.5, 5.0][rng.gen_range(0..4)]
    } + rng.gen::<f64>() * 0.4;
    let num_blocks = ((peak as f64 * scale) as u64).max(4);
    let cfg = json!({"num_blocks": num_blocks, "enable_caching": caching, "max_model_len": mml,
                     "block_size": bs, "groups": groups});
    (cfg, mml)
}

struct Gen {
    rng: ChaCha8Rng,
    session: Session,
    ops: Vec<Value>,
    families: Vec<Vec<u64>>,
    finished: Vec<Vec<u64>>,
    next_id: u64,
}

impl Gen {
    fn op(&mut self, op: Value) -> Value {
        let step = self.session.apply(self.ops.len(), &op);
        assert!(step.error.is_none(), "generator produced an invalid op: {}", step.line);
        self.ops.push(op);
        serde_json::from_str::<Value>(&step.line).expect("observation is JSON")["result"].clone()
    }

    fn prompt(&mut self, mml: u64) -> Vec<u64> {
        let max_len = (mml - 2).max(1) as usize;
        let len = self.rng.gen_range(1..=max_len.min(48));
        let mut p: Vec<u64> = match self.rng.gen_range(0..4) {
            0 if !self.families.is_empty() => self.families[self.rng.gen_range(0..self.families.len())].clone(),
            1 if !self.finished.is_empty() => self.finished[self.rng.gen_range(0..self.finished.len())].clone(),
            _ => Vec::new(),
        };
        p.extend((0..len).map(|_| self.rng.gen_range(0..50)));
        p.truncate(max_len);
        if self.rng.gen_bool(0.3) && self.families.len() < 6 {
            self.families.push(p[..p.len() / 2].to_vec());
        }
        p
    }
}

/// One random valid trace over the layout chosen by `index` (round-robin).
pub fn generate(seed: u64, index: usize) -> Value {
    let layout = LAYOUTS[index % LAYOUTS.len()];
    let base = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    if layout != "full+swa+swa" || (index / LAYOUTS.len()) % 2 == 1 {
        return generate_from(seed, index, ChaCha8Rng::seed_from_u64(base), false);
    }
    let mut last = Value::Null;
    for attempt in 0..SEEK_ATTEMPTS {
        let rng = ChaCha8Rng::seed_from_u64(base ^ attempt.wrapping_mul(0xD1B5_4A32_D192_ED03));
        last = generate_from(seed, index, rng, true);
        let reached = super::replay_value(&last).is_ok_and(|r| r.fixed_point_reasks > 0);
        if reached {
            break;
        }
    }
    last
}

fn generate_from(seed: u64, index: usize, mut rng: ChaCha8Rng, seek: bool) -> Value {
    let layout = LAYOUTS[index % LAYOUTS.len()];
    let (config, mml) = layout_config(layout, &mut rng, seek);
    let session = Session::new(&config).expect("generated configs are valid");
    let mut g = Gen {
        rng,
        session,
        ops: Vec::new(),
        families: Vec::new(),
        finished: Vec::new(),
        next_id: 0,
    };
    let budget_cap = mml;
    let max_seqs = g.rng.gen_range(1..=4);
    let fsmf = g.rng.gen_bool(0.5);
    let steps = g.rng.gen_range(5..40);
    let mut running: Vec<(String, u64)> = Vec::new(); // (id, max_tokens)
    let mut waiting: VecDeque<(String, u64)> = VecDeque::new();
    for step in 0..steps + 30 {
        let draining = step >= steps;
        if draining && running.is_empty() && waiting.is_empty() {
            break;
        }
        g.op(json!({"op": "new_step"}));
        if !draining {
            for _ in 0..g.rng.gen_range(0..=2) {
                let id = format!("r{}", g.next_id);
                g.next_id += 1;
                let prompt = g.prompt(mml);
                let salt: Value = match g.rng.gen_range(0..10) {
                    0 => json!(""),
                    1 => json!("a"),
                    2 => json!("b"),
                    _ => Value::Null,
                };
                g.op(json!({"op": "add_request", "id": id, "prompt": prompt, "cache_salt": salt}));
                waiting.push_back((id, g.rng.gen_range(1..8)));
            }
        }
        let mut budget = budget_cap;
        let mut scheduled: Vec<(String, u64)> = Vec::new();
        let mut preempted = false;
        let mut k = 0;
        while k < running.len() && budget > 0 {
            let id = running[k].0.clone();
            let (toks, comp) = g.progress(&id);
            let n = (toks - comp).min(budget).min(mml.saturating_sub(comp + 1));
            if n == 0 {
                k += 1;
                continue;
            }
            let mut ok = false;
            loop {
                if !g
                    .op(json!({"op": "allocate_slots", "id": id, "num_new_tokens": n}))
                    .is_null()
                {
                    ok = true;
                    break;
                }
                let victim = running.pop().expect("running is non-empty");
                g.op(json!({"op": "preempt", "id": victim.0}));
                preempted = true;
                let self_victim = victim.0 == id;
                waiting.push_front(victim);
                if self_victim {
                    break;
                }
            }
            if !ok {
                break;
            }
            scheduled.push((id, n));
            budget -= n;
            k += 1;
        }
        while !preempted && budget > 0 && running.len() < max_seqs {
            let Some((id, max_tokens)) = waiting.front().cloned() else {
                break;
            };
            let lookup = g.rng.gen_range(0..100) >= 3;
            let hit = if lookup {
                g.op(json!({"op": "get_computed_blocks", "id": id}))["num_computed_tokens"]
                    .as_u64()
                    .unwrap_or(0)
            } else {
                0
            };
            let use_computed = !(lookup && g.rng.gen_range(0..100) < 3);
            let hit = if use_computed { hit } else { 0 };
            let (toks, _) = g.progress(&id);
            let n = (toks - hit).min(budget);
            let delay = g.rng.gen_range(0..100) < 8;
            let mut op = json!({"op": "allocate_slots", "id": id, "num_new_tokens": n, "full_sequence_must_fit": fsmf});
            if !use_computed {
                op["use_computed"] = json!(false);
            }
            if delay {
                op["delay_cache_blocks"] = json!(true);
            }
            if g.op(op).is_null() {
                break;
            }
            waiting.pop_front();
            running.push((id.clone(), max_tokens));
            scheduled.push((id.clone(), n));
            budget -= n;
            if delay {
                let comp = g.progress(&id).1;
                g.op(json!({"op": "cache_blocks", "id": id, "num_tokens": comp}));
            }
        }
        for (id, n) in scheduled {
            let (toks, comp) = g.progress(&id);
            let done = comp + n == toks;
            let out: Vec<u64> = if done && toks < mml {
                vec![g.rng.gen_range(0..50)]
            } else {
                vec![]
            };
            g.op(json!({"op": "commit", "id": id, "num_tokens": n, "output_tokens": out}));
            let pos = running.iter().position(|r| r.0 == id).expect("scheduled requests run");
            let generated = g.generated(&id);
            if done && (generated >= running[pos].1 || toks + 1 >= mml || g.rng.gen_range(0..20) == 0) {
                let tokens = g.tokens(&id);
                g.op(json!({"op": "free", "id": id}));
                g.finished.push(tokens);
                running.remove(pos);
            }
        }
        if g.rng.gen_range(0..30) == 0 && !running.is_empty() {
            let victim = running.remove(g.rng.gen_range(0..running.len()));
            g.op(json!({"op": "free", "id": victim.0}));
        }
        if g.rng.gen_range(0..15) == 0 {
            g.op(json!({"op": "reset_prefix_cache"}));
        }
    }
    let mut rest: Vec<String> = running.into_iter().chain(waiting).map(|r| r.0).collect();
    while !rest.is_empty() {
        let id = rest.remove(g.rng.gen_range(0..rest.len()));
        g.op(json!({"op": "free", "id": id}));
    }
    g.op(json!({"op": "reset_prefix_cache"}));
    json!({"format": "kvtrace/1", "meta": {"generator": "kvsim", "seed": seed, "index": index, "layout": layout},
           "config": config, "ops": g.ops})
}

impl Gen {
    fn req(&self, id: &str) -> &crate::kv::Request {
        self.session
            .live()
            .find(|(k, _)| *k == id)
            .map(|(_, r)| r)
            .expect("live request")
    }
    fn progress(&self, id: &str) -> (u64, u64) {
        let r = self.req(id);
        (r.num_tokens(), r.num_computed_tokens)
    }
    fn generated(&self, id: &str) -> u64 {
        let r = self.req(id);
        r.num_tokens() - r.num_prompt_tokens
    }
    fn tokens(&self, id: &str) -> Vec<u64> {
        self.req(id).tokens.clone()
    }
}
