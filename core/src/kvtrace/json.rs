//! Canonical JSON as the kvtrace observations use it: Python's
//! `json.dumps(sort_keys=True, separators=(",", ":"))` with `ensure_ascii`.

use std::fmt::Write;

/// Append `s` as a JSON string literal, escaping like Python's `ensure_ascii`.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    // The usual op names, kinds and ids need no escaping: copy them whole.
    if s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Append a non-negative integer in decimal: an itoa with a fast path for the
/// small numbers (block ids, counts) observation lines are made of.
pub fn push_u64(out: &mut String, n: u64) {
    let digit = |d: u64| char::from(b'0' + d as u8);
    if n < 10 {
        out.push(digit(n));
    } else if n < 100 {
        out.push(digit(n / 10));
        out.push(digit(n % 10));
    } else if n < 1000 {
        out.push(digit(n / 100));
        out.push(digit(n / 10 % 10));
        out.push(digit(n % 10));
    } else {
        let mut buf = [0u8; 20];
        let (mut at, mut n) = (buf.len(), n);
        while n > 0 {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        out.extend(buf[at..].iter().map(|&d| char::from(d)));
    }
}

/// Append a signed integer in decimal.
pub fn push_i64(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_u64(out, n.unsigned_abs());
}

/// Append a list of integers: `[1,2,3]`.
pub fn push_ids(out: &mut String, ids: impl IntoIterator<Item = u32>) {
    out.push('[');
    for (k, id) in ids.into_iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        push_u64(out, u64::from(id));
    }
    out.push(']');
}

/// Append a list of lists of integers: `[[1],[0,2]]`.
pub fn push_tables<'a>(out: &mut String, tables: impl IntoIterator<Item = &'a [u32]>) {
    out.push('[');
    for (k, t) in tables.into_iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        push_ids(out, t.iter().copied());
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_python_ensure_ascii() {
        let mut s = String::new();
        push_str(&mut s, "a\"b\\é\u{1F600}\u{7f}");
        assert_eq!(s, r#""a\"b\\\u00e9\ud83d\ude00\u007f""#);
    }

    #[test]
    fn lists_print_like_display() {
        let long: Vec<u32> = (0..300).map(|i| i * 37).chain([u32::MAX, 0]).collect();
        let want = |v: &[u32]| format!("[{}]", v.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
        let mut s = String::new();
        push_ids(&mut s, long.iter().copied());
        assert_eq!(s, want(&long));
        let mut s = String::new();
        push_tables(&mut s, [&long[..], &[], &[7]]);
        assert_eq!(s, format!("[{},[],[7]]", want(&long)));
    }

    #[test]
    fn integers_print_like_display() {
        for n in [0u64, 7, 10, 99, 100, 12345, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
        let mut s = String::new();
        push_i64(&mut s, -1);
        push_i64(&mut s, i64::MIN);
        assert_eq!(s, format!("-1{}", i64::MIN));
    }
}
