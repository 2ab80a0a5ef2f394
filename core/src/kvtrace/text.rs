//! Compiling a trace straight from its JSON text: one pass over the bytes
//! writes the compiled ops, with no `serde_json::Value` tree in between (a
//! tree is a heap node per op and per field, walked once and thrown away).
//!
//! The direct pass covers the well-formed traces that writers produce: plain
//! strings (no escapes), non-negative integers, every field of the type its
//! op expects. Anything else (malformed JSON, an escape, a float, a duplicate
//! key, a field check that fails, an unknown op) makes it give up, and the
//! trace is compiled the old way (`serde_json` then `compile`), so the result,
//! error messages included, is always exactly what `compile` makes of the
//! parsed text.
//!
//! Within the direct pass, an op in the form writers write it is matched as a
//! whole shape (`shape`), any other op field by field (`Text::op`); a token
//! list's common items are read 32 bytes at a time with SSSE3 where the CPU
//! has it (`runs`), a word at a time elsewhere (`items_swar`).

use serde_json::Value;

use super::compile::{offset, Alloc, Commit, Op, OpData, Span};
use super::compiled::{compile, compile_parts, CompiledTrace};
use super::config::parse_config;
use super::ops::{key_of, Key};
use super::TraceError;
use crate::kv::{GroupKind, GroupSpec, KvConfig, MambaMode};

#[cfg(target_arch = "x86_64")]
mod runs;
mod shape;

/// Compile a trace file's text: what `compile(&serde_json::from_str(text)?)`
/// returns (a text that is not JSON is `TraceError::Json`), made without the tree.
pub fn compile_text(text: &str) -> Result<CompiledTrace, TraceError> {
    if let Some(t) = direct(text) {
        return Ok(t);
    }
    let v: Value = serde_json::from_str(text).map_err(|e| TraceError::Json(e.to_string()))?;
    compile(&v)
}

/// The direct pass; `None` where it gives up.
pub(super) fn direct(text: &str) -> Option<CompiledTrace> {
    let mut p = Parser {
        s: text,
        b: text.as_bytes(),
        i: 0,
    };
    let (mut format, mut config) = (None, None);
    let mut compiled: Option<(Vec<Op>, OpData)> = None;
    p.ws();
    p.eat(b'{')?;
    p.ws();
    if !p.peek_is(b'}') {
        loop {
            let key = p.string()?;
            p.colon()?;
            match key {
                "ops" if compiled.is_none() => compiled = Some(p.ops()?),
                "format" if format.is_none() => format = Some(p.string()?),
                "config" if config.is_none() => config = Some(p.config_or_text()?),
                "ops" | "format" | "config" => return None,
                _ => {
                    p.skip_value(0)?;
                }
            }
            if !p.more(b'}')? {
                break;
            }
        }
    } else {
        p.i += 1;
    }
    p.ws();
    if p.i != p.b.len() || format? != "kvtrace/1" {
        return None;
    }
    let config = match config? {
        ConfigText::Read(cfg) => Ok(cfg),
        ConfigText::Text(text) => parse_config(&serde_json::from_str::<Value>(text).ok()?),
    };
    let (ops, data) = compiled?;
    Some(compile_parts(config, || (ops, data)))
}

/// The trace's `config`: read into the `KvConfig` that `parse_config` would
/// make of it, or (anything `Parser::config` does not read) its text, for
/// serde_json and `parse_config`.
enum ConfigText<'a> {
    Read(KvConfig),
    Text(&'a str),
}

/// Store a field's value, unless the field was seen already (`None`: a
/// duplicate key, which the direct pass leaves to serde_json).
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v);
    Some(())
}

/// A config's fields as `Parser::config` reads them.
#[derive(Default)]
struct ConfigFields<'a> {
    num_blocks: Option<u64>,
    enable_caching: Option<bool>,
    max_model_len: Option<u64>,
    block_size: Option<u64>,
    max_in_flight_tokens: Option<u64>,
    groups: Option<Vec<GroupFields<'a>>>,
}

/// A group's fields as `Parser::config` reads them.
#[derive(Default)]
struct GroupFields<'a> {
    block_size: Option<u64>,
    kind: Option<&'a str>,
    sliding_window: Option<u64>,
    attention_chunk_size: Option<u64>,
    mamba_cache_mode: Option<&'a str>,
}

impl ConfigFields<'_> {
    /// What `parse_config` makes of these fields, if it accepts them (`None` where it refuses).
    fn config(self) -> Option<KvConfig> {
        let num_blocks = u32::try_from(self.num_blocks.filter(|&n| n >= 2)?).ok()?;
        let max_model_len = self.max_model_len.filter(|&n| n >= 2)?;
        let block_size = self.block_size.filter(|&n| n >= 1)?;
        let max_in_flight_tokens = match self.max_in_flight_tokens {
            None => max_model_len,
            Some(0) => return None,
            Some(n) => n,
        };
        let groups: Vec<GroupSpec> = self.groups?.iter().map(|g| g.spec(block_size)).collect::<Option<_>>()?;
        if groups.is_empty() {
            return None;
        }
        let cfg = KvConfig {
            num_blocks,
            enable_caching: self.enable_caching?,
            max_model_len,
            max_in_flight_tokens,
            groups,
            watermark_blocks: 0,
        };
        cfg.validate().ok()?;
        Some(cfg)
    }
}

impl GroupFields<'_> {
    /// The group `parse_config` makes of these fields (`block_size` the config's).
    fn spec(&self, block_size: u64) -> Option<GroupSpec> {
        let block_size = self.block_size.unwrap_or(block_size);
        if block_size < 1 {
            return None;
        }
        let kind = match self.kind? {
            "full_attention" => GroupKind::FullAttention,
            "mla" => GroupKind::Mla,
            "sliding_window" => GroupKind::SlidingWindow {
                sliding_window: self.sliding_window.filter(|&n| n >= 2)?,
            },
            "chunked_local" => GroupKind::ChunkedLocal {
                attention_chunk_size: self.attention_chunk_size.filter(|&n| n >= 1)?,
            },
            "mamba" => GroupKind::Mamba {
                mamba_cache_mode: match self.mamba_cache_mode? {
                    "none" => MambaMode::None,
                    "align" => MambaMode::Align,
                    _ => return None,
                },
            },
            _ => return None,
        };
        Some(GroupSpec { kind, block_size })
    }
}

/// Eight bytes of `b` from `i` as one little-endian word, if there are eight.
#[inline(always)]
fn word_at(b: &[u8], i: usize) -> Option<u64> {
    let w = b.get(i..)?.first_chunk::<8>()?;
    Some(u64::from_le_bytes(*w))
}

