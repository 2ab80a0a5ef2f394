//! Canonical JSON: the key-sorted compact bytes points are hashed and compared by (§1.7).

/// `value` as compact JSON with every object's keys sorted — the bytes Python's
/// `json.dumps(value, sort_keys=True, separators=(",", ":"))` writes for ASCII content.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_sorted(value, &mut out);
    out
}

/// Writes `value` with sorted keys straight into `out` (no sorted copy of the tree).
fn write_sorted(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_sorted(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_sorted(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn keys_sorted_at_every_depth_compact_and_escaped() {
        let v = json!({"b": [{"z": 1, "a": null}, "x\"y"], "a": {"d": true, "c": 1.5}});
        assert_eq!(
            super::canonical_json(&v),
            r#"{"a":{"c":1.5,"d":true},"b":[{"a":null,"z":1},"x\"y"]}"#
        );
    }
}
