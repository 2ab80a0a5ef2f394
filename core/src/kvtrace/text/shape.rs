//! Ops in the form trace writers write them, read as whole shapes: keys in
//! sorted order, no whitespace, a short id, every field of its op's type. The
//! keys then follow each other in a fixed order, so an op is matched by
//! comparing the literals between its values a word at a time, instead of
//! reading each key, checking it for a duplicate and building the op from the
//! fields found (`Text::op`). Anything else is left to `Text::op` (`None`),
//! which compiles it alike: a shape returns the op `build` makes of it.

use super::{word_at, word_of, Name, Out, Parser, Text};
use crate::kvtrace::compile::{offset, Alloc, Commit, Op, Span};

/// Whether the text at `i` begins with `lit` (at most 32 bytes). A literal of
/// 8 bytes or more is compared a word at a time (its last word overlapping
/// the one before); a shorter one as the low bytes of one word, so it needs
/// 8 bytes of text (trace text always has more after the literals read here).
#[inline(always)]
fn has<const N: usize>(b: &[u8], i: usize, lit: &[u8; N]) -> bool {
    const { assert!(N <= 32) };
    if N < 8 {
        let mask = (1u64 << (8 * N)) - 1;
        return word_at(b, i).is_some_and(|w| w & mask == word_of(lit));
    }
    let Some(c) = b.get(i..).and_then(<[u8]>::first_chunk::<N>) else {
        return false;
    };
    let at = |s: &[u8; N], k: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&s[k..k + 8]);
        u64::from_le_bytes(w)
    };
    let mut diff = at(c, N - 8) ^ at(lit, N - 8);
    let mut k = 0;
    while k + 8 < N {
        diff |= at(c, k) ^ at(lit, k);
        k += 8;
    }
    diff == 0
}

/// The members that sort before `id`: an `add_request`'s `cache_salt`, an
/// `allocate_slots`' `delay_cache_blocks` and `full_sequence_must_fit`.
#[derive(Clone, Copy, Default)]
struct Lead<'a> {
    /// `Some(None)`: `"cache_salt":null`.
    salt: Option<Option<&'a str>>,
    delay: Option<bool>,
    must_fit: Option<bool>,
}

impl<'a> Text<'a> {
    /// The op at `i`, if it is of a shape read here (`None` for anything else,
    /// with no id interned; tokens may have been appended, for the caller to drop).
    #[inline(always)]
    pub(super) fn shaped_op(self, i: usize, out: &mut Out) -> Option<usize> {
        let head = word_at(self.b, i)?;
        if head & 0xFF_FFFF_FFFF_FFFF == word_of(b"{\"id\":\"") {
            return self.after_lead(i + 6, Lead::default(), out);
        }
        if has(self.b, i, b"{\"op\":\"new_step\"}") {
            return Some(out.push(Op::NewStep, i + 17));
        }
        self.led_op(i, out)
    }

    /// An op of a rarer shape: `reset_prefix_cache`, or one with members before its `id`.
    #[inline(never)]
    fn led_op(self, i: usize, out: &mut Out) -> Option<usize> {
        let b = self.b;
        const RESET: &[u8; 27] = b"{\"op\":\"reset_prefix_cache\"}";
        if has(b, i, RESET) {
            return Some(out.push(Op::ResetPrefixCache, i + RESET.len()));
        }
        let mut lead = Lead::default();
        let mut j = i + 1;
        if b.get(i) != Some(&b'{') {
            return None;
        }
        if has(b, j, b"\"cache_salt\":") {
            let (salt, at) = if has(b, j + 13, b"null") {
                (None, j + 17)
            } else {
                self.parse(j + 13, Parser::string).map(|(s, at)| (Some(s), at))?
            };
            lead.salt = Some(salt);
            j = self.comma(at)?;
        }
        if has(b, j, b"\"delay_cache_blocks\":") {
            let (v, at) = self.bool(j + 21)?;
            lead.delay = Some(v);
            j = self.comma(at)?;
        }
        if has(b, j, b"\"full_sequence_must_fit\":") {
            let (v, at) = self.bool(j + 25)?;
            lead.must_fit = Some(v);
            j = self.comma(at)?;
        }
        if !has(b, j, b"\"id\":") {
            return None;
        }
        self.after_lead(j + 5, lead, out)
    }