/// Per byte of `w` (little-endian), the top bit set at the first `"`, `\\` or
/// control character (bytes after the first one found may be flagged wrongly;
/// only the lowest flag is read).
#[inline]
fn stops(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = zero(w ^ (ONES * u64::from(b'"')));
    let backslash = zero(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    quote | backslash | control
}

/// The value of the digits leading `w` (little-endian text) and how many there
/// are, when fewer than 8 (`None`: 8 digits or more, read byte by byte instead).
/// Bytes after the first non-digit are never read into the value.
#[inline(always)]
fn leading_digits(w: u64) -> Option<(u64, u32)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte the digit's value; the lowest non-digit byte (and only bytes
    // above it) can borrow, so every byte below it is exact.
    let t = w.wrapping_sub(ONES * u64::from(b'0'));
    // Top bit set where a byte's value is not 0..=9 (at or above 10 it reaches
    // 0x80 once 0x76 is added; at 0x80 and above it has the bit already). Adding
    // carries nothing out of a digit byte, so again the lowest flag is exact.
    let non_digit = (t.wrapping_add(ONES * 0x76) | t) & HIGH;
    if non_digit == 0 {
        return None;
    }
    let n = non_digit.trailing_zeros() / 8;
    if n == 0 {
        return Some((0, 0));
    }
    // The n digits to the top of the word (the first, most significant digit
    // lowest), zero digits shifted in below them; then pairs, quads and the
    // whole are combined by multiply-and-shift (each step's lanes never carry).
    let d = t << (8 * (8 - n));
    let d = (d.wrapping_mul(10 << 8 | 1) >> 8) & 0x00FF_00FF_00FF_00FF;
    let d = (d.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_FFFF_0000_FFFF;
    let d = d.wrapping_mul(10_000 << 32 | 1) >> 32;
    Some((d, n))
}

/// A list's item read from the word at it, when it is an integer of 1 to 7
/// digits without a leading zero, right followed by a comma or `]`: its value,
/// its digits, and whether `]` closes the list. `None` for anything else.
#[inline(always)]
fn list_item(w: u64) -> Option<(u64, usize, bool)> {
    let (n, len) = leading_digits(w)?;
    let first = w as u8;
    let next = (w >> (8 * len)) as u8;
    if len == 0 || (len > 1 && first == b'0') || !matches!(next, b',' | b']') {
        return None;
    }
    Some((n, len as usize, next == b']'))
}

/// The run of common items (see `list_item`) of a token list from `i`, appended
/// to `tokens`: the position after the last one read, and whether it closed the
/// list. A function of its own, so that its loop has the registers to itself.
#[inline(never)]
fn items(b: &[u8], i: usize, tokens: &mut Vec<u64>) -> (usize, bool) {
    #[cfg(target_arch = "x86_64")]
    if let Some(read) = runs::items(b, i, tokens) {
        return read;
    }
    items_swar(b, i, tokens)
}

/// `items` a word at a time.
#[inline(always)]
fn items_swar(b: &[u8], i: usize, tokens: &mut Vec<u64>) -> (usize, bool) {
    let Some(mut rest) = b.get(i..) else {
        return (i, false);
    };
    while let Some(w) = rest.first_chunk::<8>() {
        let Some((n, len, close)) = list_item(u64::from_le_bytes(*w)) else {
            break;
        };
        tokens.push(n);
        rest = &rest[len + 1..];
        if close {
            return (b.len() - rest.len(), true);
        }
    }
    (b.len() - rest.len(), false)
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

/// The op names `compile_op` compiles (any other name makes the direct pass give up).
#[derive(Clone, Copy)]
enum Name {
    AddRequest,
    Commit,
    NewStep,
    AllocateSlots,
    GetComputedBlocks,
    CacheBlocks,
    Preempt,
    Free,
    ResetPrefixCache,
}

/// An id as read: one of up to 7 bytes as its packed word (`Ids`'s key) and
/// where its name starts in the text (the name is only sliced out for an id
/// seen for the first time); a longer one as its name.
#[derive(Clone, Copy)]
enum IdText<'a> {
    Short(u64, usize),
    Long(&'a str),
}

/// The short ids already interned in this trace, by packed word, in a small
/// direct-mapped table: a hit costs a multiply and one compare instead of a
/// map probe. Only interned ids enter it, so a hit is what `Ids` would answer.
struct IdCache([(u64, u32); 64]);

impl IdCache {
    /// Empty: `u64::MAX` is no packed word (a packed word's top byte is at most 7).
    fn new() -> Self {
        IdCache([(u64::MAX, 0); 64])
    }

    /// Where the id whose packed word is `word` is cached, if it is.
    #[inline(always)]
    fn slot(&mut self, word: u64) -> &mut (u64, u32) {
        &mut self.0[(word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize]
    }
}

/// The op fields seen so far in one op object.
#[derive(Default)]
struct Fields<'a> {
    seen: u32,
    name: Option<Name>,
    id: Option<IdText<'a>>,
    salt: Option<&'a str>,
    /// `num_new_tokens`, `num_lookahead_tokens`, `num_tokens` (`None`: absent or null).
    ints: [Option<u64>; 3],
    /// `delay_cache_blocks`, `full_sequence_must_fit`, `use_computed`.
    flags: [Option<bool>; 3],
    prompt: Option<Span>,
    output_tokens: Option<Span>,
}

impl<'a> Parser<'a> {
    /// Skip whitespace: one compare where there is none (nothing at or below
    /// a space may follow a token but whitespace in valid JSON).
    #[inline(always)]
    fn ws(&mut self) {
        if self.b.get(self.i).is_some_and(|&c| c <= b' ') {
            self.ws_run();
        }
    }

    fn ws_run(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn peek_is(&self, c: u8) -> bool {
        self.b.get(self.i) == Some(&c)
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek_is(c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    #[inline]
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// After a list's item or an object's member: `Some(true)` past a comma
    /// (and the whitespace after it), `Some(false)` past `close`, `None` at
    /// anything else. Every list and object is read with it.
    #[inline(always)]
    fn more(&mut self, close: u8) -> Option<bool> {
        let mut c = *self.b.get(self.i)?;
        if c <= b' ' {
            self.ws_run();
            c = *self.b.get(self.i)?;
        }
        self.i += 1;
        if c == b',' {
            self.ws();
            Some(true)
        } else if c == close {
            Some(false)
        } else {
            None
        }
    }

    /// The colon after an object's key, with the whitespace around it.
    #[inline(always)]
    fn colon(&mut self) -> Option<()> {
        if self.eat(b':').is_none() {
            self.ws();
            self.eat(b':')?;
        }
        self.ws();
        Some(())
    }

    /// A string without escapes or control characters (its contents).
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (b, start) = (self.b, self.i);
        let mut i = start;
        // Eight bytes at a time: the first quote, backslash or control character.
        while let Some(w) = word_at(b, i) {
            let m = stops(w);
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                return self.string_end(i, start);
            }
            i += 8;
        }
        while !matches!(*b.get(i)?, b'"' | b'\\' | 0..=0x1f) {
            i += 1;
        }
        self.string_end(i, start)
    }

    /// The string from `start` to the stop at `i`, if that stop is its closing quote.
    #[inline(always)]
    fn string_end(&mut self, i: usize, start: usize) -> Option<&'a str> {
        if self.b[i] != b'"' {
            return None;
        }
        self.i = i + 1;
        self.s.get(start..i)
    }
    /// `uint`, a byte at a time.
    #[inline(never)]
    fn uint_bytes(&mut self) -> Option<u64> {
        let (b, start) = (self.b, self.i);
        let mut i = start;
        let mut n = 0u64;
        while let Some(&c) = b.get(i) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
            i += 1;
        }
        let len = i - start;
        if len == 0 || len > 19 || (len > 1 && b[start] == b'0') || matches!(b.get(i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.i = i;
        Some(n)
    }

    /// `null` (`None`) or what `f` reads.
    #[inline(always)]
    fn nullable<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek_is(b'n') {
            self.literal(b"null")?;
            return Some(None);
        }
        f(self).map(Some)
    }

    #[inline]
    fn flag(&mut self) -> Option<bool> {
        match self.b.get(self.i)? {
            b't' => self.literal(b"true").map(|_| true),
            b'f' => self.literal(b"false").map(|_| false),
            _ => None,
        }
    }

    /// The `config` value: read directly where `config` reads it, else skipped as text.
    fn config_or_text(&mut self) -> Option<ConfigText<'a>> {
        let start = self.i;
        if let Some(cfg) = self.config() {
            return Some(ConfigText::Read(cfg));
        }
        self.i = start;
        Some(ConfigText::Text(self.skip_value(0)?))
    }

    /// The `config` object read straight into the `KvConfig` that `parse_config`
    /// makes of it, when it accepts it and every field it reads is of the plain
    /// form this pass reads (`None` for anything else, left to serde_json and
    /// `parse_config`, whose errors are then the ones reported).
    fn config(&mut self) -> Option<KvConfig> {
        let mut c = ConfigFields::default();
        self.members(|p, key| match key {
            "num_blocks" => once(&mut c.num_blocks, p.int()?),
            "enable_caching" => once(&mut c.enable_caching, p.flag()?),
            "max_model_len" => once(&mut c.max_model_len, p.int()?),
            "block_size" => once(&mut c.block_size, p.int()?),
            "max_in_flight_tokens" => once(&mut c.max_in_flight_tokens, p.int()?),
            "groups" => once(&mut c.groups, p.groups()?),
            _ => p.skip_value(1).map(drop),
        })?;
        c.config()
    }

    /// The config's `groups` list, each group's fields read.
    fn groups(&mut self) -> Option<Vec<GroupFields<'a>>> {
        let mut groups = Vec::new();
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(groups);
        }
        loop {
            let mut g = GroupFields::default();
            self.members(|p, key| match key {
                "block_size" => once(&mut g.block_size, p.int()?),
                "kind" => once(&mut g.kind, p.string()?),
                "sliding_window" => once(&mut g.sliding_window, p.int()?),
                "attention_chunk_size" => once(&mut g.attention_chunk_size, p.int()?),
                "mamba_cache_mode" => once(&mut g.mamba_cache_mode, p.string()?),
                _ => p.skip_value(3).map(drop),
            })?;
            groups.push(g);
            if !self.more(b']')? {
                return Some(groups);
            }
        }
    }

    /// A non-empty object's members: `member` reads each one's value, handed its key.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        loop {
            let key = self.string()?;
            self.colon()?;
            member(self, key)?;
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// `Text::uint` here.
    fn int(&mut self) -> Option<u64> {
        let (n, at) = Text { s: self.s, b: self.b }.uint(self.i)?;
        self.i = at;
        Some(n)
    }

    /// Skip one JSON value, checking its syntax; returns its text. Strings with
    /// escapes, and nesting deeper than serde_json accepts, give up.
    fn skip_value(&mut self, depth: u32) -> Option<&'a str> {
        if depth > 100 {
            return None;
        }
        let start = self.i;
        match *self.b.get(self.i)? {
            b'"' => {
                self.string()?;
            }
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_none() {
                    loop {
                        self.string()?;
                        self.colon()?;
                        self.skip_value(depth + 1)?;
                        if !self.more(b'}')? {
                            break;
                        }
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_none() {
                    loop {
                        self.skip_value(depth + 1)?;
                        if !self.more(b']')? {
                            break;
                        }
                    }
                }
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        self.s.get(start..self.i)
    }

    /// Any JSON number (the grammar only; its value is not read).
    fn number(&mut self) -> Option<()> {
        let digits = |p: &mut Self| {
            let start = p.i;
            while p.b.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            (p.i > start).then_some(())
        };
        let _ = self.eat(b'-');
        if self.eat(b'0').is_none() {
            digits(self)?;
        }
        if self.eat(b'.').is_some() {
            digits(self)?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            digits(self)?;
        }
        Some(())
    }

    /// The `ops` list, compiled.
    fn ops(&mut self) -> Option<(Vec<Op>, OpData)> {
        let mut out = Out::new(self.b.len());
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_none() {
            let t = Text { s: self.s, b: self.b };
            self.i = t.op_list(self.i, &mut out)?;
        }
        Some((out.ops, out.data))
    }
}

/// What the op list is compiled into: the ops, their data, and the ids cached.
struct Out {
    ops: Vec<Op>,
    data: OpData,
    seen: IdCache,
}

impl Out {
    /// Sized for a text of `len` bytes (trace writers' ops take about 64 bytes each,
    /// and a request about 900; ids are reserved for twice that many), so the lists
    /// seldom grow. Tokens fill up to a seventh of a generated trace's bytes (a
    /// token of 1-3 digits and its comma): regrowing that list copied it whole,
    /// 1.5% of compiling.
    fn new(len: usize) -> Self {
        let mut out = Out {
            ops: Vec::with_capacity(len / 48),
            data: OpData::default(),
            seen: IdCache::new(),
        };
        out.data.tokens.reserve(len / 6);
        out.data.ids.reserve(len / 512);
        out
    }

    /// `op` appended; returns `end` (where the op's text ends), for the caller to return.
    #[inline(always)]
    fn push(&mut self, op: Op, end: usize) -> usize {
        self.ops.push(op);
        end
    }

    /// `intern` into these ops' data.
    #[inline(always)]
    fn intern(&mut self, id: IdText, text: &str) -> Option<u32> {
        intern(id, &mut self.data, &mut self.seen, text)
    }
}

/// The op list's reader: the same grammar as `Parser`'s, with the position
/// passed in and returned (so it stays in a register through an op) instead
/// of kept in the reader. Uncommon text is read by a `Parser` made for it.
#[derive(Clone, Copy)]
struct Text<'a> {
    s: &'a str,
    b: &'a [u8],
}

