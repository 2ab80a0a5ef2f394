//! Canonical JSON as the kvtrace observations use it: Python's
//! `json.dumps(sort_keys=True, separators=(",", ":"))` with `ensure_ascii`.

use std::fmt::Write;

/// Append `s` as a JSON string literal, escaping like Python's `ensure_ascii`.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
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

/// Append a list of integers: `[1,2,3]`.
pub fn push_ids(out: &mut String, ids: impl IntoIterator<Item = u32>) {
    out.push('[');
    for (k, id) in ids.into_iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        let _ = write!(out, "{id}");
    }
    out.push(']');
}

/// Append a list of lists of integers: `[[1],[0,2]]`.
pub fn push_tables(out: &mut String, tables: &[Vec<u32>]) {
    out.push('[');
    for (k, t) in tables.iter().enumerate() {
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
}
