//! Typed reading of one op's fields; a malformed field is an `InvalidOp`.
//! An explicit `null` for an optional field means its default (as vLLM's replayer reads it).

use serde_json::{Map, Value};

/// The op fields kvtrace/1 defines.
#[derive(Clone, Copy, Debug)]
pub enum Key {
    Op,
    Id,
    Prompt,
    CacheSalt,
    NumNewTokens,
    NumLookaheadTokens,
    DelayCacheBlocks,
    FullSequenceMustFit,
    UseComputed,
    NumTokens,
    OutputTokens,
}

const KEYS: [&str; 11] = [
    "op",
    "id",
    "prompt",
    "cache_salt",
    "num_new_tokens",
    "num_lookahead_tokens",
    "delay_cache_blocks",
    "full_sequence_must_fit",
    "use_computed",
    "num_tokens",
    "output_tokens",
];

impl Key {
    fn name(self) -> &'static str {
        KEYS[self as usize]
    }
}

/// An op object's fields, found in one pass over it: each lookup in serde_json's
/// map would compare strings down its tree; unknown keys are ignored, as before.
pub struct Fields<'a>([Option<&'a Value>; KEYS.len()]);

/// The field `k` names, if kvtrace/1 defines it. The length (and for the two
/// lengths that two keys share, the first byte) picks the one candidate, so each
/// key costs one comparison with a literal, which the compiler inlines.
#[inline]
pub(super) fn key_of(k: &str) -> Option<Key> {
    let is = |name: &str, key: Key| (k == name).then_some(key);
    match (k.len(), k.as_bytes().first()) {
        (2, Some(b'o')) => is("op", Key::Op),
        (2, _) => is("id", Key::Id),
        (6, _) => is("prompt", Key::Prompt),
        (10, Some(b'c')) => is("cache_salt", Key::CacheSalt),
        (10, _) => is("num_tokens", Key::NumTokens),
        (12, _) => is("use_computed", Key::UseComputed),
        (13, _) => is("output_tokens", Key::OutputTokens),
        (14, _) => is("num_new_tokens", Key::NumNewTokens),
        (18, _) => is("delay_cache_blocks", Key::DelayCacheBlocks),
        (20, _) => is("num_lookahead_tokens", Key::NumLookaheadTokens),
        (22, _) => is("full_sequence_must_fit", Key::FullSequenceMustFit),
        _ => None,
    }
}

impl<'a> Fields<'a> {
    #[inline]
    pub fn of(m: &'a Map<String, Value>) -> Self {
        let mut f = [None; KEYS.len()];
        for (k, v) in m {
            if let Some(key) = key_of(k) {
                f[key as usize] = Some(v);
            }
        }
        Fields(f)
    }

    pub fn get(&self, key: Key) -> Option<&'a Value> {
        self.0[key as usize]
    }
}

pub fn int(f: &Fields, key: Key, default: Option<u64>) -> Result<u64, String> {
    let (v, key) = (f.get(key), key.name());
    match v.filter(|v| !v.is_null()) {
        None => default.ok_or_else(|| format!("{key} is required")),
        Some(v) if !v.is_boolean() => v
            .as_u64()
            .ok_or_else(|| format!("{key} must be a non-negative integer, got {v}")),
        Some(v) => Err(format!("{key} must be an integer, got {v}")),
    }
}

pub fn flag(f: &Fields, key: Key, default: bool) -> Result<bool, String> {
    let (v, key) = (f.get(key), key.name());
    match v.filter(|v| !v.is_null()) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("{key} must be a bool, got {v}")),
    }
}

pub fn id<'a>(f: &Fields<'a>) -> Result<&'a str, String> {
    match f.get(Key::Id).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err("id must be a non-empty string".into()),
    }
}

/// A token list appended to `out`; on error `out` is left as it was.
pub fn tokens_into(f: &Fields, key: Key, required: bool, out: &mut Vec<u64>) -> Result<(), String> {
    let (v, key) = (f.get(key), key.name());
    match v.filter(|v| !v.is_null()) {
        None if !required => Ok(()),
        None => Err(format!("{key} is required")),
        Some(Value::Array(a)) => {
            let start = out.len();
            out.reserve(a.len());
            for t in a {
                match t.as_u64() {
                    Some(t) => out.push(t),
                    None => {
                        out.truncate(start);
                        return Err(format!("{key} must hold integers >= 0, got {t}"));
                    }
                }
            }
            Ok(())
        }
        Some(v) => Err(format!("{key} must be a list of integers, got {v}")),
    }
}

#[cfg(test)]
mod tests {
    use super::{Fields, Key, KEYS};

    #[test]
    fn every_key_is_found_under_its_name() {
        let all = [
            Key::Op,
            Key::Id,
            Key::Prompt,
            Key::CacheSalt,
            Key::NumNewTokens,
            Key::NumLookaheadTokens,
            Key::DelayCacheBlocks,
            Key::FullSequenceMustFit,
            Key::UseComputed,
            Key::NumTokens,
            Key::OutputTokens,
        ];
        assert_eq!(all.len(), KEYS.len());
        let m: serde_json::Map<String, serde_json::Value> = KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), i.into()))
            .collect();
        let f = Fields::of(&m);
        for near in [
            "ox",
            "ip",
            "prompts",
            "cache_salz",
            "num_tokenz",
            "",
            "o",
            "output_tokenz",
        ] {
            assert!(super::key_of(near).is_none(), "{near:?}");
        }
        for (i, k) in all.into_iter().enumerate() {
            assert_eq!(k.name(), KEYS[i]);
            assert_eq!(
                f.get(k).and_then(serde_json::Value::as_u64),
                Some(i as u64),
                "{}",
                k.name()
            );
        }
    }
}