impl<'a> Text<'a> {
    /// What `f` reads with a `Parser` at `i`, and the position after it.
    #[inline(always)]
    fn parse<T>(self, i: usize, f: impl FnOnce(&mut Parser<'a>) -> Option<T>) -> Option<(T, usize)> {
        let mut p = Parser {
            s: self.s,
            b: self.b,
            i,
        };
        let v = f(&mut p)?;
        Some((v, p.i))
    }

    /// The ops from `i` (the first op) on, compiled, and the position after the list's `]`.
    #[inline(never)]
    fn op_list(self, mut i: usize, out: &mut Out) -> Option<usize> {
        let b = self.b;
        loop {
            let mark = out.data.tokens.len();
            let at = match self.shaped_op(i, out) {
                Some(at) => at,
                None => {
                    // Tokens a shape read before it gave up are read again.
                    out.data.tokens.truncate(mark);
                    self.unshaped_op(i, out)?
                }
            };
            // Traces are written an op a line: a comma and one newline are read here.
            if let Some(b",\n") = b.get(at..at + 2) {
                if b.get(at + 2).is_some_and(|&c| c > b' ') {
                    i = at + 2;
                    continue;
                }
            }
            let (more, at) = self.more(at, b']')?;
            i = at;
            if !more {
                return Some(i);
            }
        }
    }

    /// `op`, out of `op_list`'s loop (it reads the ops no shape matches).
    #[inline(never)]
    fn unshaped_op(self, i: usize, out: &mut Out) -> Option<usize> {
        let (op, at) = self.op(i, &mut out.data, &mut out.seen)?;
        Some(out.push(op, at))
    }

    /// The position past any whitespace at `i` (one compare where there is none).
    #[inline(always)]
    fn ws(self, i: usize) -> usize {
        if self.b.get(i).is_some_and(|&c| c <= b' ') {
            self.ws_run(i)
        } else {
            i
        }
    }

    #[inline(never)]
    fn ws_run(self, i: usize) -> usize {
        let mut p = Parser {
            s: self.s,
            b: self.b,
            i,
        };
        p.ws_run();
        p.i
    }

    /// `Parser::more` at `i`.
    #[inline(always)]
    fn more(self, i: usize, close: u8) -> Option<(bool, usize)> {
        let mut i = i;
        let mut c = *self.b.get(i)?;
        if c <= b' ' {
            i = self.ws_run(i);
            c = *self.b.get(i)?;
        }
        if c == b',' {
            Some((true, self.ws(i + 1)))
        } else if c == close {
            Some((false, i + 1))
        } else {
            None
        }
    }

    /// The 32 bytes from `i`, if there are 32.
    #[inline(always)]
    fn chunk(self, i: usize) -> Option<&'a [u8; 32]> {
        self.b.get(i..)?.first_chunk::<32>()
    }

