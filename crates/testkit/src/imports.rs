//! The imports between the files of a crate, read from its sources as text: which file
//! uses which (for the layering tests of crates/mds/tests/layers.rs and the suite's
//! `imports` module), the layers they break and the circles they form.
//!
//! Comments and string and character literals are blanked first; then `use` trees (grouped,
//! nested, `self`, globs, `as`), inline paths (`crate::a::b`, `super::x`, resolved from the
//! file's module and any inline module it is in), and the names a file has in scope for a
//! module of the crate (`mod x;`, a `use` of a module, a glob of the crate root) followed by
//! `::` are references. A path is charged to the file of its longest prefix that is a
//! module; a path to an item of the crate root, to the file the root re-exports it from.

#[cfg(test)]
use std::collections::BTreeSet;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Keywords after which a name is defined (for items the crate root re-exports by glob).
const DEFINING: &[&str] = &[
    "fn", "struct", "enum", "const", "static", "type", "trait", "mod", "union",
];

/// One source file.
struct Source {
    /// Its path below `src/`, with `/`.
    rel: String,
    /// Its module path: `[]` for `lib.rs`, `["ops"]` for `ops/mod.rs`, `["ops", "create"]`
    /// for `ops/create.rs`.
    module: Vec<String>,
    /// Its tokens (comments and literals removed) with their line numbers.
    tokens: Vec<(String, usize)>,
}

/// A `crate::` reference: the line it is on and the path it names, from the crate root.
struct Ref {
    line: usize,
    path: Vec<String>,
}

/// A leaf of a `use` tree.
struct UseLeaf {
    /// The path as written (`crate`, `super`, `self` or a name first).
    path: Vec<String>,
    /// It ends in `*`.
    glob: bool,
    /// `as` name.
    alias: Option<String>,
    /// Line of its last name.
    line: usize,
}

/// The crate's modules and what its root re-exports.
struct Crate {
    /// Module path → file.
    files: BTreeMap<Vec<String>, String>,
    /// Names the root re-exports (`use a::b;`, `use a::item;`) → the module they lead to.
    root_named: HashMap<String, Vec<String>>,
    /// Modules the root re-exports by glob (`use a::*;`).
    root_globs: Vec<Vec<String>>,
    /// File → names it defines (at any depth).
    defined: HashMap<String, HashSet<String>>,
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

fn is_ident(tok: &str) -> bool {
    tok.chars()
        .next()
        .is_some_and(|ch| ch.is_alphabetic() || ch == '_')
}

/// Every `.rs` file below `dir`, sorted.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().and_then(|e| e.to_str()) == Some("rs") {
            out.push(p);
        }
    }
}

/// The module path of the file at `rel` (below `src/`).
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = stem.split('/').map(|p| p.to_string()).collect();
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        return Vec::new();
    }
    if parts.last().map(|p| p.as_str()) == Some("mod") {
        parts.pop();
    }
    parts
}

/// Pushes a blank for every character of `chars`, keeping line breaks.
fn push_blanks(out: &mut String, chars: &[char]) {
    for &ch in chars {
        out.push(if ch == '\n' { '\n' } else { ' ' });
    }
}

/// The end (exclusive) of the raw string literal starting at `i` (`r"`, `r#"`, `br#"`,
/// `cr"`), if one starts there.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(c.get(j).copied(), Some('b') | Some('c')) {
        j += 1;
    }
    if c.get(j).copied() != Some('r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j).copied() == Some('#') {
        hashes += 1;
        j += 1;
    }
    if c.get(j).copied() != Some('"') {
        return None;
    }
    j += 1;
    loop {
        match c.get(j).copied() {
            None => return Some(c.len()),
            Some('"') => {
                let mut k = 0;
                while k < hashes && c.get(j + 1 + k).copied() == Some('#') {
                    k += 1;
                }
                if k == hashes {
                    return Some(j + 1 + hashes);
                }
                j += 1;
            }
            Some(_) => j += 1,
        }
    }
}

