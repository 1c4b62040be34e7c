//! `include/setcache.h` against the library's source: the same functions,
//! with the same parameter and return types in the same order, and the same
//! structs with the same fields.

use std::collections::BTreeMap;
use std::path::Path;

fn read(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join(rel)).unwrap()
}

/// The text from just after `open` up to its matching `)`.
fn balanced(s: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses");
}

/// Split at commas outside parentheses and angle brackets.
fn split(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        let arrow = c == '>' && cur.ends_with('-');
        match c {
            '(' | '<' => depth += 1,
            ')' => depth -= 1,
            '>' if !arrow => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A C type in one spelling: `const char *const *` -> `const char*const*`.
fn c_norm(t: &str) -> String {
    let t = t.replace("struct ", "");
    let mut out = String::new();
    for tok in t.replace('*', " * ").split_whitespace() {
        if tok == "*" || out.ends_with('*') || out.is_empty() {
            out.push_str(tok);
        } else {
            out.push(' ');
            out.push_str(tok);
        }
    }
    out
}

/// A C parameter's type (its name dropped); function pointers spelled as
/// `int(*)(const char*,void*)`.
fn c_param(p: &str) -> String {
    if let Some(star) = p.find("(*") {
        let ret = c_norm(&p[..star]);
        let args_at = p[star..].find(")(").unwrap() + star + 1;
        let args = split(balanced(p, args_at))
            .iter()
            .map(|a| c_param(a))
            .collect::<Vec<_>>();
        return format!("{ret}(*)({})", args.join(","));
    }
    let p = p.trim();
    let name_at = p
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    c_norm(&p[..name_at])
}

/// A Rust FFI type in the C spelling.
fn rust_type(t: &str) -> String {
    let t = t.trim();
    let callback = t
        .strip_prefix("Option<unsafe extern \"C\" fn(")
        .or_else(|| t.strip_prefix("Option<unsafe extern \"C-unwind\" fn("));
    if let Some(inner) = callback {
        let close = inner.find(") ->").unwrap();
        let args = split(&inner[..close])
            .iter()
            .map(|a| rust_type(a))
            .collect::<Vec<_>>();
        let ret = rust_type(inner[close + 4..].trim_end_matches('>'));
        return format!("{ret}(*)({})", args.join(","));
    }
    if let Some(rest) = t.strip_prefix("*mut ") {
        return format!("{}*", rust_type(rest));
    }
    if let Some(rest) = t.strip_prefix("*const ") {
        let inner = rust_type(rest);
        return if inner.ends_with('*') {
            format!("{inner}const*")
        } else {
            format!("const {inner}*")
        };
    }
    match t {
        "c_int" => "int",
        "c_char" => "char",
        "c_void" => "void",
        "i64" => "int64_t",
        "u64" => "uint64_t",
        "u32" => "uint32_t",
        "usize" => "size_t",
        other => other,
    }
    .to_string()
}

fn header_functions(h: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while let Some(i) = h[at..].find("setcache_").map(|i| i + at) {
        let name_end = h[i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(h.len(), |e| e + i);
        let line_start = h[..i].rfind('\n').map_or(0, |n| n + 1);
        let before = h[line_start..i].trim();
        at = name_end;
        if h[name_end..].starts_with('(') && !before.is_empty() && !before.starts_with("/*") {
            let params = split(balanced(h, name_end))
                .iter()
                .map(|p| c_param(p))
                .collect::<Vec<_>>();
            let params = if params == ["void"] { vec![] } else { params };
            out.insert(
                h[i..name_end].to_string(),
                format!("{}({})", c_norm(before), params.join(",")),
            );
        }
    }
    out
}

fn rust_functions(src: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, _) in src.match_indices("extern \"C\" fn setcache_") {
        let name_at = i + "extern \"C\" fn ".len();
        let open = src[name_at..].find('(').unwrap() + name_at;
        if !src[..i].trim_end().ends_with("pub unsafe") && !src[..i].trim_end().ends_with("pub") {
            continue;
        }
        let params = split(balanced(src, open))
            .iter()
            .map(|p| rust_type(p.split_once(':').unwrap().1))
            .collect::<Vec<_>>();
        let after = &src[open + balanced(src, open).len() + 2..];
        let ret = after
            .trim_start()
            .strip_prefix("->")
            .map(|r| r.split('{').next().unwrap().trim())
            .unwrap_or("()");
        out.insert(
            src[name_at..open].to_string(),
            format!("{}({})", rust_type(ret), params.join(",")),
        );
    }
    out
}

fn header_structs(h: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (i, _) in h.match_indices("struct setcache_") {
        let rest = &h[i + 7..];
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap();
        if !rest[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let body = &rest[rest.find('{').unwrap() + 1..rest.find("};").unwrap()];
        let fields = body
            .lines()
            .map(|l| l.split("/*").next().unwrap().trim())
            .filter(|l| l.ends_with(';'))
            .map(|l| {
                let l = l.trim_end_matches(';');
                let (t, n) = l.rsplit_once(' ').unwrap();
                format!("{n}: {}", c_norm(t))
            })
            .collect();
        out.insert(rest[..name_end].to_string(), fields);
    }
    out
}

fn rust_structs(src: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (i, _) in src.match_indices("#[repr(C)]\npub struct setcache_") {
        let rest = &src[i + "#[repr(C)]\npub struct ".len()..];
        let name_end = rest.find(' ').unwrap();
        let body = &rest[rest.find('{').unwrap() + 1..rest.find('}').unwrap()];
        let fields = body
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("pub "))
            .map(|l| {
                let (n, t) = l.trim_end_matches(',').split_once(':').unwrap();
                format!("{n}: {}", rust_type(t))
            })
            .collect::<Vec<_>>();
        // A handle: its fields are the library's own (see `rust_opaque`).
        if !fields.is_empty() {
            out.insert(rest[..name_end].to_string(), fields);
        }
    }
    out
}

/// The handles: `repr(C)` structs of the library with no public field,
/// which the header declares opaque.
fn rust_opaque(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in src.match_indices("#[repr(C)]\npub struct setcache_") {
        let rest = &src[i + "#[repr(C)]\npub struct ".len()..];
        let body = &rest[rest.find('{').unwrap() + 1..rest.find('}').unwrap()];
        if !body.lines().any(|l| l.trim().starts_with("pub ")) {
            out.push(rest[..rest.find(' ').unwrap()].to_string());
        }
    }
    out.sort();
    out
}

/// The header's opaque declarations: `typedef struct X X;`.
fn header_opaque(h: &str) -> Vec<String> {
    let mut out: Vec<String> = h
        .lines()
        .filter_map(|l| l.trim().strip_prefix("typedef struct "))
        .filter_map(|l| l.strip_suffix(';'))
        .filter_map(|l| l.split_once(' '))
        .filter(|(a, b)| a == b)
        .map(|(a, _)| a.to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn the_header_declares_what_the_library_defines() {
    let h = read("include/setcache.h");
    let src = read("capi/src/lib.rs");
    let (hf, rf) = (header_functions(&h), rust_functions(&src));
    assert!(
        hf.len() >= 20,
        "too few functions found in the header: {hf:?}"
    );
    assert_eq!(
        hf, rf,
        "functions: header (left) against the library (right)"
    );
    let (hs, rs) = (header_structs(&h), rust_structs(&src));
    assert_eq!(hs.len(), 3, "{hs:?}");
    assert_eq!(hs, rs, "structs: header (left) against the library (right)");
    let (ho, ro) = (header_opaque(&h), rust_opaque(&src));
    assert_eq!(ro.len(), 4, "{ro:?}");
    assert_eq!(
        ho, ro,
        "handles: header's opaque types (left) against the library's (right)"
    );
}
