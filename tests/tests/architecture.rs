//! The layering docs/architecture.md promises, checked on the sources: core's top-level modules
//! import each other without a cycle, and the simulator and GPU crates depend on core alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kvsim_tests::repo_root;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Core's top-level module of a source file (`kv`, `engine`, `driver`, ...).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy()
        .to_string();
    first.trim_end_matches(".rs").to_string()
}

/// Which top-level modules each one names through `crate::` paths.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo_root().join("core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let m = module_of(&src, &f);
        if m == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let deps = graph.entry(m.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != m {
                deps.insert(name);
            }
        }
    }
    graph
}

/// A cycle through `node`, if any (depth-first search).
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|p| p == node) {
        return Some(path[at..].to_vec());
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for dep in graph.get(node).into_iter().flatten() {
        if let Some(c) = cycle_from(graph, dep, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn core_modules_import_each_other_without_a_cycle() {
    let graph = import_graph();
    assert!(graph.contains_key("engine") && graph.contains_key("kv"), "{graph:?}");
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = cycle_from(&graph, node, &mut Vec::new(), &mut done) {
            panic!("core modules import each other in a cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("a".into());
    let c = cycle_from(&g, "a", &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(c, Some(vec!["a".to_string(), "b".to_string()]));
}

#[test]
fn sim_and_gpu_depend_on_core_alone() {
    for krate in ["sim", "gpu"] {
        let manifest = std::fs::read_to_string(repo_root().join(krate).join("Cargo.toml")).unwrap();
        let siblings: Vec<&str> = ["kvsim-sim", "kvsim-gpu", "kvsim-tests", "kvsim = "]
            .into_iter()
            .filter(|s| manifest.contains(s) && !manifest.contains(&format!("name = \"{s}\"")))
            .collect();
        assert!(siblings.is_empty(), "{krate}/Cargo.toml names {siblings:?}");
        assert!(manifest.contains("kvsim-core"), "{krate} depends on core");
    }
}
