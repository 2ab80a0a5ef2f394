//! `replay --against` on a PL-NO-POACH finding: the poaching request's prefill, as vLLM would
//! run it after the finding (admitted with its prefix-cache hit, computing only the uncached
//! rest: `LowerOptions::admit_poached_hits`), against the same request's prefill in the fixed
//! plan. Every program step is timed by the executor's events, so the steps holding the prefill
//! are measured even when no benchmark window holds them (a decode point's warm-up prefill).
//!
//! Steps are matched by request, not by step number: the failing plan's prompt chunks of the
//! poaching request from the finding's step on, against the same request's chunks in the fixed
//! plan from the same step on (the two plans agree up to the finding), chunk k against chunk k.
//! The first chunk is the finding's step.

use kvsim_core::device::PromptChunk;
use kvsim_gpu::executor::ExecReport;
use serde_json::{json, Value};

use super::replay_symptom::Compared;

/// The poaching request's prompt chunks in both plans.
pub struct Prefills<'a> {
    /// The poaching request.
    pub req: &'a str,
    /// Its prompt length.
    pub prompt: u64,
    /// Its chunks in the failing plan (lowered with the poached hit admitted).
    pub failing: Vec<PromptChunk>,
    /// The same request's chunks in the fixed plan.
    pub fixed: Vec<PromptChunk>,
}

/// Median, least and most over the runs of the summed device time (µs) of program `steps`.
fn steps_over_runs(runs: &[ExecReport], steps: &[usize]) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = runs
        .iter()
        .map(|r| {
            let mine: Vec<f64> = r
                .steps
                .iter()
                .filter(|t| steps.contains(&t.step))
                .map(|t| f64::from(t.device_ms) * 1000.0)
                .collect();
            (mine.len() == steps.len()).then(|| mine.iter().sum())
        })
        .collect::<Option<_>>()?;
    if v.is_empty() || steps.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

fn program_steps(chunks: &[PromptChunk]) -> Vec<usize> {
    chunks.iter().map(|c| c.program_step).collect()
}

fn plan_steps(chunks: &[PromptChunk]) -> String {
    let s: Vec<String> = chunks.iter().map(|c| c.plan_step.to_string()).collect();
    s.join(", ")
}

fn computed(chunks: &[PromptChunk]) -> u64 {
    chunks.iter().map(|c| c.tokens).sum()
}

/// Plan steps of `chunks` inside a timed window of the first run.
fn timed(chunks: &[PromptChunk], r: &ExecReport) -> Vec<u64> {
    chunks
        .iter()
        .filter(|c| {
            r.points
                .iter()
                .any(|w| w.step_begin <= c.program_step && c.program_step <= w.step_end)
        })
        .map(|c| c.plan_step)
        .collect()
}

fn side(chunks: &[PromptChunk], t: (f64, f64, f64)) -> Value {
    json!({
        "prompt_tokens_computed": computed(chunks),
        "first_position": chunks.first().map_or(0, |c| c.start),
        "steps": chunks.iter().map(|c| c.plan_step).collect::<Vec<_>>(),
        "chunk_tokens": chunks.iter().map(|c| c.tokens).collect::<Vec<_>>(),
        "step_tokens": chunks.iter().map(|c| c.step_tokens).collect::<Vec<_>>(),
        "synthetic": chunks.iter().map(|c| c.synthetic).collect::<Vec<_>>(),
        "us": t.0,
        "range_us": [t.1, t.2],
    })
}

