//! Ops in the form trace writers write them, read as whole shapes: keys in
//! sorted order, no whitespace, a short id, every field of its op's type. The
//! keys then follow each other in a fixed order, so an op is matched by
//! comparing the literals between its values a word at a time, instead of
//! reading each key, checking it for a duplicate and building the op from the
//! fields found (`Text::op`). Anything else is left to `Text::op` (`None`),
//! which compiles it alike: a shape returns the op `build` makes of it.
//!
//! A shape is matched in a window of the op's first `W` bytes, at offsets
//! from its `{`: in the common shapes every offset is bounded, so the compiler
//! proves each read inside the window and checks nothing but the window.

#[cfg(not(target_arch = "x86_64"))]
use super::stops;
use super::{leading_digits, word_of, IdText, Out, Parser, Text};
use crate::kvtrace::compile::{offset, Alloc, Commit, Op, Span};

/// The bytes a shape is matched in, from the op's `{`: its token lists may run
/// past them (they are read in the text), anything else of the op may not.
/// The longest `allocate_slots` shape (every member, `false` for each flag, a
/// 7-byte id, 7 digits) takes 142.
const W: usize = 144;

/// An op's first `W` bytes. Within `W` of the text's end, a copy padded with
/// zero bytes, which no literal, digit or id of a shape matches.
type Window = [u8; W];

/// The word at offset `k` of `w`.
#[inline(always)]
fn word(w: &Window, k: usize) -> Option<u64> {
    let c: &[u8; 8] = w.get(k..k + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(*c))
}

/// Whether `w` holds `lit` (at most 32 bytes) at `k`. A literal of 8 bytes or
/// more is compared a word at a time (its last word overlapping the one
/// before); a shorter one as the low bytes of one word.
#[inline(always)]
fn has<const N: usize>(w: &Window, k: usize, lit: &[u8; N]) -> bool {
    const { assert!(N <= 32) };
    if N < 8 {
        let mask = (1u64 << (8 * N)) - 1;
        return word(w, k).is_some_and(|x| x & mask == word_of(lit));
    }
    let Some(c) = w.get(k..k + N) else {
        return false;
    };
    let at = |s: &[u8], j: usize| {
        let mut x = [0; 8];
        x.copy_from_slice(&s[j..j + 8]);
        u64::from_le_bytes(x)
    };
    let mut diff = at(c, N - 8) ^ at(lit, N - 8);
    let mut j = 0;
    while j + 8 < N {
        diff |= at(c, j) ^ at(lit, j);
        j += 8;
    }
    diff == 0
}

/// An integer of 1 to 7 digits at `k`, without a leading zero: its value and
/// where it ends. What follows it is the caller's to check (a literal, so no
/// fraction or exponent); longer ones are left to `Text::op`.
#[inline(always)]
fn int(w: &Window, k: usize) -> Option<(u64, usize)> {
    let x = word(w, k)?;
    let (n, len) = leading_digits(x)?;
    if len == 0 || (len > 1 && x as u8 == b'0') {
        return None;
    }
    Some((n, k + len as usize))
}

/// `true` or `false` at `k`, and where it ends.
#[inline(always)]
fn flag(w: &Window, k: usize) -> Option<(bool, usize)> {
    if has(w, k, b"true") {
        Some((true, k + 4))
    } else if has(w, k, b"false") {
        Some((false, k + 5))
    } else {
        None
    }
}

/// The offset after the comma at `k`.
#[inline(always)]
fn comma(w: &Window, k: usize) -> Option<usize> {
    (w.get(k) == Some(&b',')).then_some(k + 1)
}

/// A non-empty id of up to 7 bytes from `k` (after its opening quote) to the
/// first quote, backslash or control byte, which the caller's next literal
/// must show to be its closing quote: its packed word (`Ids`'s key) and where
/// it ends. Longer ids are left to `Text::op`.
#[inline(always)]
fn short_id(w: &Window, k: usize) -> Option<(u64, usize)> {
    let x = word(w, k)?;
    let n = first_stop(x, word(w, k + 8)?);
    if n == 0 || n > 7 {
        return None;
    }
    let bytes = x & ((1u64 << (8 * n)) - 1);
    Some((bytes | u64::from(n) << 56, k + n as usize))
}