    /// The position after the comma at `i`.
    #[inline(always)]
    fn comma(self, i: usize) -> Option<usize> {
        (self.b.get(i) == Some(&b',')).then_some(i + 1)
    }

    /// `true` or `false` at `i`.
    #[inline(always)]
    fn bool(self, i: usize) -> Option<(bool, usize)> {
        if has(self.b, i, b"true") {
            Some((true, i + 4))
        } else if has(self.b, i, b"false") {
            Some((false, i + 5))
        } else {
            None
        }
    }

    /// The position after the `}` at `i` that closes an op.
    #[inline(always)]
    fn close(self, i: usize) -> Option<usize> {
        (self.b.get(i) == Some(&b'}')).then_some(i + 1)
    }

    /// The rest of an op from its id's opening quote at `i`: what follows the
    /// id tells the shapes apart.
    #[inline(always)]
    fn after_lead(self, i: usize, lead: Lead<'a>, out: &mut Out) -> Option<usize> {
        let b = self.b;
        let (id, j) = self.id(i)?;
        let next = word_at(b, j)?;
        if next & 0xFF_FFFF_FFFF_FFFF == word_of(b",\"op\":\"") {
            return self.named(j + 6, id, lead, out);
        }
        // The one member shorter than 8 bytes is read; the rest have 8 or more.
        if next == word_of(b",\"num_ne") {
            if !has(b, j, b",\"num_new_tokens\":") {
                return None;
            }
            let (n, k) = self.uint(j + 18)?;
            const ALLOC: &[u8; 22] = b",\"op\":\"allocate_slots\"";
            if !has(b, k, ALLOC) {
                return None;
            }
            let k = k + ALLOC.len();
            let (use_computed, end) = match self.close(k) {
                Some(end) => (true, end),
                None if has(b, k, b",\"use_computed\":") => {
                    let (v, at) = self.bool(k + 16)?;
                    (v, self.close(at)?)
                }
                None => return None,
            };
            if lead.salt.is_some() || n == 0 {
                return None;
            }
            let op = Op::AllocateSlots(Ok(Alloc {
                id: out.intern(id, self.s)?,
                num_new_tokens: n,
                num_lookahead_tokens: 0,
                delay_cache_blocks: lead.delay.unwrap_or(false),
                full_sequence_must_fit: lead.must_fit.unwrap_or(false),
                use_computed,
            }));
            return Some(out.push(op, end));
        }
        if next != word_of(b",\"num_to") || !has(b, j, b",\"num_tokens\":") {
            return None;
        }
        let (n, k) = self.uint(j + 14)?;
        if lead.salt.is_some() || lead.delay.is_some() || lead.must_fit.is_some() {
            return None;
        }
        const COMMIT: &[u8; 14] = b",\"op\":\"commit\"";
        if has(b, k, COMMIT) {
            let k = k + COMMIT.len();
            let (output_tokens, end) = match self.close(k) {
                Some(end) => {
                    let none = Span {
                        start: offset(out.data.tokens.len()),
                        len: 0,
                    };
                    (none, end)
                }
                None if has(b, k, b",\"output_tokens\":") => {
                    let (span, at) = self.tokens(k + 17, &mut out.data.tokens)?;
                    (span, self.close(at)?)
                }
                None => return None,
            };
            let id = out.intern(id, self.s)?;
            let op = Op::Commit(Ok(Commit {
                id,
                num_tokens: n,
                output_tokens,
            }));
            return Some(out.push(op, end));
        }
        const CACHE: &[u8; 21] = b",\"op\":\"cache_blocks\"}";
        if !has(b, k, CACHE) {
            return None;
        }
        let op = Op::CacheBlocks(Ok((out.intern(id, self.s)?, n)));
        Some(out.push(op, k + CACHE.len()))
    }

