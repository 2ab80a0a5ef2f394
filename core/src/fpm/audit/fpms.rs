//! Each result's retained FPM against its point: one FPM, its identity, the scheduled shape the
//! save path validated (`_bench_fpm_validation_failure`), the context variance of the balanced
//! split, the wall time and the steady / giant-median markers (AU-FPM-*).

use super::model::{Artifact, Fpm, Point};
use super::status::close;
use super::Out;

/// Population variance of the balanced split of `total` over `batch` requests: `r` requests one
/// token longer than the others.
fn balanced_variance(total: u64, batch: u64) -> f64 {
    let b = batch.max(1) as f64;
    let r = (total % batch.max(1)) as f64;
    r * (b - r) / (b * b)
}

fn shape(p: &Point, f: &Fpm) -> Vec<String> {
    let s = &f.scheduled_requests;
    let b = p.batch_size;
    let mut wrong = Vec::new();
    let mut want = |name: &str, got: u64, want: u64| {
        if got != want {
            wrong.push(format!("{name} {got}, point says {want}"));
        }
    };
    if p.is_decode() {
        want("num_decode_requests", s.num_decode_requests, b);
        want("sum_decode_kv_tokens", s.sum_decode_kv_tokens, p.total_kv_read_tokens);
        want("num_prefill_requests", s.num_prefill_requests, 0);
        want("sum_prefill_tokens", s.sum_prefill_tokens, 0);
        want("sum_prefill_kv_tokens", s.sum_prefill_kv_tokens, 0);
    } else {
        want("num_prefill_requests", s.num_prefill_requests, b);
        want("sum_prefill_tokens", s.sum_prefill_tokens, p.total_prefill_tokens);
        want("sum_prefill_kv_tokens", s.sum_prefill_kv_tokens, p.total_kv_read_tokens);
        want("num_decode_requests", s.num_decode_requests, 0);
        want("sum_decode_kv_tokens", s.sum_decode_kv_tokens, 0);
    }
    wrong
}

fn fpm(a: &Artifact, path: &str, p: &Point, f: &Fpm, out: &mut Out) {
    let mut who = Vec::new();
    if f.counter_id != p.benchmark_id {
        who.push(format!("counter_id {} for benchmark {}", f.counter_id, p.benchmark_id));
    }
    if f.dp_rank != a.dp.rank {
        who.push(format!("dp_rank {} in rank {}'s artifact", f.dp_rank, a.dp.rank));
    }
    if f.version != 1 {
        who.push(format!("version {} (1.6.1 writes FPM version 1)", f.version));
    }
    if !who.is_empty() {
        out.push("AU-FPM-IDENTITY", path, who.join("; "));
    }

    let wrong = shape(p, f);
    if !wrong.is_empty() {
        out.push("AU-FPM-SHAPE", format!("{path}.scheduled_requests"), wrong.join("; "));
    }

    let s = &f.scheduled_requests;
    if s.var_decode_kv_tokens < 0.0 || s.var_prefill_length < 0.0 {
        out.push(
            "AU-FPM-VARIANCE",
            format!("{path}.scheduled_requests"),
            "a negative variance",
        );
    } else if p.is_decode() && p.batch_size > 0 {
        let want = balanced_variance(p.total_kv_read_tokens, p.batch_size);
        if !(close(s.var_decode_kv_tokens, want) || (s.var_decode_kv_tokens - want).abs() < 1e-9) {
            out.push(
                "AU-FPM-VARIANCE",
                format!("{path}.scheduled_requests.var_decode_kv_tokens"),
                format!(
                    "{} but an even split of {} over {} has variance {want}",
                    s.var_decode_kv_tokens, p.total_kv_read_tokens, p.batch_size
                ),
            );
        }
    }

    if !(f.wall_time.is_finite() && f.wall_time > 0.0) {
        out.push(
            "AU-FPM-WALL",
            format!("{path}.wall_time"),
            format!("{}: a measured step takes positive time", f.wall_time),
        );
    }

    if !p.is_decode() {
        return;
    }
    let mut steady = Vec::new();
    if f.kvwarm_steady_sample != Some(true) {
        steady.push(format!(
            "kvwarm_steady_sample is {:?}: a decode result keeps a steady-step sample",
            f.kvwarm_steady_sample
        ));
    }
    let kv = a.kvwarm.as_ref().filter(|k| k.enabled);
    let real = p.has("kvwarm_real_kv");
    // `_bench_step_decode`: repeats = min(R, max(1, max_model_len - 1 - max ctx)), local length.
    let repeats = kv.map_or(1, |k| {
        k.giant_kv_repeats
            .min(a.limits.max_model_len.saturating_sub(1 + p.max_context()).max(1))
    });
    let declared = p.total_kv_read_tokens
        + if p.has("giant_fake_off_by_batch") {
            p.batch_size
        } else {
            0
        };
    let giant = kv.is_some_and(|k| declared >= k.giant_kv_threshold);
    match f.kvwarm_giant_median_of {
        Some(m) => {
            if kv.is_none() || !(real || giant) {
                steady.push(format!(
                    "kvwarm_giant_median_of {m} on a point that is neither real-KV nor giant"
                ));
            } else if m == 0 || m > repeats {
                steady.push(format!("kvwarm_giant_median_of {m} outside 1..={repeats} steady steps"));
            }
        }
        None if real && kv.is_some() && repeats > 1 => steady.push(format!(
            "a real-KV point runs {repeats} steady steps and records their median"
        )),
        None => {}
    }
    if !steady.is_empty() {
        out.push("AU-FPM-STEADY", path, steady.join("; "));
    }
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    for (i, r) in a.results.iter().enumerate() {
        if r.fpms.len() != 1 {
            out.push(
                "AU-FPM-COUNT",
                format!("$.results[{i}].fpms"),
                format!("{} FPMs; every point keeps exactly one", r.fpms.len()),
            );
        }
        for (j, f) in r.fpms.iter().enumerate() {
            fpm(a, &format!("$.results[{i}].fpms[{j}]"), &r.point, f, out);
        }
    }
}