/// The prefill comparison: JSON for the result, a clause for the terminal line.
pub fn compare(p: &Prefills<'_>, failing: &[ExecReport], fixed: &[ExecReport]) -> (Value, String) {
    let (a, b) = (&p.failing, &p.fixed);
    let (ta, tb) = (
        steps_over_runs(failing, &program_steps(a)),
        steps_over_runs(fixed, &program_steps(b)),
    );
    let (Some(ta), Some(tb)) = (ta, tb) else {
        let why = format!(
            "the {} plan has no timed prompt chunk of {}",
            if ta.is_none() { "failing" } else { "fixed" },
            p.req
        );
        return (json!({"request": p.req, "observed": false, "why": why}), why);
    };
    let all = Compared::of(ta, tb);
    // The finding's step: the first chunk in both plans.
    let first = steps_over_runs(failing, &program_steps(&a[..1])).zip(steps_over_runs(fixed, &program_steps(&b[..1])));
    let first = first.map(|(x, y)| Compared::of(x, y));
    let hit = a[0].start;
    let synthetic = a.iter().chain(b).any(|c| c.synthetic);
    let in_windows = timed(a, &failing[0]);
    let mut text = format!(
        "the poaching prefill of {} computed {} of {} prompt tokens (a {hit}-token prefix-cache hit; fixed: {}); \
         its steps {} ran {:.1} µs vs {:.1} µs fixed (steps {}): {}",
        p.req,
        computed(a),
        p.prompt,
        computed(b),
        plan_steps(a),
        ta.0,
        tb.0,
        plan_steps(b),
        all.text(),
    );
    if let (Some(c), true) = (&first, a.len() > 1) {
        text.push_str(&format!(
            "; the finding's step {} alone ({} vs {} of the step's new tokens): {}",
            a[0].plan_step,
            a[0].step_tokens,
            b[0].step_tokens,
            c.text()
        ));
    }
    if synthetic {
        text.push_str(
            "; its synthetic KV (fake_compute) is materialised on the device as a prefill of its tokens, \
             a stand-in for the benchmark's injection",
        );
    }
    text.push_str(&match in_windows.as_slice() {
        [] => "; no timed window holds these steps: the benchmark records none of this".to_string(),
        s => format!("; of these, step(s) {s:?} are in a timed window"),
    });
    let v = json!({
        "request": p.req,
        "prompt_tokens": p.prompt,
        "hit_tokens": hit,
        "matched_by": "the request's prompt chunks from the finding's step on, chunk k against chunk k",
        "failing": side(a, ta),
        "fixed": side(b, tb),
        "difference_us": all.diff,
        "difference_pct": all.pct,
        "spread_pct": all.spread,
        "observed": all.observed,
        "finding_step": first.map(|c| c.json()),
        "timed_steps": in_windows,
    });
    (v, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvsim_gpu::executor::{PointTiming, StepTiming};
    use kvsim_gpu::PointId;

    fn chunk(program_step: usize, plan_step: u64, start: u64, tokens: u64) -> PromptChunk {
        PromptChunk {
            program_step,
            plan_step,
            start,
            tokens,
            synthetic: false,
            step_tokens: tokens,
        }
    }

    /// One run: device µs per program step, and windows (point, first step, last step).
    fn run(us: &[f64], windows: &[(u32, usize, usize)]) -> ExecReport {
        ExecReport {
            steps: us
                .iter()
                .enumerate()
                .map(|(step, &t)| StepTiming {
                    step,
                    device_ms: (t / 1000.0) as f32,
                    host_ns: 0,
                })
                .collect(),
            points: windows
                .iter()
                .map(|&(p, b, e)| PointTiming {
                    point: PointId(p),
                    step_begin: b,
                    step_end: e,
                    device_ms: 0.01,
                    host_ns: 0,
                    wall_ns: None,
                })
                .collect(),
            ..ExecReport::default()
        }
    }

    /// The poaching request's 2 chunks at program steps 1 and 2 (plan steps 18, 19); in the
    /// fixed plan the same chunks sit at program steps 1 and 3 (another step in between).
    fn prefills() -> Prefills<'static> {
        Prefills {
            req: "p3.r0.s0",
            prompt: 4093,
            failing: vec![chunk(1, 18, 112, 2048), chunk(2, 19, 2160, 1933)],
            fixed: vec![chunk(1, 18, 0, 2048), chunk(3, 20, 2048, 2045)],
        }
    }

    #[test]
    fn the_prefill_is_matched_by_chunk_and_its_sign_and_size_measured() {
        let failing: Vec<ExecReport> = [400.0, 402.0, 401.0]
            .iter()
            .map(|&s1| run(&[10.0, s1, 380.0, 5.0], &[(3, 3, 3)]))
            .collect();
        // Program step 2 of the fixed plan is someone else's (999 µs): not compared.
        let fixed: Vec<ExecReport> = [400.0, 401.0, 402.0]
            .iter()
            .map(|&s1| run(&[10.0, s1, 999.0, 400.0, 5.0], &[(3, 4, 4)]))
            .collect();
        let (v, text) = compare(&prefills(), &failing, &fixed);
        // 401 + 380 against 401 + 400: 20 µs (2.5 %) faster, beyond the 2 µs run-to-run range.
        assert!((v["difference_us"].as_f64().unwrap() + 20.0).abs() < 1e-3, "{v}");
        assert!((v["difference_pct"].as_f64().unwrap() + 100.0 * 20.0 / 801.0).abs() < 1e-3);
        assert_eq!(v["observed"], true);
        assert_eq!(v["hit_tokens"], 112);
        assert_eq!(v["failing"]["prompt_tokens_computed"], 3981);
        assert_eq!(v["fixed"]["steps"], json!([18, 20]));
        // The finding's step alone: the same 2048 tokens, within the spread.
        assert_eq!(v["finding_step"]["observed"], false, "{v}");
        assert_eq!(v["timed_steps"], json!([]));
        assert!(
            text.starts_with("the poaching prefill of p3.r0.s0 computed 3981 of 4093 prompt tokens (a 112-token"),
            "{text}"
        );
        assert!(text.contains("-20.0 µs (-2.5%)"), "{text}");
        assert!(text.contains("no timed window holds these steps"), "{text}");
    }

    #[test]
    fn a_difference_inside_the_spread_is_not_observed_and_timed_steps_are_named() {
        let failing: Vec<ExecReport> = [380.0, 420.0]
            .iter()
            .map(|&t| run(&[10.0, 400.0, t, 5.0], &[(3, 2, 2)]))
            .collect();
        let fixed: Vec<ExecReport> = (0..2).map(|_| run(&[10.0, 400.0, 0.0, 400.0], &[])).collect();
        let (v, text) = compare(&prefills(), &failing, &fixed);
        assert_eq!(v["observed"], false, "{v}");
        assert!(text.contains("not observed"), "{text}");
        assert_eq!(v["timed_steps"], json!([19]));
    }

    #[test]
    fn a_plan_without_the_chunks_says_so() {
        let mut p = prefills();
        p.fixed.clear();
        let runs = vec![run(&[1.0, 1.0, 1.0], &[])];
        let (v, text) = compare(&p, &runs, &runs);
        assert_eq!(v["observed"], false);
        assert_eq!(text, "the fixed plan has no timed prompt chunk of p3.r0.s0");
    }
}