    /// The rest of an op whose `op` follows its id: the name at `i` (its
    /// opening quote), then a prompt for `add_request`, else the op's end.
    #[inline(always)]
    fn named(self, i: usize, id: super::IdText<'a>, lead: Lead<'a>, out: &mut Out) -> Option<usize> {
        let b = self.b;
        let (name, k) = self.op_name(i)?;
        if lead.delay.is_some() || lead.must_fit.is_some() {
            return None;
        }
        if let Name::AddRequest = name {
            if !has(b, k, b",\"prompt\":") {
                return None;
            }
            let (prompt, at) = self.tokens(k + 10, &mut out.data.tokens)?;
            let end = self.close(at)?;
            let id = out.intern(id, self.s)?;
            let salt = lead.salt.flatten().map(|s| out.data.string(s.to_string()));
            let op = Op::AddRequest {
                id: Ok(id),
                prompt: Ok(prompt),
                salt: Ok(salt),
            };
            return Some(out.push(op, end));
        }
        if lead.salt.is_some() {
            return None;
        }
        let end = self.close(k)?;
        let op = match name {
            Name::Free => Op::Free(Ok(out.intern(id, self.s)?)),
            Name::GetComputedBlocks => Op::GetComputedBlocks(Ok(out.intern(id, self.s)?)),
            Name::Preempt => Op::Preempt(Ok(out.intern(id, self.s)?)),
            _ => return None,
        };
        Some(out.push(op, end))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::agree;
    use super::super::{Out, Text};

    /// Ops in the shapes read here, one of each (and of each optional member).
    const SHAPED: [&str; 18] = [
        r#"{"id":"r12","num_new_tokens":23,"op":"allocate_slots"}"#,
        r#"{"delay_cache_blocks":true,"full_sequence_must_fit":false,"id":"r1","num_new_tokens":7,"op":"allocate_slots","use_computed":false}"#,
        r#"{"full_sequence_must_fit":true,"id":"r1","num_new_tokens":1,"op":"allocate_slots","use_computed":true}"#,
        r#"{"delay_cache_blocks":false,"id":"r1","num_new_tokens":1234567,"op":"allocate_slots"}"#,
        r#"{"id":"r0","num_tokens":19,"op":"commit","output_tokens":[26]}"#,
        r#"{"id":"r0","num_tokens":23,"op":"commit"}"#,
        r#"{"id":"r0","num_tokens":0,"op":"commit","output_tokens":[1,22,333,4444,55555,0,7]}"#,
        r#"{"id":"r0","num_tokens":3,"op":"commit","output_tokens":[]}"#,
        r#"{"id":"r3","num_tokens":8,"op":"cache_blocks"}"#,
        r#"{"id":"r5","op":"free"}"#,
        r#"{"id":"r5","op":"get_computed_blocks"}"#,
        r#"{"id":"seven77","op":"preempt"}"#,
        r#"{"id":"r2","op":"add_request","prompt":[109,457,140,469,218,812,8]}"#,
        r#"{"cache_salt":null,"id":"r2","op":"add_request","prompt":[1,2]}"#,
        r#"{"cache_salt":"a","id":"é","op":"add_request","prompt":[0]}"#,
        r#"{"cache_salt":"","id":"r9","op":"add_request","prompt":[]}"#,
        r#"{"op":"new_step"}"#,
        r#"{"op":"reset_prefix_cache"}"#,
    ];

    /// What is compiled into `out`, rendered (ids by name).
    fn dump(out: &Out) -> String {
        let ids: Vec<&str> = (0..out.data.ids.count() as u32).map(|k| out.data.ids.name(k)).collect();
        format!("{:?} {:?} {:?} {ids:?}", out.ops, out.data.tokens, out.data.strings)
    }

    /// The op leading `text`, read as a shape and field by field: where the
    /// shape reads it, both make the same op and end at the same place; where
    /// it does not, it leaves no op, string or id behind. Whether it read it.
    fn shaped_as_read(text: &str) -> bool {
        let t = Text {
            s: text,
            b: text.as_bytes(),
        };
        let (mut shaped, mut read) = (Out::new(0), Out::new(0));
        let end = t.shaped_op(0, &mut shaped);
        match end {
            Some(end) => {
                assert_eq!(Some(end), t.unshaped_op(0, &mut read), "{text}");
                assert_eq!(dump(&shaped), dump(&read), "{text}");
            }
            None => {
                let left = (shaped.ops.len(), shaped.data.strings.len(), shaped.data.ids.count());
                assert_eq!(left, (0, 0, 0), "{text}");
            }
        }
        end.is_some()
    }

    /// `op` in a trace between two other ops, and as the trace's last op.
    fn in_traces(op: &str) -> [String; 2] {
        let head = r#"{"format":"kvtrace/1","config":{"block_size":4,"num_blocks":8,"max_model_len":64,"enable_caching":true,"groups":[{"kind":"full_attention"}]},"ops":["#;
        let free = r#"{"id":"r12","op":"free"}"#;
        [
            format!("{head}\n{free},\n{op},\n{free}\n]}}\n"),
            format!("{head}{op}]}}"),
        ]
    }

    #[test]
    fn the_shapes_are_read_as_shapes_and_as_fields_alike() {
        for op in SHAPED {
            let rest = ",\n{\"op\":\"new_step\"}]}";
            assert!(shaped_as_read(&format!("{op}{rest}")), "{op}");
            for text in in_traces(op) {
                agree(&text);
            }
        }
    }

    /// Every op one edit away from a shape (a byte deleted, doubled, replaced or
    /// inserted, the text cut short): read as a shape only where it still is one,
    /// and always compiled as serde_json and `compile` make it.
    #[test]
    fn ops_near_a_shape_compile_alike() {
        let bytes = [
            "\"", ",", "}", "{", "[", "]", ":", " ", "\n", "\\", "0", "1", "9", "-", ".", "e", "n", "t", "x", "é",
        ];
        let (mut edits, mut shaped) = (0, 0);
        for op in SHAPED {
            let mut near = Vec::new();
            for (at, c) in op.char_indices() {
                let (before, after) = op.split_at(at);
                let (this, rest) = after.split_at(c.len_utf8());
                near.push(format!("{before}{rest}"));
                near.push(format!("{before}{this}{after}"));
                for c in bytes {
                    near.push(format!("{before}{c}{rest}"));
                    near.push(format!("{before}{c}{after}"));
                }
            }
            for text in near {
                edits += 1;
                shaped += usize::from(shaped_as_read(&format!("{text},\n{{\"op\":\"new_step\"}}]}}")));
                for trace in in_traces(&text) {
                    agree(&trace);
                }
            }
            for (cut, _) in op.char_indices() {
                agree(&in_traces(&op[..cut])[1]);
                shaped_as_read(&op[..cut]);
            }
        }
        // Digits changed in a number or an id, and most edits inside token lists, keep the shape.
        assert!(shaped > edits / 20, "{shaped} of {edits}");
    }

    /// Integers of every length around the word size, ids of every length
    /// around 7 bytes, in every shape's places for them.
    #[test]
    fn numbers_and_ids_of_every_length_compile_alike() {
        let numbers = [
            "0",
            "00",
            "01",
            "1",
            "12",
            "1234567",
            "12345678",
            "123456789012345678",
            "99999999999999999999",
        ];
        let ids = [
            "",
            "r",
            "r1234",
            "r12345",
            "r123456",
            "r1234567",
            "r12345678",
            "éé",
            "ééé",
            "éééé",
        ];
        let mut read = 0;
        for n in numbers {
            for id in ids {
                for op in [
                    format!(r#"{{"id":"{id}","num_new_tokens":{n},"op":"allocate_slots"}}"#),
                    format!(r#"{{"id":"{id}","num_tokens":{n},"op":"commit","output_tokens":[{n},{n}]}}"#),
                    format!(r#"{{"id":"{id}","num_tokens":{n},"op":"cache_blocks"}}"#),
                    format!(r#"{{"id":"{id}","op":"add_request","prompt":[{n}]}}"#),
                ] {
                    read += usize::from(shaped_as_read(&format!("{op},\n{{\"op\":\"new_step\"}}]}}")));
                    for trace in in_traces(&op) {
                        agree(&trace);
                    }
                }
            }
        }
        assert!(read > 100, "{read}");
    }
}
