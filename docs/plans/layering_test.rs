//! The layers of nacre-mds (issue 42 item 1; docs/plans/mds-layers.md): every file of `src/`
//! belongs to one layer of [`LAYERS`] (the table [`FILES`]), and may use the `crate::` items
//! of its own layer and of the layers below it, never those of a layer above. No circle of
//! more than two files imports itself round (a file and the one holding its state may use
//! each other; three or more in a ring may not).
//!
//! The sources are read as text, with comments and string and character literals blanked
//! first: `use` trees (grouped, nested, `self`, globs, `as`), inline paths (`crate::a::b`,
//! `super::x`, resolved from the file's module and any inline module it is in), and the
//! names a file has in scope for a module of the crate (`mod x;`, a `use` of a module, a
//! glob of the crate root) followed by `::`. A path is charged to the file of its longest
//! prefix that is a module; a path to an item of the crate root is charged to the file the
//! root re-exports it from (or to `lib.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: &[&str] = &["base", "store", "target", "ops", "services", "handler"];

/// Every file of `src/` (its path below `src/`) and its layer.
const FILES: &[(&str, &str)] = &[
    // base: types with no `crate::` imports.
    ("destroy_space.rs", "base"),
    ("export.rs", "base"),
    ("fileset_cache.rs", "base"),
    ("flocks.rs", "base"),
    ("nodemap.rs", "base"),
    ("osp.rs", "base"),
    ("sizes.rs", "base"),
    ("stats.rs", "base"),
    // store: the KV store, its records and formats, transactions, allocators.
    ("records.rs", "store"),
    ("store/mod.rs", "store"),
    ("store/open.rs", "store"),
    ("store/tx.rs", "store"),
    // target: one MDT (the store and the in-memory state every layer above shares).
    ("atime.rs", "target"),
    ("changelog_writer.rs", "target"),
    ("mdt.rs", "target"),
    ("peers.rs", "target"),
    ("replay.rs", "target"),
    // ops: the operations, local and cross-MDT.
    ("dne.rs", "ops"),
    ("links.rs", "ops"),
    ("migrate.rs", "ops"),
    ("ops/create.rs", "ops"),
    ("ops/dir_stripe.rs", "ops"),
    ("ops/getattr.rs", "ops"),
    ("ops/layout.rs", "ops"),
    ("ops/link.rs", "ops"),
    ("ops/link_remote.rs", "ops"),
    ("ops/lookup.rs", "ops"),
    ("ops/mkdir.rs", "ops"),
    ("ops/mkdir_remote.rs", "ops"),
    ("ops/mkdir_striped.rs", "ops"),
    ("ops/mod.rs", "ops"),
    ("ops/open.rs", "ops"),
    ("ops/readdir.rs", "ops"),
    ("ops/readlink.rs", "ops"),
    ("ops/remote_update.rs", "ops"),
    ("ops/rename.rs", "ops"),
    ("ops/rename_remote.rs", "ops"),
    ("ops/rmdir.rs", "ops"),
    ("ops/rmdir_remote.rs", "ops"),
    ("ops/rmdir_striped.rs", "ops"),
    ("ops/scan.rs", "ops"),
    ("ops/setattr.rs", "ops"),
    ("ops/symlink.rs", "ops"),
    ("ops/unlink.rs", "ops"),
    ("ops/unlink_remote.rs", "ops"),
    ("ops/xattr.rs", "ops"),
    // services: eviction, locks glue, changelog consumers, destroys, file migration, quotas,
    // QoS, permission checks.
    ("admin_records.rs", "services"),
    ("changelog.rs", "services"),
    ("destroy.rs", "services"),
    ("eviction.rs", "services"),
    ("locks.rs", "services"),
    ("owners.rs", "services"),
    ("perm.rs", "services"),
    ("qos.rs", "services"),
    ("quota.rs", "services"),
    ("relayout.rs", "services"),
    // handler: the request handler.
    ("capas.rs", "handler"),
    ("execute.rs", "handler"),
    ("fileset.rs", "handler"),
    ("flock_serve.rs", "handler"),
    ("lib.rs", "handler"),
    ("route.rs", "handler"),
];

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
                        } else if abs.len() > 1 && modules.contains(&abs[..abs.len() - 1].to_vec())
                        {
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
            if let Some(f) = self.files.get(&path[..k].to_vec()) {
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

/// The shortest way from `from` to `to` that does not take the edge `from → to` itself.
fn way_back(adj: &[BTreeSet<usize>], from: usize, to: usize) -> Option<Vec<usize>> {
    let mut prev: Vec<Option<usize>> = vec![None; adj.len()];
    let mut seen = vec![false; adj.len()];
    let mut queue = VecDeque::new();
    seen[from] = true;
    queue.push_back(from);
    while let Some(n) = queue.pop_front() {
        for &m in &adj[n] {
            if (n == from && m == to) || seen[m] {
                continue;
            }
            seen[m] = true;
            prev[m] = Some(n);
            if m == to {
                let mut path = vec![to];
                let mut cur = to;
                while let Some(p) = prev[cur] {
                    path.push(p);
                    cur = p;
                }
                path.reverse();
                return Some(path);
            }
            queue.push_back(m);
        }
    }
    None
}

fn source(rel: &str, text: &str) -> Source {
    Source {
        rel: rel.to_string(),
        module: module_of(rel),
        tokens: tokens(&blank(text)),
    }
}

fn shown(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        format!("crate::{}", path.join("::"))
    }
}

#[test]
fn layers_import_only_downward_and_files_form_no_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    collect(&src, &mut paths);
    let mut sources = Vec::new();
    for p in &paths {
        let rel = p
            .strip_prefix(&src)
            .expect("below src")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let text =
            std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        sources.push(source(&rel, &text));
    }
    assert!(
        sources.iter().any(|s| s.rel == "lib.rs"),
        "no src/lib.rs under {}",
        src.display()
    );

    let mut errors: Vec<String> = Vec::new();
    // The table: known layers, each file once, every file in it and every entry a file.
    let mut layer_of: HashMap<&str, usize> = HashMap::new();
    for (file, layer) in FILES {
        match LAYERS.iter().position(|l| l == layer) {
            Some(i) => {
                if layer_of.insert(*file, i).is_some() {
                    errors.push(format!("FILES lists src/{file} twice"));
                }
            }
            None => errors.push(format!(
                "FILES gives src/{file} the unknown layer {layer:?}"
            )),
        }
    }
    let on_disk: HashSet<&str> = sources.iter().map(|s| s.rel.as_str()).collect();
    for s in &sources {
        if !layer_of.contains_key(&s.rel.as_str()) {
            errors.push(format!(
                "src/{} is in no layer: add it to FILES in tests/layers.rs",
                s.rel
            ));
        }
    }
    for (file, _) in FILES {
        if !on_disk.contains(file) {
            errors.push(format!("FILES lists src/{file}, which does not exist"));
        }
    }

    // Every reference, checked against the layers; the file graph for the circles.
    let krate = Crate::new(&sources);
    let modules: HashSet<Vec<String>> = krate.files.keys().cloned().collect();
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for s in &sources {
        for r in refs_of(s, &modules) {
            let target = krate.file_of(&r.path, 0);
            if target == s.rel {
                continue;
            }
            edges.insert((s.rel.clone(), target.clone()));
            let (Some(&from), Some(&to)) = (
                layer_of.get(&s.rel.as_str()),
                layer_of.get(&target.as_str()),
            ) else {
                continue;
            };
            if to > from {
                errors.push(format!(
                    "src/{}:{}: {} (layer {}) uses {} of src/{} (layer {}, higher)",
                    s.rel,
                    r.line,
                    s.rel,
                    LAYERS[from],
                    shown(&r.path),
                    target,
                    LAYERS[to]
                ));
            }
        }
    }

    let names: Vec<&str> = sources.iter().map(|s| s.rel.as_str()).collect();
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut adj: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); names.len()];
    for (a, b) in &edges {
        if let (Some(&i), Some(&j)) = (index.get(&a.as_str()), index.get(&b.as_str())) {
            adj[i].insert(j);
        }
    }
    let mut circles: BTreeSet<Vec<usize>> = BTreeSet::new();
    for (u, outs) in adj.iter().enumerate() {
        for &v in outs {
            // u → v and a way back from v to u other than v → u: a circle of three or more.
            let Some(back) = way_back(&adj, v, u) else {
                continue;
            };
            let mut members = back.clone();
            members.sort_unstable();
            if circles.insert(members) {
                let mut ring = vec![names[u]];
                ring.extend(back.iter().map(|&i| names[i]));
                errors.push(format!(
                    "a circle of {} files: {}",
                    back.len(),
                    ring.join(" -> ")
                ));
            }
        }
    }

    assert!(
        errors.is_empty(),
        "{} layering problem(s) in nacre-mds (docs/plans/mds-layers.md):\n{}",
        errors.len(),
        errors.join("\n")
    );
}

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
