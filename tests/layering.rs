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
//! 10. `array` (paged arrays and their translation caches), `numa` (the
//!     partitions and their message passing) and `hitsim` — the hit-ratio
//!     simulator;
//! 11. the crate root;
//! 12. the binary (`src/bin/setcache/`), which uses the library from above
//!     (its `crate::` is its own root); the rule on mutual imports holds in it
//!     too.
//!
//! Test code (`#[cfg(test)]` modules and test-only files) may reach across
//! layers to cross-check them.
//! References are `crate::`, `super::` and `self::` paths, and paths into a
//! module's own child modules (`aio::stop` in `cached`), outside comments. A
//! facade's re-exports of its children (`pub use queue::CachedQueue;`) are not
//! references: they name a child's types for users, and use nothing of them.
//! No files may form a cycle of imports, however long (`a` uses `b` uses `c`
//! uses `a`), save the one pair listed and a child module's use of its
//! parent's items when the child is not public (`mod core;` in `cache` uses
//! `cache`'s helpers while `cache` uses `core`'s types: a type and the owner
//! it is private to).

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
        ("numa", 10),
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

/// `code` without its re-exports of child modules: `pub use x::...;` and
/// `pub(crate) use x::...;` where `x` is not `crate`, `super` or `self`.
fn without_child_reexports(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    loop {
        let found = ["pub use ", "pub(crate) use "]
            .iter()
            .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
            .min();
        let Some((i, k)) = found else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i]);
        let path = rest[i + k..].trim_start();
        let end = rest[i..].find(';').map_or(rest.len(), |e| i + e + 1);
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| path.starts_with(p))
        {
            out.push_str(&rest[i..end]);
        }
        rest = &rest[end..];
    }
}

/// Modules named by `crate::`, `super::`, `self::` and child paths in `code`, resolved to the
/// longest module that has a file.
fn references(module: &str, code: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let code = &without_child_reexports(code);
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    // Paths that start with the name of one of this module's child files.
    let children: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let rest = if module.is_empty() {
                Some(f.as_str())
            } else {
                f.strip_prefix(module)?.strip_prefix("::")
            };
            rest.filter(|r| !r.is_empty() && !r.contains("::"))
                .map(|r| format!("{r}::"))
        })
        .collect();
    let starts = code
        .match_indices("crate::")
        .map(|(i, _)| (i, "crate::"))
        .chain(code.match_indices("super::").map(|(i, _)| (i, "super::")))
        .chain(code.match_indices("self::").map(|(i, _)| (i, "self::")))
        .chain(
            children
                .iter()
                .flat_map(|c| code.match_indices(c.as_str()).map(|(i, _)| (i, ""))),
        )
        .collect::<Vec<_>>();
    for (start, prefix) in starts {
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
        } else if prefix == "super::" {
            let mut m: Vec<String> = module.split("::").map(String::from).collect();
            m.pop();
            m
        } else {
            // `self::` and child paths start at this module.
            module
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
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
    // A private child module may use its parent's items, as the parent uses
    // the child's (a type and the owner it is private to): that edge back to
    // the owner is dropped, as is the listed pair's one way; then any cycle
    // is wrong.
    for m in modules.keys() {
        let Some((parent, child)) = m.rsplit_once("::") else {
            continue;
        };
        let Some(parent_rel) = modules.get(parent) else {
            continue;
        };
        let text = code_of(&std::fs::read_to_string(src.join(parent_rel)).unwrap());
        // Not part of the public API: `mod x;`, `pub(crate) mod x;` or `pub(super) mod x;`.
        let private = text.lines().any(|l| {
            ["", "pub(crate) ", "pub(super) "]
                .iter()
                .any(|v| l.trim() == format!("{v}mod {child};"))
        });
        if private && let Some(r) = edges.get_mut(m) {
            r.remove(parent);
        }
    }
    for (a, b) in MUTUAL_OK {
        if let Some(r) = edges.get_mut(*b) {
            r.remove(*a);
        }
    }
    for cycle in cycles(&edges) {
        wrong.push(format!(
            "these files import each other in a circle: {}",
            cycle.join(" -> ")
        ));
    }
    assert!(
        modules.len() > 30 && edges.values().map(BTreeSet::len).sum::<usize>() > 50,
        "the check found too little to check: {} modules",
        modules.len()
    );
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

/// One cycle (as a path that ends where it starts) through each group of
/// modules that reach each other (each strongly connected component of more
/// than one module).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for t in edges.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for a in edges.keys() {
        if done.contains(a) || !reach(a).contains(a) {
            continue;
        }
        // The shortest way back to `a`, by breadth-first search.
        let mut prev: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([a.clone()]);
        'search: while let Some(m) = queue.pop_front() {
            for t in edges.get(&m).into_iter().flatten() {
                if t == a {
                    let mut path = vec![a.clone()];
                    let mut at = m.clone();
                    while at != *a {
                        path.push(at.clone());
                        at = prev[&at].clone();
                    }
                    path[1..].reverse();
                    path.push(a.clone());
                    out.push(path);
                    break 'search;
                }
                if !prev.contains_key(t) && t != a {
                    prev.insert(t.clone(), m.clone());
                    queue.push_back(t.clone());
                }
            }
        }
        // Every module in this group is reported with it.
        let back = reach(a);
        for m in back {
            if reach(&m).contains(a) {
                done.insert(m);
            }
        }
        done.insert(a.clone());
    }
    out
}