    /// An op field's key and the colon after it (and the whitespace after
    /// that): `Some(key)` for the fields kvtrace/1 defines, `None` for any
    /// other key. The common form (no whitespace before the colon) is matched
    /// with its colon in `KEYS`; anything else is read as a string and looked
    /// up as `compile_op` looks keys up.
    #[inline(always)]
    fn key(self, i: usize) -> Option<(Option<Key>, usize)> {
        if let Some(c) = self.chunk(i) {
            let head = word(c, 0);
            const LOW5: u64 = 0xFF_FFFF_FFFF;
            let hit = if head & LOW5 == word_of(b"\"id\":") {
                Some((Key::Id, 5))
            } else if head & LOW5 == word_of(b"\"op\":") {
                Some((Key::Op, 5))
            } else {
                KEYS.find(c)
            };
            if let Some((k, len)) = hit {
                return Some((Some(k), self.ws(i + len)));
            }
        }
        self.parse(i, |p| {
            let key = key_of(p.string()?);
            p.colon()?;
            Some(key)
        })
    }

    /// The value of `op`: one of the names `compile_op` compiles (`None` for
    /// any other value: an op `build` would not make either).
    #[inline(always)]
    fn op_name(self, i: usize) -> Option<(Name, usize)> {
        if let Some(c) = self.chunk(i) {
            if let Some((name, len)) = NAMES.find(c) {
                return Some((name, i + len));
            }
            if word(c, 0) & 0xFFFF_FFFF_FFFF == word_of(b"\"free\"") {
                return Some((Name::Free, i + 6));
            }
        }
        self.parse(i, |p| name_of(p.string()?))
    }

    /// A string value read as an id: an id of up to 7 bytes is found in the one
    /// word loaded after the opening quote, which is its packed word too.
    #[inline(always)]
    fn id(self, i: usize) -> Option<(IdText<'a>, usize)> {
        if let (Some(b'"'), Some(w)) = (self.b.get(i), word_at(self.b, i + 1)) {
            let m = stops(w);
            if m != 0 {
                let n = (m.trailing_zeros() / 8) as usize;
                if self.b[i + 1 + n] != b'"' {
                    return None;
                }
                let bytes = w & ((1u64 << (8 * n)) - 1);
                return Some((IdText::Short(bytes | (n as u64) << 56, i + 1), i + 2 + n));
            }
        }
        let (name, at) = self.parse(i, Parser::string)?;
        Some((IdText::Long(name), at))
    }

    /// A JSON integer >= 0 that fits a u64 (no sign, fraction or exponent; at
    /// most 19 digits, which always fit): fewer than 8 digits from one word,
    /// longer ones (and those in the text's last 8 bytes) byte by byte.
    #[inline(always)]
    fn uint(self, i: usize) -> Option<(u64, usize)> {
        let b = self.b;
        match word_at(b, i).and_then(leading_digits) {
            Some((n, len)) => {
                let len = len as usize;
                // After the digits: no fraction or exponent; no leading zero.
                if len == 0 || (len > 1 && b[i] == b'0') || matches!(b[i + len], b'.' | b'e' | b'E') {
                    return None;
                }
                Some((n, i + len))
            }
            None => self.parse(i, Parser::uint_bytes),
        }
    }

    /// `null` (`None`) or what `f` reads at `i`.
    #[inline(always)]
    fn nullable<T>(self, i: usize, f: impl FnOnce(Self, usize) -> Option<(T, usize)>) -> Option<(Option<T>, usize)> {
        if self.b.get(i) == Some(&b'n') {
            return self.parse(i, |p| p.literal(b"null")).map(|((), at)| (None, at));
        }
        f(self, i).map(|(v, at)| (Some(v), at))
    }

    /// A list of integers appended to `tokens`. Runs of the common item (see
    /// `list_item`) are read by `items`; any other item is read as `uint`, and
    /// `more` reads what follows it.
    #[inline(always)]
    fn tokens(self, i: usize, tokens: &mut Vec<u64>) -> Option<(Span, usize)> {
        let (b, start) = (self.b, tokens.len());
        if b.get(i) != Some(&b'[') {
            return None;
        }
        let mut i = self.ws(i + 1);
        if b.get(i) == Some(&b']') {
            i += 1;
        } else {
            loop {
                let (at, closed) = items(b, i, tokens);
                i = at;
                if closed {
                    break;
                }
                // An uncommon item, or whitespace after a comma.
                let (n, at) = self.uint(self.ws(i))?;
                tokens.push(n);
                let (more, at) = self.more(at, b']')?;
                i = at;
                if !more {
                    break;
                }
            }
        }
        let span = Span {
            start: offset(start),
            len: offset(tokens.len() - start),
        };
        Some((span, i))
    }

    /// One field's value at `i`, into `f` (its key not seen before in this op).
    #[inline(always)]
    fn field(self, i: usize, key: Key, f: &mut Fields<'a>, tokens: &mut Vec<u64>) -> Option<usize> {
        let flag = |i| self.parse(i, |p| p.nullable(Parser::flag));
        let at = match key {
            Key::Op => self.op_name(i).map(|(v, at)| (f.name = Some(v), at)),
            Key::Id => self.id(i).map(|(v, at)| (f.id = Some(v), at)),
            Key::CacheSalt => self
                .parse(i, |p| p.nullable(Parser::string))
                .map(|(v, at)| (f.salt = v, at)),
            Key::NumNewTokens => self.nullable(i, Self::uint).map(|(v, at)| (f.ints[0] = v, at)),
            Key::NumLookaheadTokens => self.nullable(i, Self::uint).map(|(v, at)| (f.ints[1] = v, at)),
            Key::NumTokens => self.nullable(i, Self::uint).map(|(v, at)| (f.ints[2] = v, at)),
            Key::DelayCacheBlocks => flag(i).map(|(v, at)| (f.flags[0] = v, at)),
            Key::FullSequenceMustFit => flag(i).map(|(v, at)| (f.flags[1] = v, at)),
            Key::UseComputed => flag(i).map(|(v, at)| (f.flags[2] = v, at)),
            Key::Prompt => self
                .nullable(i, |t, i| t.tokens(i, tokens))
                .map(|(v, at)| (f.prompt = v, at)),
            Key::OutputTokens => self
                .nullable(i, |t, i| t.tokens(i, tokens))
                .map(|(v, at)| (f.output_tokens = v, at)),
        };
        Some(at?.1)
    }

    /// One op object at `i`, compiled as `compile_op` compiles it (`None` for
    /// any op that `compile_op` would not compile into a checked op), and the
    /// position after it.
    #[inline(always)]
    fn op(self, i: usize, data: &mut OpData, seen: &mut IdCache) -> Option<(Op, usize)> {
        let mut f = Fields::default();
        if self.b.get(i) != Some(&b'{') {
            return None;
        }
        let mut i = self.ws(i + 1);
        if self.b.get(i) == Some(&b'}') {
            return None;
        }
        loop {
            let (key, at) = self.key(i)?;
            i = match key {
                Some(k) => {
                    let bit = 1u32 << k as u32;
                    if f.seen & bit != 0 {
                        return None;
                    }
                    f.seen |= bit;
                    self.field(at, k, &mut f, &mut data.tokens)?
                }
                None => self.parse(at, |p| p.skip_value(0))?.1,
            };
            let (more, at) = self.more(i, b'}')?;
            i = at;
            if !more {
                break;
            }
        }
        Some((build(&f, data, seen, self.s)?, i))
    }
}

