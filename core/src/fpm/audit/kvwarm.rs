//! The kvwarm block: the gate verdict, the real/fake counters against the stamped points, the
//! stages and whether they can have served the real-KV rows (AU-KVWARM-*).

use std::collections::BTreeSet;

use super::model::{Artifact, Kvwarm};
use super::regime::is_skip_reason;
use super::Out;

fn decode_run(a: &Artifact) -> bool {
    matches!(a.config.mode.as_str(), "decode" | "agg")
}

fn gate(a: &Artifact, k: &Kvwarm, out: &mut Out) {
    let p = "$.kvwarm";
    let reason = k.skip_reason.as_deref();
    match (k.warm_eligible, reason) {
        (Some(true), Some(r)) => out.push(
            "AU-KVWARM-GATE",
            format!("{p}.skip_reason"),
            format!("{r:?} on an eligible run"),
        ),
        (Some(false), None | Some("")) => out.push(
            "AU-KVWARM-GATE",
            format!("{p}.skip_reason"),
            "an ineligible run names its skip reason",
        ),
        (None, Some(r)) => out.push(
            "AU-KVWARM-GATE",
            format!("{p}.skip_reason"),
            format!("{r:?} but the gate never ran"),
        ),
        _ => {}
    }
    if let Some(r) = reason.filter(|r| !r.is_empty()) {
        if !is_skip_reason(r) {
            out.push(
                "AU-KVWARM-GATE",
                format!("{p}.skip_reason"),
                format!("{r:?} is not a skip reason 1.6.1 writes"),
            );
        } else if (r == "flag_off") == k.enabled {
            out.push(
                "AU-KVWARM-GATE",
                format!("{p}.skip_reason"),
                format!("{r:?} with enabled={}", k.enabled),
            );
        }
    }
    if !k.enabled && k.warm_eligible == Some(true) {
        out.push(
            "AU-KVWARM-GATE",
            format!("{p}.warm_eligible"),
            "eligible with the warm-up flag off",
        );
    }
    if let Some(c) = &a.capacity.common {
        if c.kvwarm_eligible != (k.warm_eligible == Some(true)) {
            out.push(
                "AU-KVWARM-GATE",
                "$.capacity.common.kvwarm_eligible",
                format!(
                    "{} but kvwarm.warm_eligible is {:?} (the envelope carries the group's verdict)",
                    c.kvwarm_eligible, k.warm_eligible
                ),
            );
        }
    }
}

fn real_gate(a: &Artifact, out: &mut Out) {
    let ok = a
        .kvwarm
        .as_ref()
        .is_some_and(|k| k.enabled && k.warm_eligible == Some(true));
    if ok {
        return;
    }
    let why = match &a.kvwarm {
        None => "there is no kvwarm block".to_string(),
        Some(k) => format!(
            "the warm-up is enabled={} warm_eligible={:?}",
            k.enabled, k.warm_eligible
        ),
    };
    let real_regime = |r: &str| r == "real_kv" || r == "real_attention_kv_random_kda";
    for (i, r) in a.results.iter().enumerate() {
        if r.point.has("kvwarm_real_kv") || real_regime(&r.kv_seed_regime) {
            out.push(
                "AU-KVWARM-REAL",
                format!("$.results[{i}]"),
                format!("a real-KV row but {why}"),
            );
        }
    }
    for (i, s) in a.skipped_points.iter().enumerate() {
        if s.point.has("kvwarm_real_kv") || real_regime(&s.kv_seed_regime) {
            out.push(
                "AU-KVWARM-REAL",
                format!("$.skipped_points[{i}]"),
                format!("a real-KV point but {why}"),
            );
        }
    }
    if let Some(k) = &a.kvwarm {
        if k.points_real_kv > 0 {
            out.push(
                "AU-KVWARM-REAL",
                "$.kvwarm.points_real_kv",
                format!("{} real-KV points but {why}", k.points_real_kv),
            );
        }
        if !k.stages.is_empty() {
            out.push(
                "AU-KVWARM-REAL",
                "$.kvwarm.stages",
                format!("{} stage(s) but {why}", k.stages.len()),
            );
        }
    }
}

