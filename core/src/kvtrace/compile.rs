//! Ops compiled once into typed form: every field is read and checked, and any
//! `InvalidOp` message built, before replay; request ids are interned. Checks
//! that need replay state stay in the replayer, in the order kvtrace-format.md's ops
//! make them, so a compiled op fails exactly as the raw op would.

use serde_json::Value;

use super::ids::Ids;
use super::ops::{self, Fields, Key};

/// A token list in `OpData::tokens`.
#[derive(Clone, Copy, Debug)]
/// 32-bit offsets keep `Op` small (40 bytes, not 72): a replay streams through the ops.
pub struct Span {
    pub(super) start: u32,
    pub(super) len: u32,
}

/// A string (a salt, an op name, an error message) in `OpData::strings`.
#[derive(Clone, Copy, Debug)]
pub struct Str(pub(super) u32);

/// A trace's token count or string count as an offset (traces are far smaller).
pub(super) fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 tokens and strings per trace")
}

/// A stateless check's outcome: the value, or the op's `InvalidOp` message.
pub type Checked<T> = Result<T, Str>;

/// The variable-size data of compiled ops, kept out of the ops themselves.
/// Token lists are stored back to back in op order, so a replay reads them as
/// one stream instead of chasing a heap allocation per op.
#[derive(Clone, Debug, Default)]
pub struct OpData {
    pub ids: Ids,
    pub(super) tokens: Vec<u64>,
    pub(super) strings: Vec<String>,
}

impl OpData {
    pub fn tokens(&self, s: Span) -> &[u64] {
        let start = s.start as usize;
        &self.tokens[start..start + s.len as usize]
    }

    pub fn str(&self, s: Str) -> &str {
        &self.strings[s.0 as usize]
    }

    /// Drop per-op data (ids stay interned): for compiling one op at a time.
    pub fn clear_ops(&mut self) {
        self.tokens.clear();
        self.strings.clear();
    }

    /// The token list `key` of `f`, appended as a span (nothing appended on error).
    fn span(&mut self, f: &Fields, key: Key, required: bool) -> Result<Span, String> {
        let start = self.tokens.len();
        ops::tokens_into(f, key, required, &mut self.tokens)?;
        Ok(Span {
            start: offset(start),
            len: offset(self.tokens.len() - start),
        })
    }

    pub(super) fn string(&mut self, s: String) -> Str {
        self.strings.push(s);
        Str(offset(self.strings.len() - 1))
    }

    /// A field check's outcome, its message stored on failure.
    fn check<T>(&mut self, r: Result<T, String>) -> Checked<T> {
        r.map_err(|e| self.string(e))
    }
}

/// `allocate_slots` fields (all checked before the request is looked up).
#[derive(Clone, Copy, Debug)]
pub struct Alloc {
    pub id: u32,
    pub num_new_tokens: u64,
    pub num_lookahead_tokens: u64,
    pub delay_cache_blocks: bool,
    pub full_sequence_must_fit: bool,
    pub use_computed: bool,
}

/// `commit` fields (all checked before the request is looked up).
#[derive(Clone, Copy, Debug)]
pub struct Commit {
    pub id: u32,
    pub num_tokens: u64,
    pub output_tokens: Span,
}

#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// The op is not a JSON object.
    NotObject,
    /// The object has no string `op`.
    MissingName,
    /// An op name kvtrace/1 does not define.
    Unknown(Str),
    /// The liveness check sits between the id and the prompt, so each field
    /// keeps its own outcome.
    AddRequest {
        id: Checked<u32>,
        prompt: Checked<Span>,
        salt: Checked<Option<Str>>,
    },
    NewStep,
    GetComputedBlocks(Checked<u32>),
    AllocateSlots(Checked<Alloc>),
    Commit(Checked<Commit>),
    CacheBlocks(Checked<(u32, u64)>),
    Preempt(Checked<u32>),
    Free(Checked<u32>),
    ResetPrefixCache,
}

impl Op {
    /// The observation's `op` field (`null` for a non-object or a missing name).
    pub fn name<'a>(&self, data: &'a OpData) -> Option<&'a str> {
        Some(match *self {
            Op::NotObject | Op::MissingName => return None,
            Op::Unknown(name) => data.str(name),
            Op::AddRequest { .. } => "add_request",
            Op::NewStep => "new_step",
            Op::GetComputedBlocks(_) => "get_computed_blocks",
            Op::AllocateSlots(_) => "allocate_slots",
            Op::Commit(_) => "commit",
            Op::CacheBlocks(_) => "cache_blocks",
            Op::Preempt(_) => "preempt",
            Op::Free(_) => "free",
            Op::ResetPrefixCache => "reset_prefix_cache",
        })
    }
}

/// Compile one raw op into `data` (interning its request id).
pub fn compile_op(op: &Value, data: &mut OpData) -> Op {
    let Some(f) = op.as_object() else {
        return Op::NotObject;
    };
    let f = &Fields::of(f);
    let id = |data: &mut OpData| ops::id(f).map(|s| data.ids.intern(s));
    match f.get(Key::Op).and_then(Value::as_str) {
        None => Op::MissingName,
        Some("add_request") => {
            let id = id(data);
            let prompt = data.span(f, Key::Prompt, true);
            let salt = match f.get(Key::CacheSalt) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(data.string(s.clone()))),
                Some(v) => Err(format!("cache_salt must be a string or null, got {v}")),
            };
            Op::AddRequest {
                id: data.check(id),
                prompt: data.check(prompt),
                salt: data.check(salt),
            }
        }
        Some("new_step") => Op::NewStep,
        Some("get_computed_blocks") => Op::GetComputedBlocks({
            let id = id(data);
            data.check(id)
        }),
        Some("allocate_slots") => {
            let fields = id(data).and_then(|id| {
                let num_new_tokens = ops::int(f, Key::NumNewTokens, None)?;
                if num_new_tokens < 1 {
                    return Err("num_new_tokens must be >= 1".into());
                }
                Ok(Alloc {
                    id,
                    num_new_tokens,
                    num_lookahead_tokens: ops::int(f, Key::NumLookaheadTokens, Some(0))?,
                    delay_cache_blocks: ops::flag(f, Key::DelayCacheBlocks, false)?,
                    full_sequence_must_fit: ops::flag(f, Key::FullSequenceMustFit, false)?,
                    use_computed: ops::flag(f, Key::UseComputed, true)?,
                })
            });
            Op::AllocateSlots(data.check(fields))
        }
        Some("commit") => {
            let fields = id(data).and_then(|id| {
                let num_tokens = ops::int(f, Key::NumTokens, None)?;
                Ok(Commit {
                    id,
                    num_tokens,
                    output_tokens: data.span(f, Key::OutputTokens, false)?,
                })
            });
            Op::Commit(data.check(fields))
        }
        Some("cache_blocks") => {
            let fields = id(data).and_then(|id| Ok((id, ops::int(f, Key::NumTokens, None)?)));
            Op::CacheBlocks(data.check(fields))
        }
        Some("preempt") => Op::Preempt({
            let id = id(data);
            data.check(id)
        }),
        Some("free") => Op::Free({
            let id = id(data);
            data.check(id)
        }),
        Some("reset_prefix_cache") => Op::ResetPrefixCache,
        Some(other) => Op::Unknown(data.string(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_op_stays_small() {
        // Replays stream through the ops; the 32-bit offsets are what keep them at 40 bytes.
        assert!(
            std::mem::size_of::<super::Op>() <= 40,
            "{}",
            std::mem::size_of::<super::Op>()
        );
    }
}
