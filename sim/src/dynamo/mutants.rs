//! Seed bugs as patches to the real planner (`conformance/dynamo/mutants/*.json`,
//! format `kvsim-dynamo-mutant/1`): each re-introduces one seed bug into a copy
//! of the installed 1.6.1 module; the environment itself is never touched.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::env;

/// The mutant files' format tag.
pub const MUTANT_FORMAT: &str = "kvsim-dynamo-mutant/1";

/// One textual edit: `find` occurs exactly `count` times and becomes `replace`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// Text to find.
    pub find: String,
    /// Its replacement.
    pub replace: String,
    /// Occurrences expected.
    #[serde(default = "one")]
    pub count: usize,
}

fn one() -> usize {
    1
}

/// The scenario a mutant's author showed it on (documentation and tests; the
/// hunt finds its own).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Witness {
    /// A scenario file the witness runs.
    pub scenario_file: Option<String>,
    /// Step cost scale.
    #[serde(default)]
    pub clock_scale: Option<f64>,
    /// Soft timeout (s).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Live state.
    #[serde(default)]
    pub live_state: bool,
    /// Warm-up on.
    #[serde(default = "yes")]
    pub warmup: bool,
    /// Other fields, kept.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

fn yes() -> bool {
    true
}

/// A real-planner mutant: a patch to Dynamo's planner restoring a seed bug.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RealMutant {
    /// The format tag.
    pub format: String,
    /// Its name.
    pub name: String,
    /// Its §8.2 bug.
    pub bug: u32,
    /// What it breaks.
    pub summary: String,
    /// Where the fix was.
    #[serde(default)]
    pub fix_site: String,
    /// The edits.
    pub edits: Vec<Edit>,
    /// A scenario that shows it.
    #[serde(default)]
    pub witness: Option<Witness>,
    /// The invariant expected to catch it.
    #[serde(default)]
    pub expect: Option<String>,
    /// Other fields, kept.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The mutant directory: `$KVSIM_DYNAMO_MUTANTS`, else the checkout's.
pub fn mutants_dir() -> PathBuf {
    if let Some(v) = std::env::var_os("KVSIM_DYNAMO_MUTANTS") {
        return PathBuf::from(v);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/dynamo/mutants")
}

/// Every mutant, by name.
pub fn load_mutants() -> Result<Vec<RealMutant>, String> {
    let dir = mutants_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read the mutant directory {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        let m: RealMutant = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        if m.format != MUTANT_FORMAT {
            return Err(format!("{}: not a {MUTANT_FORMAT} file", f.display()));
        }
        out.push(m);
    }
    out.sort_by(|a, b| (a.bug, &a.name).cmp(&(b.bug, &b.name)));
    Ok(out)
}

/// The mutants a `--mutant` value names (`all`, or one name).
pub fn select(name: &str) -> Result<Vec<RealMutant>, String> {
    let all = load_mutants()?;
    if name == "all" {
        return Ok(all);
    }
    // A comma-separated list hunts those, in the order given.
    name.split(',')
        .map(|n| match all.iter().find(|m| m.name == n.trim()) {
            Some(m) => Ok(m.clone()),
            None => Err(format!(
                "unknown real-planner mutant {n:?}; known: {}",
                all.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
        })
        .collect()
}

/// The installed planner module of the environment.
pub fn installed_source() -> Result<PathBuf, String> {
    let lib = env::venv_dir().join("lib");
    let entries = std::fs::read_dir(&lib).map_err(|_| {
        format!(
            "the real planner's environment is not installed ({}); install it with: {}",
            env::venv_dir().display(),
            env::INSTALL_COMMAND
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .map(|p| p.join("site-packages/dynamo/vllm/instrumented_scheduler.py"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
        .pop()
        .ok_or_else(|| format!("no dynamo/vllm/instrumented_scheduler.py under {}", lib.display()))
}

/// `source` with the mutant's edits applied, or why they do not apply.
pub fn apply(m: &RealMutant, source: &str) -> Result<String, String> {
    let mut text = source.to_string();
    for (i, e) in m.edits.iter().enumerate() {
        let n = text.matches(&e.find).count();
        if n != e.count {
            return Err(format!(
                "mutant {} edit {}: its text occurs {n} time(s) in the planner source, expected {}",
                m.name,
                i + 1,
                e.count
            ));
        }
        text = text.replace(&e.find, &e.replace);
    }
    Ok(text)
}

/// Write the patched copy of the installed module into `dir`; its path.
pub fn patched_copy(m: &RealMutant, dir: &Path) -> Result<PathBuf, String> {
    let src = installed_source()?;
    let text = std::fs::read_to_string(&src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    let patched = apply(m, &text)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join(format!("{}.instrumented_scheduler.py", m.name));
    std::fs::write(&out, patched).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutant(edits: Vec<Edit>) -> RealMutant {
        RealMutant {
            format: MUTANT_FORMAT.into(),
            name: "m".into(),
            bug: 1,
            summary: String::new(),
            fix_site: String::new(),
            edits,
            witness: None,
            expect: None,
            other: Default::default(),
        }
    }

    #[test]
    fn an_edit_applies_only_where_it_occurs_exactly_as_often_as_it_says() {
        let e = |find: &str, count| Edit {
            find: find.into(),
            replace: "Y".into(),
            count,
        };
        assert_eq!(apply(&mutant(vec![e("x", 2)]), "axbx").unwrap(), "aYbY");
        let err = apply(&mutant(vec![e("x", 1)]), "axbx").unwrap_err();
        assert!(err.contains("occurs 2 time(s)"), "{err}");
        assert!(apply(&mutant(vec![e("z", 1)]), "axbx").is_err());
    }
}
