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

impl<'a> Fields<'a> {
    pub fn of(m: &'a Map<String, Value>) -> Self {
        let mut f = [None; KEYS.len()];
        for (k, v) in m {
            // Spelled out (not a search of KEYS) so that the compiler dispatches on length.
            let key = match k.as_str() {
                "op" => Key::Op,
                "id" => Key::Id,
                "prompt" => Key::Prompt,
                "cache_salt" => Key::CacheSalt,
                "num_new_tokens" => Key::NumNewTokens,
                "num_lookahead_tokens" => Key::NumLookaheadTokens,
                "delay_cache_blocks" => Key::DelayCacheBlocks,
                "full_sequence_must_fit" => Key::FullSequenceMustFit,
                "use_computed" => Key::UseComputed,
                "num_tokens" => Key::NumTokens,
                "output_tokens" => Key::OutputTokens,
                _ => continue,
            };
            f[key as usize] = Some(v);
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