/// The word of the first 8 bytes of `c` from byte `8 * k` (little-endian).
#[inline(always)]
fn word(c: &[u8; 32], k: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&c[8 * k..8 * k + 8]);
    u64::from_le_bytes(w)
}

/// The word of up to 8 bytes of text, zero above them.
const fn word_of(b: &[u8]) -> u64 {
    let mut w = 0;
    let mut k = 0;
    while k < b.len() {
        w |= (b[k] as u64) << (8 * k);
        k += 1;
    }
    w
}

/// One text of a `Words` table: its first word, the words after it (zero
/// beyond its end) and their masks, its length, and what it stands for.
#[derive(Clone, Copy)]
struct Entry<T> {
    head: u64,
    rest: [u64; 3],
    mask: [u64; 3],
    len: usize,
    what: Option<T>,
}

/// Texts of 8 to 32 bytes told apart by their first word alone, hashed into
/// 16 slots (built at compile time; a collision fails the build): matching
/// one is a multiply, a load and four masked word compares.
struct Words<T>([Entry<T>; 16]);

/// The multiplier that spreads both tables' first words over distinct slots.
const SPREAD: u64 = 0x40e2_a20a_1bd7_ce73;

#[inline(always)]
const fn slot(head: u64) -> usize {
    (head.wrapping_mul(SPREAD) >> 60) as usize
}

impl<T: Copy> Words<T> {
    const fn new(texts: &[(&[u8], T)]) -> Self {
        let empty = Entry {
            head: 0,
            rest: [0; 3],
            mask: [0; 3],
            len: 0,
            what: None,
        };
        let mut table = [empty; 16];
        let mut t = 0;
        while t < texts.len() {
            let (text, what) = texts[t];
            assert!(text.len() >= 8 && text.len() <= 32);
            let mut e = empty;
            let mut k = 0;
            while k < text.len() {
                let (w, shift) = (k / 8, 8 * (k % 8));
                if w == 0 {
                    e.head |= (text[k] as u64) << shift;
                } else {
                    e.rest[w - 1] |= (text[k] as u64) << shift;
                    e.mask[w - 1] |= 0xFF << shift;
                }
                k += 1;
            }
            e.len = text.len();
            e.what = Some(what);
            let s = slot(e.head);
            assert!(table[s].what.is_none(), "two texts share a slot");
            table[s] = e;
            t += 1;
        }
        Words(table)
    }

    /// What the text leading `c` stands for, and its length, if it is one of the table's.
    #[inline(always)]
    fn find(&self, c: &[u8; 32]) -> Option<(T, usize)> {
        let head = word(c, 0);
        let e = &self.0[slot(head)];
        let diff = (word(c, 1) ^ e.rest[0]) & e.mask[0]
            | (word(c, 2) ^ e.rest[1]) & e.mask[1]
            | (word(c, 3) ^ e.rest[2]) & e.mask[2];
        if head == e.head && diff == 0 {
            Some((e.what?, e.len))
        } else {
            None
        }
    }
}

/// The defined keys of more than 2 bytes, quoted, with their colon.
static KEYS: Words<Key> = Words::new(&[
    (b"\"prompt\":", Key::Prompt),
    (b"\"cache_salt\":", Key::CacheSalt),
    (b"\"num_new_tokens\":", Key::NumNewTokens),
    (b"\"num_lookahead_tokens\":", Key::NumLookaheadTokens),
    (b"\"delay_cache_blocks\":", Key::DelayCacheBlocks),
    (b"\"full_sequence_must_fit\":", Key::FullSequenceMustFit),
    (b"\"use_computed\":", Key::UseComputed),
    (b"\"num_tokens\":", Key::NumTokens),
    (b"\"output_tokens\":", Key::OutputTokens),
]);

/// The op names but `free` (too short for a table), quoted.
static NAMES: Words<Name> = Words::new(&[
    (b"\"allocate_slots\"", Name::AllocateSlots),
    (b"\"commit\"", Name::Commit),
    (b"\"new_step\"", Name::NewStep),
    (b"\"add_request\"", Name::AddRequest),
    (b"\"get_computed_blocks\"", Name::GetComputedBlocks),
    (b"\"cache_blocks\"", Name::CacheBlocks),
    (b"\"preempt\"", Name::Preempt),
    (b"\"reset_prefix_cache\"", Name::ResetPrefixCache),
]);

/// The op `name` stands for, if `compile_op` compiles it.
fn name_of(name: &str) -> Option<Name> {
    Some(match name {
        "allocate_slots" => Name::AllocateSlots,
        "commit" => Name::Commit,
        "new_step" => Name::NewStep,
        "add_request" => Name::AddRequest,
        "get_computed_blocks" => Name::GetComputedBlocks,
        "cache_blocks" => Name::CacheBlocks,
        "preempt" => Name::Preempt,
        "free" => Name::Free,
        "reset_prefix_cache" => Name::ResetPrefixCache,
        _ => return None,
    })
}

/// The index of the id `id` names (`None` for an empty one, which `compile_op` refuses).
#[inline(always)]
fn intern(id: IdText, data: &mut OpData, seen: &mut IdCache, text: &str) -> Option<u32> {
    match id {
        IdText::Short(word, at) => {
            // Only interned ids are cached, never an empty one: a hit is the answer.
            let slot = *seen.slot(word);
            if slot.0 == word {
                return Some(slot.1);
            }
            intern_short(word, at, data, seen, text)
        }
        IdText::Long(name) => intern_long(name, data),
    }
}

/// `intern` of a short id not in the cache, which is then cached.
#[inline(never)]
fn intern_short(word: u64, at: usize, data: &mut OpData, seen: &mut IdCache, text: &str) -> Option<u32> {
    let len = (word >> 56) as usize;
    if len == 0 {
        return None;
    }
    // Quotes are ASCII, so the name between them is whole characters.
    let k = data.ids.intern_short(word, || &text[at..at + len]);
    *seen.slot(word) = (word, k);
    Some(k)
}

#[inline(never)]
fn intern_long(name: &str, data: &mut OpData) -> Option<u32> {
    (!name.is_empty()).then(|| data.ids.intern(name))
}

