//! Row provenance: `kv_seed_regime` in 1.6.1's vocabulary and equal to what the writer derives
//! (`_kvwarm_seed_regime`) from the point's stamps and the kvwarm block; skipped points' reasons
//! (AU-REGIME-*, AU-SKIP-REASON).

use super::model::{Artifact, Point};
use super::Out;

/// Regimes of `results[]` rows in 1.6.1.
pub const RESULT_REGIMES: &[&str] = &[
    "legacy",
    "real_kv",
    "fake_fallback",
    "real_prefix",
    "fake_prefix",
    "not_applicable",
    "real_attention_kv_random_kda",
    "fake_attention_kv_random_kda",
];

/// `kvwarm.skip_reason` values (`_kvwarm_warm_eligible`, `_kvwarm_prepare`); the last three carry
/// a detail after the colon.
pub const SKIP_REASONS: &[&str] = &[
    "flag_off",
    "dense_model_content_insensitive",
    "moe_tp_balanced_by_construction",
    "prefix_caching_disabled",
    "hybrid_state_layers_unsupported",
    "dataset_empty",
    "peer_ineligible",
];
pub const SKIP_REASON_PREFIXES: &[&str] = &[
    "dataset_unavailable: ",
    "tokenizer_unavailable: ",
    "content_too_shallow: ",
];

/// `skipped_points[].reason` values.
pub const SKIPPED_REASONS: &[&str] = &[
    "prefill_injection_failed",
    "fake_prefix_cache_allocation_failed",
    "fake_prefix_cache_validation_failed",
    "real_seed_injection_failed",
    "real_seed_warm_injection_failed",
    "real_seed_cache_validation_failed",
    "decode_injection_failed",
    "measured_batch_size_mismatch",
    "measured_prefill_tokens_mismatch",
    "measured_kv_read_mismatch",
    "measured_decode_context_mismatch",
    "stage_failed_under_attention_dp",
    "no_fpm_before_deadline",
    "giant_measured_coordinate_mismatch",
];

pub fn is_skip_reason(r: &str) -> bool {
    SKIP_REASONS.contains(&r) || SKIP_REASON_PREFIXES.iter().any(|p| r.starts_with(p))
}

/// Regimes of `skipped_points[]` entries: a point skipped before injection carries no stamp,
/// so it reads `unstamped` or `skip:<reason>` besides the row regimes.
fn skipped_regime_known(r: &str) -> bool {
    RESULT_REGIMES.contains(&r)
        || r == "unstamped"
        || r.strip_prefix("skip:")
            .is_some_and(|x| is_skip_reason(x) || x == "None")
}

/// What `_kvwarm_seed_regime` writes for this point; `None` where the artifact cannot tell
/// (no kvwarm block: the flag's state is unknown, so `legacy` and `unstamped` both fit).
fn derive(a: &Artifact, p: &Point) -> Result<Option<String>, String> {
    if !p.is_decode() {
        let r = if p.has("prefill_real_seed") {
            "real_prefix"
        } else if p.has("prefill_fake_prefix") {
            "fake_prefix"
        } else {
            "not_applicable"
        };
        return Ok(Some(r.into()));
    }
    let (real, fake) = (p.has("kvwarm_real_kv"), p.has("kvwarm_fake_fallback"));
    if real && fake {
        return Err("the point carries both kvwarm_real_kv and kvwarm_fake_fallback".into());
    }
    let enabled = a.kvwarm.as_ref().map(|k| k.enabled);
    if (real || fake) && enabled == Some(false) {
        return Err("a kvwarm stamp while the warm-up flag is off".into());
    }
    let kda = a.random_kda();
    if real {
        return Ok(Some(
            if kda { "real_attention_kv_random_kda" } else { "real_kv" }.into(),
        ));
    }
    if fake {
        return Ok(Some(
            if kda {
                "fake_attention_kv_random_kda"
            } else {
                "fake_fallback"
            }
            .into(),
        ));
    }
    Ok(match &a.kvwarm {
        None => None,
        Some(k) if !k.enabled => Some("legacy".into()),
        Some(k) if k.warm_eligible == Some(false) => {
            Some(format!("skip:{}", k.skip_reason.as_deref().unwrap_or("None")))
        }
        Some(_) => Some("unstamped".into()),
    })
}

fn row(a: &Artifact, path: &str, p: &Point, regime: &str, known: bool, out: &mut Out) {
    if !known {
        let hint = if regime.starts_with("skip:") {
            " (seed 000's label for a gate-rejected point; 1.6.1 stamps and labels it fake_fallback)"
        } else {
            ""
        };
        out.push(
            "AU-REGIME-VOCAB",
            path,
            format!("{regime:?} is not a regime 1.6.1 writes here{hint}"),
        );
        return;
    }
    match derive(a, p) {
        Err(why) => out.push("AU-REGIME-STAMP", path, why),
        Ok(Some(want)) if want != regime => out.push(
            "AU-REGIME-STAMP",
            path,
            format!("{regime:?} but the point's stamps and the kvwarm block give {want:?}"),
        ),
        Ok(None) if regime != "legacy" && regime != "unstamped" && p.is_decode() => out.push(
            "AU-REGIME-STAMP",
            path,
            format!("{regime:?} on an unstamped decode point without a kvwarm block"),
        ),
        Ok(_) => {}
    }
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    for (i, r) in a.results.iter().enumerate() {
        let known = RESULT_REGIMES.contains(&r.kv_seed_regime.as_str());
        row(
            a,
            &format!("$.results[{i}].kv_seed_regime"),
            &r.point,
            &r.kv_seed_regime,
            known,
            out,
        );
    }
    for (i, s) in a.skipped_points.iter().enumerate() {
        let known = skipped_regime_known(&s.kv_seed_regime);
        row(
            a,
            &format!("$.skipped_points[{i}].kv_seed_regime"),
            &s.point,
            &s.kv_seed_regime,
            known,
            out,
        );
        if !SKIPPED_REASONS.contains(&s.reason.as_str()) {
            out.push(
                "AU-SKIP-REASON",
                format!("$.skipped_points[{i}].reason"),
                format!("{:?} is not a reason 1.6.1 skips a point for", s.reason),
            );
        }
    }
}
