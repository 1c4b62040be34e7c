//! The layering rule, checked on the source: a module imports only from its
//! own layer or the layers below it, and no two files import each other
//! (save the one pair listed, a type and the owner it is private to).
//!
//! Layers, lowest first:
//!
//! 0. `error`, `util` — shared pieces;
//! 1. `storage::{layout, header}` — placement and the on-disk header;
//! 2. `storage::io` — the device engines;
//! 3. `storage::{buf, file, queue, store}` and the `storage` facade;
//! 4. `cache` — the set-associative page cache;
//! 5. `cached::staging` and `cached::shared`, then 6. `cached::writeback` and `cached::readahead`,
//!    7. `cached::flusher`,
//!    8. `cached` (the cached store and files), 9. `cached::queue` and
//!    `cached::aio` (the futures, on queues of their own);
//! 10. `array` (paged arrays and their translation caches) and
//!     `hitsim` — the hit-ratio simulator;
//! 11. the crate root;
//! 12. the binary (`src/bin/setcache/`), which uses the library from above
//!     (its `crate::` is its own root); the rule on mutual imports holds in it
//!     too.
//!
//! Test code (`#[cfg(test)]` modules and test-only files) may reach across
//! layers to cross-check them.
//! References are `crate::` and `super::` paths outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Test-only files.
const TEST_ONLY: &[&str] = &[
    "tests.rs",
    "prop_tests.rs",
    "crash_tests.rs",
    "test_alloc.rs",
];
/// Pairs that may import each other: a `File` keeps its store alive and calls
/// back into it for metadata operations, and the store owns the file table.
const MUTUAL_OK: &[(&str, &str)] = &[("storage::file", "storage::store")];

fn rank(module: &str) -> Option<u32> {
    let layers: &[(&str, u32)] = &[
        ("error", 0),
        ("util", 0),
        ("test_alloc", 0),
        ("storage::layout", 1),
        ("storage::header", 1),
        ("storage::io", 2),
        ("storage", 3),
        ("cache", 4),
        ("cached::staging", 5),
        ("cached::shared", 5),
        ("cached::writeback", 6),
        ("cached::readahead", 6),
        ("cached::flusher", 7),
        ("cached::queue", 9),
        ("cached::aio", 9),
        ("array", 10),
        ("cached", 8),
        ("hitsim", 10),
        ("bin", 12),
        ("", 11),
    ];
    layers
        .iter()
        .find(|(prefix, _)| {
            prefix.is_empty() || module == *prefix || module.starts_with(&format!("{prefix}::"))
        })
        .map(|&(_, r)| r)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file relative to `src/`: `storage/io/mod.rs` is `storage::io`.
fn module_of(rel: &str) -> String {
    let rel = rel.strip_suffix(".rs").unwrap();
    let mut parts: Vec<&str> = rel.split('/').collect();
    if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
        parts.pop();
    }
    parts.join("::")
}

/// The source without comments and without `#[cfg(test)]` items (a module
/// or function in braces after the attribute).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth = 0i64;
    let mut pending_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = code.matches('{').count() as i64;
        let closes = code.matches('}').count() as i64;
        if pending_test && skip_depth.is_none() {
            if trimmed.ends_with(';') {
                // `#[cfg(test)] mod x;` or a test-only `use`: skip the line.
                pending_test = false;
                continue;
            }
            if opens > 0 {
                skip_depth = Some(depth);
                pending_test = false;
            }
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        if !pending_test {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}

/// Modules named by `crate::` and `super::` paths in `code`, resolved to the
/// longest module that has a file.
fn references(module: &str, code: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    for (start, prefix) in code
        .match_indices("crate::")
        .map(|(i, _)| (i, "crate::"))
        .chain(code.match_indices("super::").map(|(i, _)| (i, "super::")))
    {
        if start > 0 && (is_ident(bytes[start - 1]) || bytes[start - 1] == b':') {
            continue; // part of a longer path (`setcache::super`, `self::super`)
        }
        let mut base: Vec<String> = if prefix == "crate::" {
            // The binary's files name its own root as `crate`.
            if module.starts_with("bin::setcache") {
                vec!["bin".to_string(), "setcache".to_string()]
            } else {
                Vec::new()
            }
        } else {
            let mut m: Vec<String> = module.split("::").map(String::from).collect();
            m.pop();
            m
        };
        let mut rest = &code[start + prefix.len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let path: Vec<&str> = rest
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .collect();
        let mut full = base.clone();
        full.extend(path.iter().map(|s| s.to_string()));
        let target = (0..=full.len())
            .rev()
            .map(|k| full[..k].join("::"))
            .find(|m| files.contains(m))
            .unwrap_or_default();
        if target != module {
            out.insert(target);
        }
    }
    out
}

#[test]
fn no_layer_imports_from_a_higher_one_and_no_two_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&src, &mut paths);
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for p in &paths {
        let rel = p
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let name = rel.rsplit('/').next().unwrap();
        if TEST_ONLY.contains(&name) {
            continue;
        }
        modules.insert(module_of(&rel), rel);
    }
    let files: BTreeSet<String> = modules.keys().cloned().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (m, rel) in &modules {
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        let refs = references(m, &code_of(&text), &files);
        let from = rank(m).unwrap();
        for t in &refs {
            let to = rank(t).unwrap();
            if to > from {
                wrong.push(format!(
                    "src/{rel} (layer {from}) imports `{}` (layer {to}), a higher layer",
                    if t.is_empty() { "crate" } else { t }
                ));
            }
        }
        edges.insert(m.clone(), refs);
    }
    for (a, refs) in &edges {
        for b in refs {
            let mutual = a < b && edges.get(b).is_some_and(|r| r.contains(a));
            let allowed = MUTUAL_OK.contains(&(a.as_str(), b.as_str()));
            if mutual && !allowed {
                wrong.push(format!("`{a}` and `{b}` import each other"));
            }
        }
    }
    assert!(
        modules.len() > 30 && edges.values().map(BTreeSet::len).sum::<usize>() > 50,
        "the check found too little to check: {} modules",
        modules.len()
    );
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}