/// The compiled op of `f`, as `compile_op` makes it; `None` where that would
/// hold a failed check, or where token lists were read that it would not store.
#[inline(always)]
fn build(f: &Fields, data: &mut OpData, seen: &mut IdCache, text: &str) -> Option<Op> {
    let mut id = |data: &mut OpData| intern(f.id?, data, seen, text);
    let (prompt, outputs) = (f.prompt, f.output_tokens);
    let op = match f.name? {
        Name::AddRequest if outputs.is_none() => {
            let id = id(data)?;
            let prompt = prompt?;
            let salt = f.salt.map(|s| data.string(s.to_string()));
            Op::AddRequest {
                id: Ok(id),
                prompt: Ok(prompt),
                salt: Ok(salt),
            }
        }
        _ if prompt.is_some() => return None,
        Name::Commit => {
            let id = id(data)?;
            let output_tokens = outputs.unwrap_or(Span {
                start: offset(data.tokens.len()),
                len: 0,
            });
            Op::Commit(Ok(Commit {
                id,
                num_tokens: f.ints[2]?,
                output_tokens,
            }))
        }
        _ if outputs.is_some() => return None,
        Name::NewStep => Op::NewStep,
        Name::AllocateSlots => {
            let id = id(data)?;
            let num_new_tokens = f.ints[0].filter(|&n| n >= 1)?;
            Op::AllocateSlots(Ok(Alloc {
                id,
                num_new_tokens,
                num_lookahead_tokens: f.ints[1].unwrap_or(0),
                delay_cache_blocks: f.flags[0].unwrap_or(false),
                full_sequence_must_fit: f.flags[1].unwrap_or(false),
                use_computed: f.flags[2].unwrap_or(true),
            }))
        }
        Name::GetComputedBlocks => Op::GetComputedBlocks(Ok(id(data)?)),
        Name::CacheBlocks => {
            let id = id(data)?;
            Op::CacheBlocks(Ok((id, f.ints[2]?)))
        }
        Name::Preempt => Op::Preempt(Ok(id(data)?)),
        Name::Free => Op::Free(Ok(id(data)?)),
        Name::ResetPrefixCache => Op::ResetPrefixCache,
        Name::AddRequest => return None,
    };
    Some(op)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{compile_text, direct, intern, IdCache, IdText, Parser, Text};
    use crate::kvtrace::compiled::{compile, CompiledTrace};
    use crate::kvtrace::gen::generate;
    use crate::kvtrace::TraceError;

    /// Everything a compiled trace holds, rendered (ids by name and literal, in order).
    pub(super) fn dump(t: &CompiledTrace) -> String {
        let ids: Vec<(&str, &str)> = (0..t.data.ids.count() as u32)
            .map(|k| (t.data.ids.name(k), t.data.ids.literal(k)))
            .collect();
        format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{ids:?}",
            t.config, t.ops, t.data.tokens, t.data.strings
        )
    }

    /// The old way: serde_json's tree, then `compile`.
    fn reference(text: &str) -> Result<CompiledTrace, TraceError> {
        let v: Value = serde_json::from_str(text).map_err(|e| TraceError::Json(e.to_string()))?;
        compile(&v)
    }

    pub(super) fn agree(text: &str) {
        match (compile_text(text), reference(text)) {
            (Ok(a), Ok(b)) => assert_eq!(dump(&a), dump(&b), "{text}"),
            (Err(a), Err(b)) => assert_eq!(a, b, "{text}"),
            (a, b) => panic!("{text}: {:?} vs {:?}", a.map(|t| dump(&t)), b.map(|t| dump(&t))),
        }
    }

    /// One op per line, as vLLM's generator writes traces.
    fn lines(v: &Value) -> String {
        let ops: Vec<String> = v["ops"].as_array().unwrap().iter().map(Value::to_string).collect();
        format!(
            "{{\"format\":\"kvtrace/1\",\n\"meta\":{},\n\"config\":{},\n\"ops\":[\n{}\n]}}\n",
            v.get("meta").unwrap_or(&Value::Null),
            v["config"],
            ops.join(",\n")
        )
    }

    /// Ops at the edges of the direct pass's word-at-a-time reading: keys and
    /// op names that share a prefix with a defined one, ids around 7 bytes,
    /// integers around 8 and 19 digits, whitespace wherever JSON allows it.
    fn edge_ops() -> Vec<String> {
        let mut ops: Vec<String> = [
            r#"{"o":"free","id":"r1"}"#,
            r#"{"opx":"free","op":"free","id":"r1"}"#,
            r#"{"op_":1,"op":"free","id":"r1"}"#,
            r#"{"op":"free","i":"r1"}"#,
            r#"{"op":"free","idx":"r2","id":"r1"}"#,
            r#"{"op":"free","i\u0064":"r1"}"#,
            r#"{"\u006fp":"free","id":"r1"}"#,
            r#"{"op":"free","id":"r1","num_":1,"num_tokensx":2,"num_new_token":3,"num_lookahead":4}"#,
            r#"{"op":"free","id":"r1","prompt2":[1],"output_tokens_":[2],"cache_salt_":"x","use_computed_":1}"#,
            r#"{"op":"free","id":"r1","delay_cache_block":1,"full_sequence_must_fi":2,"u":3,"d":4,"f":5,"c":6,"p":7,"n":8}"#,
            r#"{"op":"free","id":"r1","":0}"#,
            r#"{"op":"add_requestx","id":"r1","prompt":[1]}"#,
            r#"{"op":"add_reques","id":"r1","prompt":[1]}"#,
            r#"{"op":"allocate","id":"r1","num_new_tokens":1}"#,
            r#"{"op":"commitx","id":"r1","num_tokens":1}"#,
            r#"{"op":"c","id":"r1","num_tokens":1}"#,
            r#"{"op":"cache_block","id":"r1","num_tokens":1}"#,
            r#"{"op":"","id":"r1"}"#,
            r#"{"op":"Free","id":"r1"}"#,
            r#"{"op":"fre","id":"r1"}"#,
            r#"{"op":"free ","id":"r1"}"#,
            r#"{"op":"new_stepp"}"#,
            r#"{"op":"reset_prefix_cach"}"#,
            r#"{"op":"get_computed_block","id":"r1"}"#,
            r#"{"op":"preemp","id":"r1"}"#,
            r#"{"op":null,"id":"r1"}"#,
            r#"{"op":"free","id":null}"#,
            r#"{"op":"free","id":7}"#,
            r#"{"op":"new_step","id":""}"#,
            r#"{"op":"free","id":"seven77"}"#,
            r#"{"op":"free","id":"eight888"}"#,
            r#"{"op":"free","id":"a-much-longer-request-id-0000"}"#,
            r#"{"op":"free","id":"r\u0031"}"#,
            r#"{"op":"free","id":"r1\\"}"#,
            r#"{"op":"free","id":"r\\1"}"#,
            r#"{"op":"free","id":"ééé"}"#,
            r#"{"op":"free","id":"éééé"}"#,
            r#"{"op":"free","id":"r1\u0000"}"#,
            "{\"op\":\"free\",\"id\":\"r1\u{7f}\"}",
            "{\"op\":\"free\",\"id\":\"r\n1\"}",
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":1234567}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":12345678}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":123456789012}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":0123}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":1.5}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":15e1}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":15E1}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":-1}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":+1}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":1,"num_lookahead_tokens":2,"num_lookahead_tokens":2}"#,
            r#"{"op":"add_request","id":"r1","prompt":[0,9,10,99,100,999999,1000000,9999999,10000000,99999999]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1234567890123456789,9223372036854775807,9223372036854775808]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[18446744073709551615,1]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[99999999999999999999]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,00]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[,1]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1 2]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1;2]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,"2"]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2.5]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2e0]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,[2]]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,null]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,true]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1],"prompt":[1]}"#,
            r#"{"op":"commit","id":"r1","num_tokens":1,"output_tokens":[]}"#,
            r#"{"op":"commit","id":"r1","num_tokens":1,"output_tokens":[ ]}"#,
            r#"{"op":"cache_blocks","id":"r1","num_tokens":null}"#,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Whitespace (every kind JSON allows) wherever it may go.
        for ws in [" ", "\n", "\t", "\r", " \n\t\r "] {
            let op = r#"{!"op"!:!"add_request"!,!"id"!:!"r1"!,!"prompt"!:![!1!,!22!,!333!]!,!"cache_salt"!:!null!}"#;
            ops.push(op.replace('!', ws));
            let op = r#"{!"op"!:!"commit"!,!"id"!:!"r1"!,!"num_tokens"!:!7!,!"output_tokens"!:![!]!}"#;
            ops.push(op.replace('!', ws));
        }
        ops
    }

    #[test]
    fn edge_ops_compile_alike_and_mostly_directly() {
        let head = r#"{"format":"kvtrace/1","config":{"block_size":4,"num_blocks":8,"max_model_len":64,"enable_caching":true,"groups":[{"kind":"full_attention"}]},"ops":["#;
        let mut direct_ones = 0;
        for op in edge_ops() {
            for text in [
                format!("{head}{op}]}}"),
                format!("{head}{op},{op}]}}"),
                format!("{head}{op}]}} x"),
            ] {
                agree(&text);
                direct_ones += usize::from(direct(&text).is_some());
            }
        }
        // Whitespace variants, long ids, digits around the word size and unknown
        // keys that share a prefix take the direct pass.
        assert!(direct_ones >= 60, "{direct_ones}");
    }

    /// Reading an integer from one word agrees with reading it byte by byte, at
    /// every length, before every kind of byte, and near the text's end.
    #[test]
    fn integers_read_from_a_word_as_byte_by_byte() {
        let numbers = [
            "",
            "0",
            "00",
            "01",
            "7",
            "10",
            "99",
            "123",
            "4567",
            "89012",
            "345678",
            "9012345",
            "12345678",
            "99999999",
            "100000000",
            "1234567890123456789",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
        ];
        let afters = [
            "", ",", "]", "}", " ", ".", "e", "E", "-", "+", "a", "/", ":", "\"", "\u{e9}", "00000000",
        ];
        for n in numbers {
            for after in afters {
                for pad in ["", "       ", "ZZZZZZZZZZZZ"] {
                    let text = format!("{n}{after}{pad}");
                    let a = Text {
                        s: &text,
                        b: text.as_bytes(),
                    };
                    let mut b = Parser {
                        s: &text,
                        b: text.as_bytes(),
                        i: 0,
                    };
                    let by_bytes = b.uint_bytes().map(|n| (n, b.i));
                    assert_eq!(a.uint(0), by_bytes, "{text:?}");
                }
            }
        }
        for w in 0..=u16::MAX {
            let text = format!("{w}x{w}12345678");
            let t = Text {
                s: &text,
                b: text.as_bytes(),
            };
            assert_eq!(t.uint(0), Some((u64::from(w), w.to_string().len())));
        }
    }

    /// The id cache answers what `Ids` answers, through collisions and refills.
    #[test]
    fn the_id_cache_agrees_with_the_ids() {
        let mut data = crate::kvtrace::compile::OpData::default();
        let mut seen = IdCache::new();
        for round in 0..3u64 {
            for i in 0..500u64 {
                let name = format!("r{}", (i * 37 + round * 11) % 400);
                let mut word = (name.len() as u64) << 56;
                for (k, &c) in name.as_bytes().iter().enumerate() {
                    word |= u64::from(c) << (8 * k);
                }
                let k = intern(IdText::Short(word, 0), &mut data, &mut seen, &name);
                assert_eq!(data.ids.get(&name), k, "{name}");
            }
        }
        assert_eq!(intern(IdText::Short(0, 0), &mut data, &mut seen, ""), None);
    }

    #[test]
    fn generated_traces_compile_directly_to_what_the_tree_compiles_to() {
        for i in 0..150 {
            let v = generate(13, i);
            for text in [v.to_string(), serde_json::to_string_pretty(&v).unwrap(), lines(&v)] {
                let t = direct(&text).unwrap_or_else(|| panic!("trace {i} takes the direct pass"));
                assert_eq!(dump(&t), dump(&compile(&v).unwrap()), "trace {i}");
            }
        }
    }

    #[test]
    fn the_repository_traces_compile_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
        let mut n = 0;
        for dir in ["kvtrace_examples", "kvtrace_reference"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "json") {
                    agree(&std::fs::read_to_string(&p).unwrap());
                    n += 1;
                }
            }
        }
        assert!(n > 50, "{n} traces");
    }

    /// Configs around the direct reading of `config`: every field of every
    /// kind, at and past its limits, of the wrong type, missing, repeated,
    /// escaped or spaced; each compiles as serde_json and `parse_config` read it.
    #[test]
    fn configs_read_directly_agree_with_parse_config() {
        let ops = r#""ops":[{"op":"new_step"},{"op":"free","id":"r1"}]"#;
        let base = r#""block_size":4,"enable_caching":true,"max_model_len":64,"num_blocks":8"#;
        let groups = [
            r#"{"kind":"full_attention"}"#,
            r#"{"kind":"mla","block_size":8}"#,
            r#"{"kind":"sliding_window","sliding_window":8}"#,
            r#"{"kind":"sliding_window","sliding_window":2}"#,
            r#"{"kind":"sliding_window","sliding_window":1}"#,
            r#"{"kind":"sliding_window"}"#,
            r#"{"kind":"sliding_window","sliding_window":null}"#,
            r#"{"kind":"chunked_local","attention_chunk_size":8}"#,
            r#"{"kind":"chunked_local","attention_chunk_size":6}"#,
            r#"{"kind":"chunked_local","attention_chunk_size":0}"#,
            r#"{"kind":"mamba","mamba_cache_mode":"align"}"#,
            r#"{"kind":"mamba","mamba_cache_mode":"none"}"#,
            r#"{"kind":"mamba","mamba_cache_mode":"other"}"#,
            r#"{"kind":"mamba","mamba_cache_mode":null}"#,
            r#"{"kind":"mamba"}"#,
            r#"{"kind":"full_attention","block_size":0}"#,
            r#"{"kind":"full_attention","block_size":null}"#,
            r#"{"kind":"full_attention","block_size":2.0}"#,
            r#"{"kind":"full_attention","block_size":1099511627777}"#,
            r#"{"kind":"full_attention","sliding_window":"x","extra":[1,{"a":null}]}"#,
            r#"{"kind":"full_attention","kind":"mla"}"#,
            r#"{"kind":"Full_attention"}"#,
            r#"{"kind":"full_attention\u0000"}"#,
            r#"{"ki\u006ed":"full_attention"}"#,
            r#"{"kind":null}"#,
            r#"{"kind":3}"#,
            r#"{}"#,
            r#"[]"#,
            r#"null"#,
            r#" { "kind" : "full_attention" , "block_size" : 4 } "#,
        ];
        let mut texts = Vec::new();
        for g in groups {
            texts.push(format!("{base},\"groups\":[{g}]"));
            texts.push(format!("{base},\"groups\":[{g},{{\"kind\":\"full_attention\"}}]"));
            texts.push(format!("\"groups\":[{g}],{base}"));
        }
        let fields = [
            r#""num_blocks":2"#,
            r#""num_blocks":1"#,
            r#""num_blocks":0"#,
            r#""num_blocks":4294967295"#,
            r#""num_blocks":4294967296"#,
            r#""num_blocks":-3"#,
            r#""num_blocks":8.0"#,
            r#""num_blocks":8e0"#,
            r#""num_blocks":"8""#,
            r#""num_blocks":null"#,
            r#""num_blocks":true"#,
            r#""num_blocks":18446744073709551615"#,
            r#""num_blocks":8,"num_blocks":9"#,
            r#""num\u005fblocks":8"#,
            r#""enable_caching":false"#,
            r#""enable_caching":null"#,
            r#""enable_caching":1"#,
            r#""enable_caching":"true""#,
            r#""max_model_len":1"#,
            r#""max_model_len":2"#,
            r#""max_model_len":1099511627776"#,
            r#""max_model_len":1099511627777"#,
            r#""block_size":0"#,
            r#""block_size":1"#,
            r#""max_in_flight_tokens":0"#,
            r#""max_in_flight_tokens":1"#,
            r#""max_in_flight_tokens":null"#,
            r#""max_in_flight_tokens":1099511627777"#,
            r#""groups":[]"#,
            r#""groups":{}"#,
            r#""groups":null"#,
            r#""meta":{"x":[1,2,{"y":"z"}]}"#,
        ];
        let full = r#"{"kind":"full_attention"}"#;
        for f in fields {
            // The field first (so a duplicate of a base field is the later one) and last.
            texts.push(format!("{f},{base},\"groups\":[{full}]"));
            texts.push(format!("\"groups\":[{full}],{base},{f}"));
            texts.push(f.to_string());
        }
        texts.push(format!(
            " {} ",
            base.replace(',', " , ").replace(':', " : ") + r#" , "groups" : [ { "kind" : "mla" } ] "#
        ));
        texts.push(format!(
            "{base},\"enable_caching\":false,\"groups\":[{{\"kind\":\"mamba\",\"mamba_cache_mode\":\"none\"}}]"
        ));
        for config in texts {
            for text in [
                format!("{{\"format\":\"kvtrace/1\",\"config\":{{{config}}},{ops}}}"),
                format!("{{{ops},\"config\":{{{config}}},\"format\":\"kvtrace/1\"}}"),
            ] {
                agree(&text);
            }
        }
        // Generated configs are read directly, into what `parse_config` makes of them.
        let mut read = 0;
        for i in 0..300 {
            let v = generate(17, i);
            let text = v["config"].to_string();
            let mut p = Parser {
                s: &text,
                b: text.as_bytes(),
                i: 0,
            };
            let direct = p.config().map(|c| format!("{c:?}"));
            match crate::kvtrace::config::parse_config(&v["config"]) {
                Ok(c) => assert_eq!(direct, Some(format!("{c:?}")), "{text}"),
                Err(_) => assert_eq!(direct, None, "{text}"),
            }
            read += usize::from(direct.is_some());
        }
        assert!(read > 250, "{read}");
        for config in ["{}", "[]", "null", "7", "{ }", r#"{"":1}"#] {
            agree(&format!("{{\"format\":\"kvtrace/1\",\"config\":{config},{ops}}}"));
        }
    }

    #[test]
    fn anything_unusual_falls_back_to_the_tree_and_agrees() {
        let head = r#"{"format":"kvtrace/1","config":{"block_size":4,"num_blocks":8,"max_model_len":64,"enable_caching":true,"groups":[{"kind":"full_attention"}]},"ops":["#;
        let ops = [
            r#"{"op":"add_request","id":"r1","prompt":[1,2,3,4,5]}"#,
            r#"{"op":"add_request","id":"r\u0031","prompt":[1,2,3,4,5]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2,3,4,5],"cache_salt":"s"}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2,3,4,5],"cache_salt":null}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2,3,4,5],"cache_salt":""}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2,3,4,5],"cache_salt":7}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,2.0,3]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,-2,3]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1,1e2,3]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[01]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[18446744073709551615]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[18446744073709551616]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[]}"#,
            r#"{"op":"add_request","id":"r1","prompt":null}"#,
            r#"{"op":"add_request","id":"r1"}"#,
            r#"{"op":"add_request","id":"","prompt":[1]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[1],"output_tokens":[2]}"#,
            r#"{"op":"add_request","id":"r1","id":"r2","prompt":[1]}"#,
            r#"{"op":"add_request","id":"a-long-request-name","prompt":[1], "extra": {"x": [1, -2.5e3, true, null, "y"]}}"#,
            r#"{"op":"new_step","prompt":[1]}"#,
            r#"{"op":"new_step","id":5}"#,
            r#"{"op":"new_step","id":"r9"}"#,
            r#" { "op" : "new_step" } "#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":0}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":null}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":true}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":3,"num_lookahead_tokens":null,"use_computed":false,"delay_cache_blocks":true,"full_sequence_must_fit":null}"#,
            r#"{"op":"allocate_slots","id":"r1","num_new_tokens":3,"use_computed":1}"#,
            r#"{"op":"commit","id":"r1","num_tokens":3}"#,
            r#"{"op":"commit","id":"r1","num_tokens":3,"output_tokens":null}"#,
            r#"{"op":"commit","id":"r1","num_tokens":3,"output_tokens":[9,8]}"#,
            r#"{"op":"commit","id":"r1","num_tokens":3,"prompt":[9,8]}"#,
            r#"{"op":"commit","id":"r1"}"#,
            r#"{"op":"cache_blocks","id":"r1","num_tokens":4}"#,
            r#"{"op":"get_computed_blocks","id":"r1"}"#,
            r#"{"op":"preempt","id":"r1"}"#,
            r#"{"op":"free","id":"r1"}"#,
            r#"{"op":"reset_prefix_cache"}"#,
            r#"{"op":"bogus"}"#,
            r#"{"op":7}"#,
            r#"{}"#,
            r#"[]"#,
            r#"{"op":"free","id":"r1",}"#,
            r#"{"op":"free" "id":"r1"}"#,
            "{\"op\":\"free\",\"id\":\"r\t1\"}",
            r#"{"op":"free","id":"é"}"#,
            r#"{"op":"free","id":"a-long-name\"with-a-quote"}"#,
            "{\"op\":\"free\",\"id\":\"a-long-name\twith-a-tab\"}",
            r#"{"op":"free","id":"a-long-name-ending-in-é-and-more"}"#,
            r#"{"op":"add_request","id":"r1","prompt":[9999999999999999999,1]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[10000000000000000000]}"#,
            r#"{"op":"add_request","id":"r1","prompt":[ 1 , 2 ,3 ]}"#,
        ];
        for op in ops {
            agree(&format!("{head}{op}]}}"));
            agree(&format!("{head}{op},{op}]}}"));
            agree(&format!("{head}{op}]}} x"));
            agree(&format!("{head}{op}]"));
        }
        let all = ops.join(",");
        agree(&format!("{head}{all}]}}"));
        for text in [
            r#"{"format":"kvtrace/1","config":{"block_size":0},"ops":[{"op":"free","id":"r1"}]}"#,
            r#"{"ops":[{"op":"free","id":"r1"}],"config":{"block_size":4,"num_blocks":8,"max_model_len":64,"enable_caching":true,"groups":[{"kind":"full_attention"}]},"format":"kvtrace/1"}"#,
            r#"{"format":"kvtrace/2","config":{},"ops":[]}"#,
            r#"{"format":"kvtrace/1","config":{},"ops":[],"ops":[]}"#,
            r#"{"format":"kvtrace/1","ops":[]}"#,
            r#"{"format":"kvtrace/1","config":{}}"#,
            r#"{"format":"kvtrace/1","config":{},"ops":{}}"#,
            r#"{"format":"kvtrace/1","config":{},"ops":[],"meta":[[[[[[[[]]]]]]]]}"#,
            r#"[]"#,
            r#""#,
            "\u{feff}{}",
        ] {
            agree(text);
        }
        // The ops list's separators around the one-newline fast path.
        let free = r#"{"op":"free","id":"r1"}"#;
        for sep in [",\n", ",\n ", ",\n\n", ",\n\t", ", \n", ",\r\n", ",\n,", ",\n]"] {
            agree(&format!("{head}{free}{sep}{free}]}}"));
            agree(&format!("{head}{free}{sep}]}}"));
            agree(&format!("{head}{free}{sep}"));
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        agree(&format!("{head}{}]}}", edge_ops().join(",")));
        agree(&format!(
            r#"{{"format":"kvtrace/1","meta":{deep},"config":{{}},"ops":[]}}"#
        ));
    }
}