/// The index of the first quote, backslash or control byte in the sixteen
/// bytes of `lo` then `hi` (16 where there is none).
#[inline(always)]
fn first_stop(lo: u64, hi: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64.
    return unsafe { sse2_first_stop(lo, hi) };
    #[cfg(not(target_arch = "x86_64"))]
    match stops(lo) {
        0 => 8 + stops(hi).trailing_zeros() / 8,
        m => m.trailing_zeros() / 8,
    }
}

/// `first_stop` with SSE2: three compares of the sixteen bytes at once (half
/// the instructions of the word-at-a-time `stops`, on the most common value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2_first_stop(lo: u64, hi: u64) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_set_epi64x,
    };
    let v = _mm_set_epi64x(hi as i64, lo as i64);
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
    let stops = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32;
    (stops | 1 << 16).trailing_zeros()
}

/// The members that sort before `id`: `cache_salt`, `delay_cache_blocks` and
/// `full_sequence_must_fit` (each op reads the ones it has, as `build` does).
#[derive(Clone, Copy, Default)]
struct Lead<'a> {
    salt: Option<&'a str>,
    delay: Option<bool>,
    must_fit: Option<bool>,
}

impl<'a> Text<'a> {
    /// The op at `i`, compiled into `out` if it is of a shape read here, and the
    /// position after it (`None` for anything else, with no op, id or string
    /// added; tokens may have been appended, for the caller to drop).
    #[inline(always)]
    pub(super) fn shaped_op(self, i: usize, out: &mut Out) -> Option<usize> {
        match self.b.get(i..).and_then(<[u8]>::first_chunk::<W>) {
            Some(w) => self.shape(i, w, out),
            None => self.shape_near_end(i, out),
        }
    }

    /// `shaped_op` within `W` bytes of the text's end.
    #[inline(never)]
    fn shape_near_end(self, i: usize, out: &mut Out) -> Option<usize> {
        let rest = self.b.get(i..)?;
        let mut w = [0; W];
        w.get_mut(..rest.len())?.copy_from_slice(rest);
        self.shape(i, &w, out)
    }

    #[inline(always)]
    fn shape(self, i: usize, w: &Window, out: &mut Out) -> Option<usize> {
        let head = word(w, 0)?;
        if head & 0xFF_FFFF_FFFF_FFFF == word_of(b"{\"id\":\"") {
            return self.id_on(i, w, 7, Lead::default(), out);
        }
        const NEW_STEP: &[u8; 17] = b"{\"op\":\"new_step\"}";
        if has(w, 0, NEW_STEP) {
            return Some(out.push(Op::NewStep, i + NEW_STEP.len()));
        }
        self.led(i, w, out)
    }

    /// An op of a rarer shape: `reset_prefix_cache`, or one with members before its `id`.
    #[inline(never)]
    fn led(self, i: usize, w: &Window, out: &mut Out) -> Option<usize> {
        const RESET: &[u8; 27] = b"{\"op\":\"reset_prefix_cache\"}";
        if has(w, 0, RESET) {
            return Some(out.push(Op::ResetPrefixCache, i + RESET.len()));
        }
        if w[0] != b'{' {
            return None;
        }
        let (mut lead, mut k) = (Lead::default(), 1);
        if has(w, k, b"\"cache_salt\":") {
            k += 13;
            let salt = if has(w, k, b"null") {
                k += 4;
                None
            } else {
                let (salt, at) = self.parse(i + k, Parser::string)?;
                k = at - i;
                Some(salt)
            };
            lead.salt = salt;
            k = comma(w, k)?;
        }
        if has(w, k, b"\"delay_cache_blocks\":") {
            let (v, at) = flag(w, k + 21)?;
            lead.delay = Some(v);
            k = comma(w, at)?;
        }
        if has(w, k, b"\"full_sequence_must_fit\":") {
            let (v, at) = flag(w, k + 25)?;
            lead.must_fit = Some(v);
            k = comma(w, at)?;
        }
        if !has(w, k, b"\"id\":\"") {
            return None;
        }
        self.id_on(i, w, k + 6, lead, out)
    }

