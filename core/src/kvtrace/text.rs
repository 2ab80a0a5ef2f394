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

use serde_json::Value;

use super::compile::{offset, Alloc, Commit, Op, OpData, Span};
use super::compiled::{compile, compile_parts, CompiledTrace};
use super::ops::{key_of, Key};
use super::TraceError;

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
            p.ws();
            p.eat(b':')?;
            p.ws();
            match key {
                "ops" if compiled.is_none() => compiled = Some(p.ops()?),
                "format" if format.is_none() => format = Some(p.string()?),
                "config" if config.is_none() => config = Some(p.skip_value(0)?),
                "ops" | "format" | "config" => return None,
                _ => {
                    p.skip_value(0)?;
                }
            }
            p.ws();
            if p.eat(b',').is_none() {
                break;
            }
            p.ws();
        }
    }
    p.eat(b'}')?;
    p.ws();
    if p.i != p.b.len() || format? != "kvtrace/1" {
        return None;
    }
    let config: Value = serde_json::from_str(config?).ok()?;
    let (ops, data) = compiled?;
    Some(compile_parts(&config, || (ops, data)))
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

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

/// The op fields seen so far in one op object.
#[derive(Default)]
struct Fields<'a> {
    seen: u32,
    name: Option<&'a str>,
    id: Option<&'a str>,
    salt: Option<&'a str>,
    /// `num_new_tokens`, `num_lookahead_tokens`, `num_tokens` (`None`: absent or null).
    ints: [Option<u64>; 3],
    /// `delay_cache_blocks`, `full_sequence_must_fit`, `use_computed`.
    flags: [Option<bool>; 3],
    prompt: Option<Span>,
    output_tokens: Option<Span>,
}

impl<'a> Parser<'a> {
    #[inline(always)]
    fn ws(&mut self) {
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

    /// A string without escapes or control characters (its contents).
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (b, start) = (self.b, self.i);
        let mut i = start;
        // Eight bytes at a time: the first quote, backslash or control character.
        while let Some(w) = b.get(i..i + 8) {
            let m = stops(u64::from_le_bytes(w.try_into().expect("8 bytes")));
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

    /// A JSON integer >= 0 that fits a u64 (no sign, fraction or exponent; at
    /// most 19 digits, which always fit).
    #[inline(always)]
    fn uint(&mut self) -> Option<u64> {
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
    #[inline]
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

    /// A list of integers appended to `tokens`.
    fn tokens(&mut self, tokens: &mut Vec<u64>) -> Option<Span> {
        let start = tokens.len();
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_none() {
            loop {
                tokens.push(self.uint()?);
                match *self.b.get(self.i)? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => {
                        self.ws();
                        match *self.b.get(self.i)? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                if matches!(self.b.get(self.i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
                    self.ws();
                }
            }
        }
        Some(Span {
            start: offset(start),
            len: offset(tokens.len() - start),
        })
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
                        self.ws();
                        self.eat(b':')?;
                        self.ws();
                        self.skip_value(depth + 1)?;
                        self.ws();
                        if self.eat(b',').is_none() {
                            break;
                        }
                        self.ws();
                    }
                    self.eat(b'}')?;
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_none() {
                    loop {
                        self.skip_value(depth + 1)?;
                        self.ws();
                        if self.eat(b',').is_none() {
                            break;
                        }
                        self.ws();
                    }
                    self.eat(b']')?;
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
        let mut data = OpData::default();
        let mut ops = Vec::with_capacity(self.b.len() / 64);
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_none() {
            loop {
                ops.push(self.op(&mut data)?);
                self.ws();
                match *self.b.get(self.i)? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
                self.ws();
            }
        }
        Some((ops, data))
    }

    /// One op object, compiled as `compile_op` compiles it (`None` for any op
    /// that `compile_op` would not compile into a checked op).
    fn op(&mut self, data: &mut OpData) -> Option<Op> {
        let mut f = Fields::default();
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return None;
        }
        loop {
            let key = self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            match key_of(key) {
                Some(k) => {
                    let bit = 1u32 << k as u32;
                    if f.seen & bit != 0 {
                        return None;
                    }
                    f.seen |= bit;
                    match k {
                        Key::Op => f.name = Some(self.string()?),
                        Key::Id => f.id = Some(self.string()?),
                        Key::CacheSalt => f.salt = self.nullable(Self::string)?,
                        Key::NumNewTokens => f.ints[0] = self.nullable(Self::uint)?,
                        Key::NumLookaheadTokens => f.ints[1] = self.nullable(Self::uint)?,
                        Key::NumTokens => f.ints[2] = self.nullable(Self::uint)?,
                        Key::DelayCacheBlocks => f.flags[0] = self.nullable(Self::flag)?,
                        Key::FullSequenceMustFit => f.flags[1] = self.nullable(Self::flag)?,
                        Key::UseComputed => f.flags[2] = self.nullable(Self::flag)?,
                        Key::Prompt => f.prompt = self.nullable(|p| p.tokens(&mut data.tokens))?,
                        Key::OutputTokens => f.output_tokens = self.nullable(|p| p.tokens(&mut data.tokens))?,
                    }
                }
                None => {
                    self.skip_value(0)?;
                }
            }
            self.ws();
            match *self.b.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    break;
                }
                _ => return None,
            }
            self.ws();
        }
        build(f, data)
    }
}

/// The compiled op of `f`, as `compile_op` makes it; `None` where that would
/// hold a failed check, or where token lists were read that it would not store.
#[inline]
fn build(f: Fields, data: &mut OpData) -> Option<Op> {
    let id = |data: &mut OpData| f.id.filter(|s| !s.is_empty()).map(|s| data.ids.intern(s));
    let (prompt, outputs) = (f.prompt, f.output_tokens);
    let op = match f.name? {
        "add_request" if outputs.is_none() => {
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
        "commit" => {
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
        "new_step" => Op::NewStep,
        "allocate_slots" => {
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
        "get_computed_blocks" => Op::GetComputedBlocks(Ok(id(data)?)),
        "cache_blocks" => {
            let id = id(data)?;
            Op::CacheBlocks(Ok((id, f.ints[2]?)))
        }
        "preempt" => Op::Preempt(Ok(id(data)?)),
        "free" => Op::Free(Ok(id(data)?)),
        "reset_prefix_cache" => Op::ResetPrefixCache,
        _ => return None,
    };
    Some(op)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{compile_text, direct};
    use crate::kvtrace::compiled::{compile, CompiledTrace};
    use crate::kvtrace::gen::generate;
    use crate::kvtrace::TraceError;

    /// Everything a compiled trace holds, rendered (ids by name and literal, in order).
    fn dump(t: &CompiledTrace) -> String {
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

    fn agree(text: &str) {
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
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        agree(&format!(
            r#"{{"format":"kvtrace/1","meta":{deep},"config":{{}},"ops":[]}}"#
        ));
    }
}
