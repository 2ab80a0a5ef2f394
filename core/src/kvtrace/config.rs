//! The trace's `config` object → `KvConfig` (kvtrace-format.md §2.1).

use serde_json::{Map, Value};

use crate::kv::{ConfigError, GroupKind, GroupSpec, KvConfig, MambaMode};

fn int(m: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>, ConfigError> {
    match m.get(key) {
        None => Ok(None),
        Some(v) if !v.is_boolean() && v.as_u64().is_some() => Ok(v.as_u64()),
        Some(v) => Err(ConfigError(format!(
            "{path}{key} must be a non-negative integer, got {v}"
        ))),
    }
}

fn req_int(m: &Map<String, Value>, key: &str, path: &str, min: u64) -> Result<u64, ConfigError> {
    let v = int(m, key, path)?.ok_or_else(|| ConfigError(format!("{path}{key} is missing")))?;
    if v < min {
        return Err(ConfigError(format!("{path}{key} must be >= {min}, got {v}")));
    }
    Ok(v)
}

pub fn parse_config(v: &Value) -> Result<KvConfig, ConfigError> {
    let m = v
        .as_object()
        .ok_or_else(|| ConfigError("config must be an object".into()))?;
    let num_blocks = req_int(m, "num_blocks", "", 2)?;
    let num_blocks = u32::try_from(num_blocks).map_err(|_| ConfigError("num_blocks is too large".into()))?;
    let enable_caching = m
        .get("enable_caching")
        .and_then(Value::as_bool)
        .ok_or_else(|| ConfigError("enable_caching must be a bool".into()))?;
    let max_model_len = req_int(m, "max_model_len", "", 2)?;
    let block_size = req_int(m, "block_size", "", 1)?;
    let max_in_flight_tokens = match int(m, "max_in_flight_tokens", "")? {
        None => max_model_len,
        Some(0) => return Err(ConfigError("max_in_flight_tokens must be >= 1".into())),
        Some(n) => n,
    };
    let groups_v = m
        .get("groups")
        .and_then(Value::as_array)
        .filter(|g| !g.is_empty())
        .ok_or_else(|| ConfigError("groups must be a non-empty list".into()))?;
    let mut groups = Vec::with_capacity(groups_v.len());
    for (i, g) in groups_v.iter().enumerate() {
        let path = format!("groups[{i}].");
        let g = g
            .as_object()
            .ok_or_else(|| ConfigError(format!("groups[{i}] must be an object")))?;
        let bs = int(g, "block_size", &path)?.unwrap_or(block_size);
        if bs < 1 {
            return Err(ConfigError(format!("{path}block_size must be >= 1")));
        }
        let kind = match g.get("kind").and_then(Value::as_str) {
            Some("full_attention") => GroupKind::FullAttention,
            Some("mla") => GroupKind::Mla,
            Some("sliding_window") => GroupKind::SlidingWindow {
                sliding_window: req_int(g, "sliding_window", &path, 2)?,
            },
            Some("chunked_local") => GroupKind::ChunkedLocal {
                attention_chunk_size: req_int(g, "attention_chunk_size", &path, 1)?,
            },
            Some("mamba") => GroupKind::Mamba {
                mamba_cache_mode: match g.get("mamba_cache_mode").and_then(Value::as_str) {
                    Some("none") => MambaMode::None,
                    Some("align") => MambaMode::Align,
                    other => {
                        return Err(ConfigError(format!(
                            "{path}mamba_cache_mode must be \"none\" or \"align\", got {other:?}"
                        )))
                    }
                },
            },
            other => return Err(ConfigError(format!("{path}kind: unknown kind {other:?}"))),
        };
        groups.push(GroupSpec { kind, block_size: bs });
    }
    let cfg = KvConfig {
        num_blocks,
        enable_caching,
        max_model_len,
        max_in_flight_tokens,
        groups,
        watermark_blocks: 0,
    };
    cfg.validate()?;
    Ok(cfg)
}
