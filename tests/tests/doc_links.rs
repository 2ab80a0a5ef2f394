//! Every relative link in the project's Markdown resolves: the file exists and, where the link
//! names a heading (`file.md#anchor` or `#anchor`), that file has a heading with GitHub's anchor
//! for it. The docs cite each other's sections by link; a renamed heading or a moved file would
//! otherwise leave them pointing at nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kvsim_tests::repo_root;

/// The Markdown files of the repository, build outputs and scratch folders left out.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                markdown_files(&p, out);
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, inline code marks and punctuation other than `-`
/// and `_` dropped, spaces to hyphens; a repeated anchor gets `-1`, `-2`, ...
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = anchor_of(&line[hashes..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
            *n += 1;
        }
    }
    out
}

/// The targets of inline links `[text](target)` on a line, inline code spans skipped.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    let target = line[i + 2..i + 2 + end].trim();
                    // `[a](b "title")`: the target is the first word.
                    let target = target.split_whitespace().next().unwrap_or("");
                    out.push(target.to_string());
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() > 20,
        "found only {} Markdown files under {}",
        files.len(),
        root.display()
    );
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line_no, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty()
                    || target.contains("://")
                    || target.starts_with("mailto:")
                    || target.starts_with('<')
                {
                    continue;
                }
                checked += 1;
                let (path_part, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = if path_part.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path_part)
                };
                let here = format!("{}:{line_no}: ({target})", file.strip_prefix(&root).unwrap().display());
                if !dest.exists() {
                    broken.push(format!("{here}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if dest.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let known = anchor_cache
                    .entry(dest.clone())
                    .or_insert_with(|| anchors(&std::fs::read_to_string(&dest).unwrap_or_default()));
                if !known.contains(anchor) {
                    broken.push(format!("{here}: no heading with this anchor"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(
        anchor_of("The `h100-c3` profile, and bands (issue 21, 2026-12-06)"),
        "the-h100-c3-profile-and-bands-issue-21-2026-12-06"
    );
    let text = "# A\n```\n# not a heading\n```\n## A\n## b_c: d\n";
    let got: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(got, ["a", "a-1", "b_c-d"]);
    assert_eq!(
        link_targets("see [x](a.md#b) and `[y](not)` and [z](c.md \"t\")"),
        ["a.md#b", "c.md"]
    );
}