    /// The rest of an op from its id (its first byte at `k`): what follows the
    /// id tells the shapes apart.
    #[inline(always)]
    fn id_on(self, i: usize, w: &Window, k: usize, lead: Lead<'a>, out: &mut Out) -> Option<usize> {
        let (packed, at) = short_id(w, k)?;
        let id = IdText::Short(packed, i + k);
        let k = at;
        let next = word(w, k)?;
        if next == word_of(b"\",\"op\":\"") {
            return self.named(i, w, k + 8, id, lead, out);
        }
        if next == word_of(b"\",\"num_n") {
            return self.allocate_slots(i, w, k + 8, id, lead, out);
        }
        // `","num_tokens":`, then a `commit` or a `cache_blocks`.
        if next != word_of(b"\",\"num_t") || !has(w, k + 8, b"okens\":") {
            return None;
        }
        let (n, k) = int(w, k + 15)?;
        const COMMIT: &[u8; 14] = b",\"op\":\"commit\"";
        if has(w, k, COMMIT) {
            let k = k + COMMIT.len();
            let (output_tokens, end) = match w.get(k) {
                Some(b'}') => {
                    let none = Span {
                        start: offset(out.data.tokens.len()),
                        len: 0,
                    };
                    (none, i + k + 1)
                }
                _ if has(w, k, b",\"output_tokens\":[") => self.output_tokens(i, w, k + 18, out)?,
                _ => return None,
            };
            let op = Op::Commit(Ok(Commit {
                id: out.intern(id, self.s)?,
                num_tokens: n,
                output_tokens,
            }));
            return Some(out.push(op, end));
        }
        const CACHE: &[u8; 21] = b",\"op\":\"cache_blocks\"}";
        if !has(w, k, CACHE) {
            return None;
        }
        let op = Op::CacheBlocks(Ok((out.intern(id, self.s)?, n)));
        Some(out.push(op, i + k + CACHE.len()))
    }

    /// A commit's `output_tokens` from its first item (at `k`) and the op's end:
    /// the usual one token read here, any other list by `tokens`.
    #[inline(always)]
    fn output_tokens(self, i: usize, w: &Window, k: usize, out: &mut Out) -> Option<(Span, usize)> {
        let tokens = &mut out.data.tokens;
        if let Some((token, at)) = int(w, k) {
            if has(w, at, b"]}") {
                let start = offset(tokens.len());
                tokens.push(token);
                return Some((Span { start, len: 1 }, i + at + 2));
            }
        }
        let (span, at) = self.tokens(i + k - 1, tokens)?;
        Some((span, self.close(at)?))
    }

    /// An `allocate_slots` from `num_new_tokens` (`k`: the key's ninth byte).
    #[inline(always)]
    fn allocate_slots(self, i: usize, w: &Window, k: usize, id: IdText, lead: Lead, out: &mut Out) -> Option<usize> {
        if !has(w, k, b"ew_tokens\":") {
            return None;
        }
        let (n, k) = int(w, k + 11)?;
        const ALLOC: &[u8; 22] = b",\"op\":\"allocate_slots\"";
        if !has(w, k, ALLOC) || n == 0 {
            return None;
        }
        let k = k + ALLOC.len();
        let (use_computed, end) = match w.get(k) {
            Some(b'}') => (true, k + 1),
            _ if has(w, k, b",\"use_computed\":") => {
                let (v, at) = flag(w, k + 16)?;
                (v, (w.get(at) == Some(&b'}')).then_some(at + 1)?)
            }
            _ => return None,
        };
        let op = Op::AllocateSlots(Ok(Alloc {
            id: out.intern(id, self.s)?,
            num_new_tokens: n,
            num_lookahead_tokens: 0,
            delay_cache_blocks: lead.delay.unwrap_or(false),
            full_sequence_must_fit: lead.must_fit.unwrap_or(false),
            use_computed,
        }));
        Some(out.push(op, i + end))
    }