/// `text` with comments, string literals and character literals replaced by blanks (line
/// breaks kept, so line numbers stay right).
fn blank(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let n = c.len();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < n {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        let after_ident = i > 0 && is_ident_char(c[i - 1]);
        if ch == '/' && next == Some('/') {
            let mut j = i;
            while j < n && c[j] != '\n' {
                j += 1;
            }
            push_blanks(&mut out, &c[i..j]);
            i = j;
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0usize;
            let mut j = i;
            while j < n {
                if c[j] == '/' && c.get(j + 1).copied() == Some('*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1).copied() == Some('/') {
                    depth = depth.saturating_sub(1);
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            let end = j.min(n);
            push_blanks(&mut out, &c[i..end]);
            i = end;
        } else if matches!(ch, 'r' | 'b' | 'c') && !after_ident && raw_string_end(&c, i).is_some() {
            let end = raw_string_end(&c, i).unwrap_or(n).min(n);
            push_blanks(&mut out, &c[i..end]);
            i = end;
        } else if ch == '"' {
            let mut j = i + 1;
            while j < n && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = (j + 1).min(n);
            push_blanks(&mut out, &c[i..end]);
            i = end;
        } else if ch == '\'' && next == Some('\\') {
            // An escaped character literal: past the quote, the backslash and the escaped
            // character, then to the closing quote.
            let mut j = i + 3;
            while j < n && c[j] != '\'' {
                j += 1;
            }
            let end = (j + 1).min(n);
            push_blanks(&mut out, &c[i..end]);
            i = end;
        } else if ch == '\'' && c.get(i + 2).copied() == Some('\'') {
            // A character literal such as '{'.
            push_blanks(&mut out, &c[i..i + 3]);
            i += 3;
        } else {
            // Code, or the quote of a lifetime or label.
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// The tokens of blanked `text`: names (and numbers), `::`, and single characters.
fn tokens(text: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if is_ident_char(ch) {
            let mut j = i;
            while j < c.len() && is_ident_char(c[j]) {
                j += 1;
            }
            out.push((c[i..j].iter().collect::<String>(), line));
            i = j;
        } else if ch == ':' && c.get(i + 1).copied() == Some(':') {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

fn tok(t: &[(String, usize)], i: usize) -> &str {
    t.get(i).map(|(s, _)| s.as_str()).unwrap_or("")
}

/// Parses the `use` tree starting at token `i` (after `use`), under `prefix`; pushes its
/// leaves and returns the index of the token after the tree.
fn parse_use(
    t: &[(String, usize)],
    start: usize,
    prefix: Vec<String>,
    out: &mut Vec<UseLeaf>,
) -> usize {
    let mut path = prefix;
    let mut i = start;
    while i < t.len() {
        let s = tok(t, i);
        if s == "::" {
            i += 1;
        } else if s == "{" {
            i += 1;
            while i < t.len() && tok(t, i) != "}" {
                let next = parse_use(t, i, path.clone(), out);
                i = if next > i { next } else { i + 1 };
                if tok(t, i) == "," {
                    i += 1;
                }
            }
            return i + 1;
        } else if s == "*" {
            out.push(UseLeaf {
                path,
                glob: true,
                alias: None,
                line: t[i].1,
            });
            return i + 1;
        } else if is_ident(s) {
            path.push(s.to_string());
            let line = t[i].1;
            i += 1;
            if tok(t, i) == "::" {
                i += 1;
                continue;
            }
            let mut alias = None;
            if tok(t, i) == "as" && is_ident(tok(t, i + 1)) {
                alias = Some(tok(t, i + 1).to_string());
                i += 2;
            }
            out.push(UseLeaf {
                path,
                glob: false,
                alias,
                line,
            });
            return i;
        } else {
            return i;
        }
    }
    i
}

/// `path` (as written in a file of module `here`, `inline` inline modules deep) from the
/// crate root; `None` if it leads outside the crate.
fn absolute(
    path: &[String],
    here: &[String],
    inline: usize,
    scope: &HashMap<String, Vec<String>>,
    modules: &HashSet<Vec<String>>,
    in_use: bool,
) -> Option<Vec<String>> {
    let mut path: Vec<String> = path.to_vec();
    if path.len() > 1 && path.last().map(|p| p.as_str()) == Some("self") {
        path.pop();
    }
    let first = path.first()?.clone();
    if first == "crate" {
        return Some(path[1..].to_vec());
    }
    if first == "super" || first == "self" {
        let mut supers = 0;
        let mut k = 0;
        while k < path.len() && (path[k] == "super" || path[k] == "self") {
            if path[k] == "super" {
                supers += 1;
            }
            k += 1;
        }
        // Inline modules sit below the file's module: `super` leaves them first.
        let keep = (here.len() + inline).checked_sub(supers)?.min(here.len());
        let mut out = here[..keep].to_vec();
        out.extend_from_slice(&path[k..]);
        return Some(out);
    }
    if let Some(m) = scope.get(&first) {
        let mut out = m.clone();
        out.extend_from_slice(&path[1..]);
        return Some(out);
    }
    if in_use && inline == 0 {
        let mut child = here.to_vec();
        child.push(first.clone());
        if modules.contains(&child) {
            let mut out = here.to_vec();
            out.extend_from_slice(&path);
            return Some(out);
        }
    }
    None
}

/// The `crate::` references of `src` (paths from the crate root).
fn refs_of(src: &Source, modules: &HashSet<Vec<String>>) -> Vec<Ref> {
    let t = &src.tokens;
    let here = &src.module;
    let mut scope: HashMap<String, Vec<String>> = HashMap::new();
    // Child modules declared here (`mod x;`) are in scope by name.
    for w in t.windows(3) {
        if w[0].0 == "mod" && is_ident(&w[1].0) && w[2].0 == ";" {
            let mut m = here.clone();
            m.push(w[1].0.clone());
            scope.insert(w[1].0.clone(), m);
        }
    }
    let mut refs = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<usize> = Vec::new();
    let mut k = 0;
    while k < t.len() {
        let s = tok(t, k);
        let prev = if k > 0 { tok(t, k - 1) } else { "" };
        if s == "mod" && is_ident(tok(t, k + 1)) && tok(t, k + 2) == "{" {
            inline.push(depth + 1);
        }
        if s == "{" {
            depth += 1;
            k += 1;
            continue;
        }
        if s == "}" {
            if inline.last().copied() == Some(depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            k += 1;
            continue;
        }
        if s == "use" && prev != "::" {
            let mut leaves = Vec::new();
            let next = parse_use(t, k + 1, Vec::new(), &mut leaves);
            for leaf in leaves {
                match absolute(&leaf.path, here, inline.len(), &scope, modules, true) {
                    Some(abs) => {
                        if leaf.glob {
                            // A glob of a module brings its child modules into scope.
                            for m in modules {
                                if m.len() == abs.len() + 1 && m[..abs.len()] == abs[..] {
                                    scope
                                        .entry(m[abs.len()].clone())
                                        .or_insert_with(|| m.clone());
                                }
                            }
                        } else if modules.contains(&abs) {
                            let name = match &leaf.alias {
                                Some(a) => a.clone(),
                                None => abs.last().cloned().unwrap_or_default(),
                            };
                            scope.insert(name, abs.clone());
                        }
                        refs.push(Ref {
                            line: leaf.line,
                            path: abs,
                        });
                    }
                    None => {
                        // A name from outside the crate hides a module of the same name.
                        if !leaf.glob {
                            let name = match &leaf.alias {
                                Some(a) => Some(a.clone()),
                                None => leaf.path.last().cloned(),
                            };
                            if let Some(name) = name {
                                scope.remove(&name);
                            }
                        }
                    }
                }
            }
            k = next.max(k + 1);
            continue;
        }
        let starts_path = is_ident(s) && tok(t, k + 1) == "::" && prev != "::" && prev != "$";
        if starts_path && (s == "crate" || s == "super" || s == "self" || scope.contains_key(s)) {
            let mut path = vec![s.to_string()];
            let mut j = k + 1;
            while tok(t, j) == "::" && is_ident(tok(t, j + 1)) {
                path.push(tok(t, j + 1).to_string());
                j += 2;
            }
            if let Some(abs) = absolute(&path, here, inline.len(), &scope, modules, false) {
                refs.push(Ref {
                    line: t[k].1,
                    path: abs,
                });
            }
            k = j.max(k + 1);
            continue;
        }
        k += 1;
    }
    refs
}

impl Crate {
    fn new(sources: &[Source]) -> Crate {
        let mut files = BTreeMap::new();
        let mut defined = HashMap::new();
        for s in sources {
            files.insert(s.module.clone(), s.rel.clone());
            let mut names = HashSet::new();
            for w in s.tokens.windows(2) {
                if DEFINING.contains(&w[0].0.as_str()) && is_ident(&w[1].0) {
                    names.insert(w[1].0.clone());
                }
            }
            for w in s.tokens.windows(3) {
                if w[0].0 == "macro_rules" && w[1].0 == "!" && is_ident(&w[2].0) {
                    names.insert(w[2].0.clone());
                }
            }
            defined.insert(s.rel.clone(), names);
        }
        let modules: HashSet<Vec<String>> = files.keys().cloned().collect();
        let mut root_named = HashMap::new();
        let mut root_globs = Vec::new();
        if let Some(root) = sources.iter().find(|s| s.module.is_empty()) {
            let t = &root.tokens;
            let mut scope: HashMap<String, Vec<String>> = HashMap::new();
            for w in t.windows(3) {
                if w[0].0 == "mod" && is_ident(&w[1].0) && w[2].0 == ";" {
                    scope.insert(w[1].0.clone(), vec![w[1].0.clone()]);
                }
            }
            let mut depth = 0usize;
            let mut k = 0;
            while k < t.len() {
                let s = tok(t, k);
                if s == "{" {
                    depth += 1;
                } else if s == "}" {
                    depth = depth.saturating_sub(1);
                } else if s == "use" && depth == 0 {
                    let mut leaves = Vec::new();
                    let next = parse_use(t, k + 1, Vec::new(), &mut leaves);
                    for leaf in leaves {
                        let Some(abs) = absolute(&leaf.path, &[], 0, &scope, &modules, true) else {
                            continue;
                        };
                        if leaf.glob {
                            if !abs.is_empty() && modules.contains(&abs) {
                                root_globs.push(abs);
                            }
                            continue;
                        }
                        let name = match &leaf.alias {
                            Some(a) => a.clone(),
                            None => abs.last().cloned().unwrap_or_default(),
                        };
                        if modules.contains(&abs) {
                            root_named.insert(name, abs);
                        } else if abs.len() > 1 && modules.contains(&abs[..abs.len() - 1]) {
                            root_named.insert(name, abs[..abs.len() - 1].to_vec());
                        }
                    }
                    k = next.max(k + 1);
                    continue;
                }
                k += 1;
            }
        }
        Crate {
            files,
            root_named,
            root_globs,
            defined,
        }
    }

    /// The file `path` (from the crate root) leads to.
    fn file_of(&self, path: &[String], hops: usize) -> String {
        for k in (1..=path.len()).rev() {
            if let Some(f) = self.files.get(&path[..k]) {
                return f.clone();
            }
        }
        if let Some(first) = path.first() {
            if hops < 4 {
                if let Some(m) = self.root_named.get(first) {
                    let mut p = m.clone();
                    p.extend_from_slice(&path[1..]);
                    return self.file_of(&p, hops + 1);
                }
            }
            for g in &self.root_globs {
                if let Some(f) = self.files.get(g) {
                    if self.defined.get(f).is_some_and(|d| d.contains(first)) {
                        return f.clone();
                    }
                }
            }
        }
        self.files
            .get(&Vec::<String>::new())
            .cloned()
            .unwrap_or_else(|| "lib.rs".to_string())
    }
}

fn source(rel: &str, text: &str) -> Source {
    Source {
        rel: rel.to_string(),
        module: module_of(rel),
        tokens: without_test_modules(tokens(&blank(text))),
    }
}

/// `t` without the inline modules compiled for tests only (`#[cfg(test)] mod x { ... }`):
/// what a file's tests use is not what the file uses.
fn without_test_modules(t: Vec<(String, usize)>) -> Vec<(String, usize)> {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        let is_cfg_test = CFG_TEST
            .iter()
            .enumerate()
            .all(|(k, want)| t.get(i + k).is_some_and(|(s, _)| s == want));
        if is_cfg_test {
            let mut j = i + CFG_TEST.len();
            if t.get(j).is_some_and(|(s, _)| s == "pub") {
                j += 1;
            }
            let inline_mod = t.get(j).is_some_and(|(s, _)| s == "mod")
                && t.get(j + 2).is_some_and(|(s, _)| s == "{");
            if inline_mod {
                let mut depth = 0usize;
                let mut k = j + 2;
                while k < t.len() {
                    match t[k].0.as_str() {
                        "{" => depth += 1,
                        "}" => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
                i = k + 1;
                continue;
            }
        }
        out.push(t[i].clone());
        i += 1;
    }
    out
}

/// A crate's files (paths below `src/`, with `/`) and which uses which: `(from, to)` →
/// the line of `from` of the first such use.
pub struct FileGraph {
    /// Every `.rs` file below `src/`, sorted.
    pub files: Vec<String>,
    /// Uses between different files.
    pub edges: BTreeMap<(String, String), usize>,
}

/// The file graph of the crate whose sources are under `src`.
pub fn file_graph(src: &Path) -> FileGraph {
    let mut paths = Vec::new();
    collect(src, &mut paths);
    let mut sources = Vec::new();
    for p in &paths {
        let rel = p
            .strip_prefix(src)
            .expect("below src")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let text =
            std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        sources.push(source(&rel, &text));
    }
    let krate = Crate::new(&sources);
    let modules: HashSet<Vec<String>> = krate.files.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for s in &sources {
        for r in refs_of(s, &modules) {
            let target = krate.file_of(&r.path, 0);
            if target != s.rel {
                edges.entry((s.rel.clone(), target)).or_insert(r.line);
            }
        }
    }
    FileGraph {
        files: sources.iter().map(|s| s.rel.clone()).collect(),
        edges,
    }
}

/// True if the module of file `outer` contains the module of file `inner` (the crate root
/// contains every module; `osc.rs` or `osc/mod.rs` contains `osc/reads.rs`).
fn encloses(outer: &str, inner: &str) -> bool {
    let (o, i) = (module_of(outer), module_of(inner));
    o.len() < i.len() && i.starts_with(&o)
}

/// The circles of `g` with three or more files: each a set of files that all reach each
/// other through their uses (a strongly connected component; two files may use each
/// other), its files sorted. Uses between a module and the modules it contains (the crate
/// root and every file, `osc.rs` and `osc/reads.rs`) are not counted: the outer one
/// declares the inner and hands its names on (`pub use`), the inner names what the outer
/// holds for its children; neither closes a loop of its own making.
pub fn long_circles(g: &FileGraph) -> Vec<Vec<String>> {
    let index: HashMap<&str, usize> = g
        .files
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let n = g.files.len();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (a, b) in g.edges.keys() {
        if encloses(b, a) || encloses(a, b) {
            continue;
        }
        if let (Some(&i), Some(&j)) = (index.get(a.as_str()), index.get(b.as_str())) {
            adj[i].push(j);
        }
    }
    // Tarjan's strongly connected components, iteratively.
    let (mut next, mut order, mut low) = (0usize, vec![usize::MAX; n], vec![0usize; n]);
    let (mut stack, mut on_stack) = (Vec::new(), vec![false; n]);
    let mut out = Vec::new();
    for root in 0..n {
        if order[root] != usize::MAX {
            continue;
        }
        let mut calls: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&(v, k)) = calls.last() {
            if k == 0 {
                order[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adj[v].get(k) {
                if let Some(top) = calls.last_mut() {
                    top.1 += 1;
                }
                if order[w] == usize::MAX {
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                let mut members = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    members.push(g.files[w].clone());
                    if w == v {
                        break;
                    }
                }
                if members.len() > 2 {
                    members.sort();
                    out.push(members);
                }
            }
        }
    }
    out.sort();
    out
}

/// The uses in `g` that run from a file to a file of a higher layer: `(from, line, to)`.
/// `layer_of` gives each file's layer (lowest 0); files it does not name are not checked.
pub fn upward(g: &FileGraph, layer_of: &HashMap<String, usize>) -> Vec<(String, usize, String)> {
    g.edges
        .iter()
        .filter_map(|((from, to), line)| {
            let (a, b) = (layer_of.get(from)?, layer_of.get(to)?);
            (b > a).then(|| (from.clone(), *line, to.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_in_use_trees_inline_paths_and_super() {
        let text = r##"
    use crate::{a, b::{c, self}};
    use nacre_types::Fid;
    // crate::commented::out
    /* crate::block::comment /* nested */ */
    fn f<'x>(s: &'x str) -> char {
        let _ = "crate::in_string { ";
        let _ = r#"crate::in_raw_string"#;
        crate::d::e();
        super::g::h();
        '{'
    }
    mod tests {
        use super::*;
    }
    "##;
        let src = source("ops/create.rs", text);
        let modules: HashSet<Vec<String>> = [
            vec![],
            vec!["a"],
            vec!["b"],
            vec!["b", "c"],
            vec!["d"],
            vec!["ops"],
            vec!["ops", "create"],
            vec!["ops", "g"],
        ]
        .into_iter()
        .map(|m| {
            m.into_iter()
                .map(|s| s.to_string())
                .collect::<Vec<String>>()
        })
        .collect();
        let found: BTreeSet<(usize, Vec<String>)> = refs_of(&src, &modules)
            .into_iter()
            .map(|r| (r.line, r.path))
            .collect();
        let want: BTreeSet<(usize, Vec<String>)> = [
            (2usize, vec!["a"]),
            (2, vec!["b", "c"]),
            (2, vec!["b"]),
            (9, vec!["d", "e"]),
            (10, vec!["ops", "g", "h"]),
            (14, vec!["ops", "create"]),
        ]
        .into_iter()
        .map(|(l, p)| {
            (
                l,
                p.into_iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<String>>(),
            )
        })
        .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn a_path_through_the_root_is_charged_to_the_file_it_comes_from() {
        let lib = source(
            "lib.rs",
            "pub mod store;\nmod execute;\npub use store::records;\npub(crate) use execute::*;\n",
        );
        let records = source("store/records.rs", "pub const META: &str = \"meta\";\n");
        let store = source("store/mod.rs", "pub mod records;\n");
        let execute = source("execute.rs", "pub(crate) fn saved_reply() {}\n");
        let user = source(
            "ops/x.rs",
            "use crate::records::META;\nfn f() { crate::saved_reply(); crate::nothing(); }\n",
        );
        let sources = vec![lib, records, store, execute, user];
        let krate = Crate::new(&sources);
        let modules: HashSet<Vec<String>> = krate.files.keys().cloned().collect();
        let files: Vec<String> = refs_of(&sources[4], &modules)
            .iter()
            .map(|r| krate.file_of(&r.path, 0))
            .collect();
        assert_eq!(files, ["store/records.rs", "execute.rs", "lib.rs"]);
    }

    #[test]
    fn files_that_reach_each_other_round_are_a_circle_and_two_using_each_other_are_not() {
        let e = |a: &str, b: &str| ((a.to_string(), b.to_string()), 1);
        let g = FileGraph {
            files: ["a.rs", "b.rs", "c.rs", "d.rs"].map(String::from).to_vec(),
            edges: [
                e("a.rs", "b.rs"),
                e("b.rs", "a.rs"),
                e("b.rs", "c.rs"),
                e("c.rs", "d.rs"),
                e("d.rs", "b.rs"),
            ]
            .into_iter()
            .collect(),
        };
        let all = ["a.rs", "b.rs", "c.rs", "d.rs"].map(String::from).to_vec();
        assert_eq!(long_circles(&g), vec![all]);
        let two = FileGraph {
            files: g.files.clone(),
            edges: [e("a.rs", "b.rs"), e("b.rs", "a.rs"), e("c.rs", "b.rs")]
                .into_iter()
                .collect(),
        };
        assert!(long_circles(&two).is_empty());
        let layers: HashMap<String, usize> = [("a.rs".to_string(), 0), ("b.rs".into(), 1)]
            .into_iter()
            .collect();
        assert_eq!(
            upward(&g, &layers),
            vec![("a.rs".to_string(), 1, "b.rs".to_string())]
        );
    }
}
