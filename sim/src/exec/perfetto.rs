//! Chrome/Perfetto trace export: steps, requests, shadows and measurement
//! windows on a timeline (open in ui.perfetto.dev or chrome://tracing).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::report::RunReport;

/// Lanes: 0 = steps, 1 = measurement windows, 2.. = one per request.
pub fn perfetto_json(report: &RunReport) -> Value {
    let mut events: Vec<Value> = Vec::new();
    let mut lanes: BTreeMap<(u32, String), u64> = BTreeMap::new();
    let mut next_lane: BTreeMap<u32, u64> = BTreeMap::new();
    let mut lane = |rank: u32, name: &str| -> u64 {
        if let Some(&l) = lanes.get(&(rank, name.to_string())) {
            return l;
        }
        let n = next_lane.entry(rank).or_insert(2);
        let l = *n;
        *n += 1;
        lanes.insert((rank, name.to_string()), l);
        l
    };
    let mut step_start: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    let mut timed_open: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let us = |ns: u64| ns as f64 / 1000.0;
    for e in &report.trace {
        step_start.entry((e.rank, e.step)).or_insert(e.t_ns);
        let op = e.op.get("op").and_then(Value::as_str).unwrap_or("fault");
        let args = json!({"op": e.op, "result": e.result});
        match op {
            "forward" => {
                for b in e.op["batch"].as_array().into_iter().flatten() {
                    let req = b["req"].as_str().unwrap_or("?");
                    events.push(
                        json!({"name": format!("{req} +{}", b["tokens"]), "cat": "request", "ph": "X",
                        "ts": us(e.t_ns), "dur": 900.0, "pid": e.rank, "tid": lane(e.rank, req), "args": args}),
                    );
                }
            }
            "begin_timed" => {
                timed_open.insert(e.rank, (e.op["point"].as_u64().unwrap_or(0), e.t_ns));
            }
            "end_timed" => {
                if let Some((point, t0)) = timed_open.remove(&e.rank) {
                    events.push(
                        json!({"name": format!("timed point {point}"), "cat": "measurement", "ph": "X",
                        "ts": us(t0), "dur": us(e.t_ns.saturating_sub(t0)).max(1.0), "pid": e.rank, "tid": 1}),
                    );
                }
            }
            _ => {
                let tid = match (e.op.get("req").or(e.op.get("shadow")).and_then(Value::as_str), op) {
                    (Some(r), _) => lane(e.rank, r),
                    _ => 0,
                };
                events.push(json!({"name": op, "cat": if op == "register_shadow" { "shadow" } else { "op" }, "ph": "i", "s": "t",
                    "ts": us(e.t_ns), "pid": e.rank, "tid": tid, "args": args}));
            }
        }
    }
    for ((rank, step), t) in &step_start {
        events.push(json!({"name": format!("step {step}"), "cat": "step", "ph": "X", "ts": us(*t), "dur": 1000.0, "pid": rank, "tid": 0}));
    }
    for ((rank, name), l) in &lanes {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": l, "args": {"name": name}}));
    }
    for rank in next_lane
        .keys()
        .copied()
        .chain(step_start.keys().map(|k| k.0))
        .collect::<std::collections::BTreeSet<_>>()
    {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}}));
        events.push(json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": 1, "args": {"name": "measurement"}}));
        events.push(json!({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": format!("rank {rank}")}}));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}