    /// The rest of an op whose `op` follows its id: the name at `k` (after its
    /// opening quote), then a prompt for `add_request`, else the op's end.
    #[inline(always)]
    fn named(self, i: usize, w: &Window, k: usize, id: IdText, lead: Lead, out: &mut Out) -> Option<usize> {
        const ADD: &[u8; 22] = b"add_request\",\"prompt\":";
        if has(w, k, ADD) {
            let (prompt, at) = self.tokens(i + k + ADD.len(), &mut out.data.tokens)?;
            let end = self.close(at)?;
            let id = out.intern(id, self.s)?;
            let salt = lead.salt.map(|s| out.data.string(s.to_string()));
            let op = Op::AddRequest {
                id: Ok(id),
                prompt: Ok(prompt),
                salt: Ok(salt),
            };
            return Some(out.push(op, end));
        }
        let (op, len): (fn(u32) -> Op, usize) = match w.get(k)? {
            b'f' if has(w, k, b"free\"}") => (|id| Op::Free(Ok(id)), 6),
            b'g' if has(w, k, b"get_computed_blocks\"}") => (|id| Op::GetComputedBlocks(Ok(id)), 21),
            b'p' if has(w, k, b"preempt\"}") => (|id| Op::Preempt(Ok(id)), 9),
            _ => return None,
        };
        let op = op(out.intern(id, self.s)?);
        Some(out.push(op, i + k + len))
    }

    /// The position after the `}` at `i` (in the text) that closes an op.
    #[inline(always)]
    fn close(self, i: usize) -> Option<usize> {
        (self.b.get(i) == Some(&b'}')).then_some(i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::agree;
    use super::super::{Out, Text};

    /// Ops in the shapes read here, one of each (and of each optional member).
    const SHAPED: [&str; 22] = [
        r#"{"cache_salt":"x","delay_cache_blocks":true,"id":"r1","op":"free"}"#,
        r#"{"full_sequence_must_fit":true,"id":"r1","num_tokens":3,"op":"commit","output_tokens":[5]}"#,
        r#"{"cache_salt":null,"full_sequence_must_fit":false,"id":"r1","num_new_tokens":2,"op":"allocate_slots"}"#,
        r#"{"delay_cache_blocks":false,"full_sequence_must_fit":false,"id":"r123456","num_new_tokens":1234567,"op":"allocate_slots","use_computed":false}"#,
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
    /// Both where the text ends within a window's bytes of the op (a padded
    /// copy) and where it does not; the two read alike.
    fn shaped_as_read(text: &str) -> bool {
        let long = format!("{text}{}", " ".repeat(super::W));
        let [near_end, within] = [text, &long].map(|text| {
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
            end
        });
        assert_eq!(near_end, within, "{text}");
        within.is_some()
    }

    /// `op` in a trace between other ops (more than a window's bytes after
    /// it), and as the trace's last op.
    fn in_traces(op: &str) -> [String; 2] {
        let head = r#"{"format":"kvtrace/1","config":{"block_size":4,"num_blocks":8,"max_model_len":64,"enable_caching":true,"groups":[{"kind":"full_attention"}]},"ops":["#;
        let free = r#"{"id":"r12","op":"free"}"#;
        let frees = [free; 8].join(",\n");
        [
            format!("{head}\n{free},\n{op},\n{frees}\n]}}\n"),
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

    /// `first_stop` finds the byte a byte-at-a-time search finds, whatever
    /// comes before and after it (and 16 where there is none).
    #[test]
    fn the_first_stop_is_the_first_stop_byte() {
        let bytes = [b'a', b'"', b'\\', 0, 0x1F, b' ', 0x7F, 0x80, 0xFF, b'0', b'}'];
        let stop = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for round in 0..200_000u32 {
            let mut b = [0u8; 16];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly plain bytes, so that a stop is often far in or absent.
                *byte = if x.is_multiple_of(4) {
                    bytes[(x >> 8) as usize % bytes.len()]
                } else {
                    b'a' + (x >> 16) as u8 % 26
                };
            }
            if round.is_multiple_of(3) {
                b = [b'r'; 16];
                b[(x >> 20) as usize % 16] = bytes[(x >> 30) as usize % bytes.len()];
            }
            let want = b.iter().position(|&c| stop(c)).unwrap_or(16) as u32;
            let (lo, hi) = (
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                u64::from_le_bytes(b[8..].try_into().unwrap()),
            );
            assert_eq!(super::first_stop(lo, hi), want, "{b:?}");
        }
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
                    format!(r#"{{"id":"{id}","num_tokens":1,"op":"commit","output_tokens":[{n}]}}"#),
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
