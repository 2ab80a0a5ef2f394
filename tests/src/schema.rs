//! Validating what kvsim writes against its JSON Schema (`kvsim schema NAME`). Also compiled
//! into the CLI's tests (tests/cli/common).
#![allow(dead_code)] // each suite uses a subset

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

/// The compiled validator of format `name`, built once per test process.
fn validator(name: &str) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<BTreeMap<String, &'static jsonschema::Validator>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(name.to_string()).or_insert_with(|| {
        let format = kvsim_cli::schemas::find(name).unwrap_or_else(|| panic!("no format {name:?}"));
        let v = jsonschema::draft7::new(&format.schema()).unwrap_or_else(|e| panic!("schema {name}: {e}"));
        Box::leak(Box::new(v))
    })
}

/// Every violation of `doc` against the schema of `name`, as `path: message` (empty: valid).
pub fn errors(name: &str, doc: &Value) -> Vec<String> {
    validator(name)
        .iter_errors(doc)
        .map(|e| {
            // The message quotes the whole offending value: keep its start.
            let msg: String = e.to_string().chars().take(300).collect();
            format!("{}: {msg}", e.instance_path())
        })
        .collect()
}

/// Panics, listing the violations, unless `doc` is valid against the schema of `name`.
pub fn assert_valid(name: &str, what: &str, doc: &Value) {
    let errs = errors(name, doc);
    assert!(
        errs.is_empty(),
        "{what} does not validate against `kvsim schema {name}`:\n{}",
        errs.join("\n")
    );
}

/// [`assert_valid`] for what kvsim serializes (a plan, an artifact, a report) as it would write it.
pub fn assert_valid_ser<T: serde::Serialize>(name: &str, what: &str, value: &T) {
    assert_valid(name, what, &serde_json::to_value(value).expect("serializes"));
}

/// [`assert_valid`] for a file's JSON text.
pub fn assert_valid_text(name: &str, what: &str, text: &str) {
    let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
    assert_valid(name, what, &doc);
}

/// [`assert_valid`] for a file on disk.
pub fn assert_valid_file(name: &str, path: &std::path::Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_valid_text(name, &path.display().to_string(), &text);
}

/// Paths (indices as `[*]`) of the maps keyed by names, whose keys are open by design.
const MAPS: &[&str] = &[
    "$.steps[*].ops[*].tables",
    "$.scenarios[*].not_applicable_reasons",
    "$.scenarios[*].failures",
    "$.goals",
    "$.mutants[*].other_findings",
    "$.profile.resident_ctas",
    "$.resident_ctas",
    "$.cost.resident_ctas",
    "$.provenance.mape_after_pct",
    "$.provenance.mape_before_pct",
    "$.provenance.start_provenance.mape_after_pct",
    "$.provenance.start_provenance.mape_before_pct",
];

/// A value of another JSON type than `v`'s, which no typed field of `v`'s kind accepts.
fn wrong_type(v: &Value) -> Value {
    match v {
        Value::String(_) => json!(12345),
        Value::Number(_) | Value::Bool(_) => json!("wrong type"),
        // A null stands for an absent Option<T>: nested strings fit no T kvsim writes.
        Value::Null => json!([["wrong type"]]),
        Value::Array(_) | Value::Object(_) => json!("wrong type"),
    }
}

/// The tag fields of kvsim's tagged enums.
const TAGS: &[&str] = &["op", "fault", "source", "result", "kind"];

/// Every value of `doc` with its JSON path and its path pattern (indices as `[*]`).
fn walk<'a>(v: &'a Value, path: String, pattern: String, out: &mut Vec<(String, String, &'a Value)>) {
    // A tagged object (an op, a fault, a prompt source, an outcome, a group or op kind) is its own
    // pattern per tag value, so that each variant is tried.
    let pattern = match TAGS
        .iter()
        .find_map(|t| v.get(*t).and_then(Value::as_str).map(|x| (t, x)))
    {
        Some((t, x)) => format!("{pattern}{{{t}={x}}}"),
        None => pattern,
    };
    out.push((path.clone(), pattern.clone(), v));
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                walk(x, format!("{path}.{k}"), format!("{pattern}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, format!("{path}[{i}]"), format!("{pattern}[*]"), out);
            }
        }
        _ => {}
    }
}

fn set(doc: &mut Value, path: &str, f: impl FnOnce(&mut Value)) {
    let mut cur = doc;
    // `$.a.b[2].c`: walk the keys and indices.
    for part in path.trim_start_matches('$').split('.').filter(|p| !p.is_empty()) {
        let (key, idx) = match part.find('[') {
            Some(i) => (&part[..i], Some(&part[i..])),
            None => (part, None),
        };
        if !key.is_empty() {
            cur = &mut cur[key];
        }
        for ix in idx
            .into_iter()
            .flat_map(|s| s.split(['[', ']']).filter(|x| !x.is_empty()))
        {
            cur = &mut cur[ix.parse::<usize>().unwrap()];
        }
    }
    f(cur)
}

/// For each distinct path pattern of `doc` (a valid document of `format`): an unknown field
/// added to every object, and every scalar replaced by a wrong type, is rejected.
/// Returns the number of objects and scalars tried.
pub fn closed_and_typed(format: &str, what: &str, doc: &Value) -> (usize, usize) {
    let invalid = errors(format, doc);
    assert!(
        invalid.is_empty(),
        "{what}: the sample itself is invalid:\n{}",
        invalid.join("\n")
    );
    let mut all = Vec::new();
    walk(doc, "$".into(), "$".into(), &mut all);
    let mut seen = std::collections::BTreeSet::new();
    let (mut objects, mut scalars) = (0, 0);
    for (path, pattern, v) in all {
        if !seen.insert(pattern.clone()) {
            continue;
        }
        let untagged: String = pattern
            .split('{')
            .map(|p| p.split_once('}').map_or(p, |(_, rest)| rest))
            .collect();
        if v.is_object() && !MAPS.contains(&untagged.as_str()) {
            let mut bad = doc.clone();
            set(&mut bad, &path, |o| {
                o["surely_not_a_field"] = json!(1);
            });
            assert!(
                !errors(format, &bad).is_empty(),
                "{what}: an unknown field at {path} is accepted"
            );
            objects += 1;
        }
        if !v.is_object() && !v.is_array() {
            let mut bad = doc.clone();
            let wrong = wrong_type(v);
            set(&mut bad, &path, |x| *x = wrong.clone());
            assert!(
                !errors(format, &bad).is_empty(),
                "{what}: a wrong type at {path} ({v} -> {wrong}) is accepted"
            );
            scalars += 1;
        }
    }
    eprintln!("{format} ({what}): an unknown field rejected in {objects} objects, a wrong type in {scalars} scalars");
    (objects, scalars)
}