fn counts(a: &Artifact, k: &Kvwarm, out: &mut Out) {
    let decode: Vec<_> = a.points().map(|(_, p)| p).filter(|p| p.is_decode()).collect();
    let real = decode.iter().filter(|p| p.has("kvwarm_real_kv")).count() as u64;
    let fake = decode.iter().filter(|p| p.has("kvwarm_fake_fallback")).count() as u64;
    let (pr, pf) = (k.points_real_kv, k.points_fake_fallback);
    if !k.enabled {
        if pr + pf > 0 {
            out.push(
                "AU-KVWARM-COUNTS",
                "$.kvwarm",
                format!("{pr} real + {pf} fake points with the warm-up flag off"),
            );
        }
        return;
    }
    if pr < real {
        out.push(
            "AU-KVWARM-COUNTS",
            "$.kvwarm.points_real_kv",
            format!("{pr} but {real} point(s) carry kvwarm_real_kv"),
        );
    }
    if pf < fake {
        out.push(
            "AU-KVWARM-COUNTS",
            "$.kvwarm.points_fake_fallback",
            format!("{pf} but {fake} point(s) carry kvwarm_fake_fallback"),
        );
    }
    // The counters also count the eager-shape warm-up replicas (one per eager decode batch,
    // discarded from results). Only a complete run shows its whole grid.
    if a.status != "complete" || pr < real || pf < fake {
        return;
    }
    let replicas = decode
        .iter()
        .filter(|p| p.expected_capture_size.is_none())
        .map(|p| p.batch_size)
        .collect::<BTreeSet<_>>()
        .len() as u64;
    let excess = pr + pf - real - fake;
    // Under attention DP a replica of a dropped or failed rung is discarded before it is counted.
    let bad = if a.dp.size > 1 {
        excess > replicas
    } else {
        excess != replicas
    };
    if bad {
        out.push(
            "AU-KVWARM-COUNTS",
            "$.kvwarm",
            format!(
                "points_real_kv {pr} + points_fake_fallback {pf} = {} but {} stamped decode point(s) + {replicas} eager replica(s) = {}",
                pr + pf,
                real + fake,
                real + fake + replicas
            ),
        );
    }
}

fn stages(a: &Artifact, k: &Kvwarm, out: &mut Out) {
    let slots = a.max_num_running_reqs();
    let cap = a.max_model_len().saturating_sub(4);
    let fallback_batches: BTreeSet<u64> = k.capacity_fallbacks.iter().flatten().map(|f| f.batch).collect();
    for (i, s) in k.stages.iter().enumerate() {
        let p = format!("$.kvwarm.stages[{i}]");
        let details = [
            s.vanished.is_some(),
            s.pool_shortfall.is_some(),
            s.soft_timeout.is_some(),
            s.group_fallback.is_some(),
        ];
        let mut wrong = Vec::new();
        if s.built() {
            if s.failed.is_some() {
                wrong.push("a built stage has no `failed` key".to_string());
            }
            if s.depth.is_none() || s.build_seconds.is_none() {
                wrong.push("a built stage records depth and build_seconds".into());
            }
            if details.iter().any(|&d| d) {
                wrong.push("a built stage carries a failure detail".into());
            }
            if let Some(d) = s.depth {
                if d == 0 || d > cap {
                    wrong.push(format!("depth {d} outside 1..={cap} (max_model_len - 4)"));
                }
            }
            if s.batch.is_some_and(|b| fallback_batches.contains(&b)) {
                wrong.push("built for a batch the plan sent to the capacity fallback".into());
            }
        } else if !details.iter().any(|&d| d) {
            wrong.push("a failed stage says why (vanished, pool_shortfall, soft_timeout or group_fallback)".into());
        }
        if s.group_fallback.is_some() && a.dp.size == 1 {
            wrong.push("group_fallback without attention DP".into());
        }
        match s.batch {
            Some(b) if b == 0 || 2 * b > slots => {
                wrong.push(format!("batch {b}: a stage needs 2 x batch <= {slots} request slots"))
            }
            None if s.built() => wrong.push("a built stage names its batch".into()),
            _ => {}
        }
        if !wrong.is_empty() {
            out.push("AU-KVWARM-STAGES", p, wrong.join("; "));
        }
    }
    for (i, f) in k.capacity_fallbacks.iter().flatten().enumerate() {
        if f.required_blocks <= f.usable_blocks || f.batch == 0 {
            out.push(
                "AU-KVWARM-STAGES",
                format!("$.kvwarm.capacity_fallbacks[{i}]"),
                format!(
                    "batch {} needs {} of {} usable blocks: not a fallback",
                    f.batch, f.required_blocks, f.usable_blocks
                ),
            );
        }
    }
}

fn cover(a: &Artifact, k: &Kvwarm, out: &mut Out) {
    for (i, r) in a.results.iter().enumerate() {
        let p = &r.point;
        if !(p.is_decode() && p.has("kvwarm_real_kv")) {
            continue;
        }
        // A shadow is admitted at ctx - 1 and writes 1 + repeats tokens into its chain.
        let need = p.max_context() + k.giant_kv_repeats;
        let served = k
            .stages
            .iter()
            .any(|s| s.built() && s.batch == Some(p.batch_size) && s.depth.unwrap_or(0) >= need);
        if !served {
            out.push(
                "AU-KVWARM-COVER",
                format!("$.results[{i}]"),
                format!(
                    "real-KV batch {} needs a built stage of that batch at depth >= {need}",
                    p.batch_size
                ),
            );
        }
    }
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    real_gate(a, out);
    let Some(k) = &a.kvwarm else {
        if decode_run(a) && a.capacity.common.is_some() {
            out.push(
                "AU-KVWARM-GATE",
                "$",
                "a decode run that negotiated its capacity writes a kvwarm block",
            );
        }
        return;
    };
    gate(a, k, out);
    counts(a, k, out);
    stages(a, k, out);
    cover(a, k, out);
}
