//! No import loops between the crate's modules (docs/design.md §3.4).
//!
//! The module tree is built from src/lib.rs by following `mod x;` declarations (with their
//! `#[path]` attributes); `#[cfg(test)]` items are skipped, and so are the files only they
//! declare. Every reference from a module's non-test code to another module — a leaf of
//! `use crate::…`, `use super::…`, `use self::…`, or an inline path such as
//! `crate::credentials::Password` — is resolved to the file of the deepest module it names.
//! A file and its descendants are one unit at its parent's level: an edge joins the two
//! children of the deepest module its ends share, and an edge between a module and its own
//! descendant does not count. Any strongly connected component of more than one unit fails
//! the test. Comments (doc comments included) and string literals are blanked first.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[path = "module_cycles/source.rs"]
mod source;

use source::{Parsed, Token, blank, is_ident, parse, use_tree};

/// A module path from the crate root (`["k8s", "status"]`).
type Module = Vec<String>;

/// A reference from a file's line to another file.
struct Edge {
    from: usize,
    line: usize,
    to: usize,
    text: String,
}

/// The crate's files, each with its module, tokens and text, and where each module is.
struct Crate {
    root: PathBuf,
    files: Vec<(PathBuf, Module, Parsed, String)>,
    modules: BTreeMap<Module, usize>,
}

fn load(root: &Path) -> Crate {
    load_from(root, "src/lib.rs")
}

/// The crate whose root file is `root`/`entry` (`src/lib.rs`, or a binary's `src/main.rs`).
fn load_from(root: &Path, entry: &str) -> Crate {
    let mut krate = Crate {
        root: root.to_owned(),
        files: Vec::new(),
        modules: BTreeMap::new(),
    };
    let mut queue = vec![(root.join(entry), Module::new(), true)];
    while let Some((file, module, mod_rs)) = queue.pop() {
        let src = fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{} is declared but unreadable: {e}", file.display()));
        let parsed = parse(&src);
        let index = krate.files.len();
        krate.modules.insert(module.clone(), index);
        for inline in &parsed.inline {
            krate
                .modules
                .insert([module.clone(), inline.clone()].concat(), index);
        }
        let dir = file.parent().unwrap_or(root).to_owned();
        for (inline, name, path_attr) in &parsed.declared {
            let child = [module.clone(), inline.clone(), vec![name.clone()]].concat();
            if let Some(path) = path_attr {
                queue.push((dir.join(path), child, true));
                continue;
            }
            let mut base = dir.clone();
            if !mod_rs {
                base.push(file.file_stem().unwrap_or_default());
            }
            base.extend(inline);
            let flat = base.join(format!("{name}.rs"));
            let mod_rs = !flat.exists();
            let path = if mod_rs {
                base.join(name).join("mod.rs")
            } else {
                flat
            };
            queue.push((path, child, mod_rs));
        }
        krate.files.push((file, module, parsed, src));
    }
    krate
}

/// The deepest module a path names, and whether the whole path is modules: `segments` start
/// with `crate`, `self`, `super`, a child module of `current` or an alias; `None` for any
/// other crate's path.
fn resolve(
    krate: &Crate,
    current: &[String],
    aliases: &BTreeMap<String, Module>,
    segments: &[String],
) -> Option<(Module, bool)> {
    let (first, rest) = segments.split_first()?;
    let mut module = match first.as_str() {
        "crate" => Module::new(),
        "self" => current.to_vec(),
        "super" => current[..current.len().checked_sub(1)?].to_vec(),
        name => {
            let child = [current, &[name.to_owned()]].concat();
            if krate.modules.contains_key(&child) {
                child
            } else {
                aliases.get(name)?.clone()
            }
        }
    };
    let mut consumed = 0;
    for segment in rest {
        if segment == "super" {
            module.pop();
        } else if segment != "self" {
            let deeper = [module.clone(), vec![segment.clone()]].concat();
            if !krate.modules.contains_key(&deeper) {
                break;
            }
            module = deeper;
        }
        consumed += 1;
    }
    Some((module, consumed == rest.len()))
}

/// Every reference from a non-test line of one file to another file.
fn edges(krate: &Crate) -> Vec<Edge> {
    let mut found = Vec::new();
    for (from, (_, module, parsed, src)) in krate.files.iter().enumerate() {
        let lines: Vec<&str> = src.lines().collect();
        let mut push = |line: usize, target: &[String]| {
            if let Some(&to) = krate.modules.get(target).filter(|&&to| to != from) {
                let text = lines.get(line - 1).map_or("", |l| l.trim()).to_owned();
                found.push(Edge {
                    from,
                    line,
                    to,
                    text,
                });
            }
        };
        let t: Vec<&Token> = parsed.tokens.iter().map(|(t, _)| t).collect();
        let context = |i: usize| [module.clone(), parsed.tokens[i].1.clone()].concat();
        let (mut aliases, mut in_use) = (BTreeMap::new(), vec![false; t.len()]);
        let mut i = 0;
        while i < t.len() {
            i += 1;
            if t[i - 1].text != "use" {
                continue;
            }
            let (start, mut leaves) = (i - 1, Vec::new());
            use_tree(&t, &mut i, Vec::new(), &mut leaves);
            for (segments, local) in leaves {
                let Some((target, whole)) = resolve(krate, &context(start), &aliases, &segments)
                else {
                    continue;
                };
                push(t[start].line, &target);
                if whole && !local.is_empty() {
                    aliases.insert(local, target);
                }
            }
            in_use[start..i.min(t.len())].fill(true);
        }
        for i in 0..t.len() {
            let after_path = i > 0 && (t[i - 1].text == "::" || t[i - 1].text == ".");
            let starts = is_ident(&t[i].text) && t.get(i + 1).is_some_and(|k| k.text == "::");
            if in_use[i] || after_path || !starts {
                continue;
            }
            let mut segments = vec![t[i].text.clone()];
            let mut j = i + 1;
            while t.get(j).is_some_and(|k| k.text == "::")
                && let Some(next) = t.get(j + 1).filter(|k| is_ident(&k.text))
            {
                segments.push(next.text.clone());
                j += 2;
            }
            if let Some((target, _)) = resolve(krate, &context(i), &aliases, &segments) {
                push(t[i].line, &target);
            }
        }
    }
    found
}

/// The two sibling units an edge joins (the children of the deepest module both ends share),
/// or `None` when one end is the other's ancestor.
fn units(from: &[String], to: &[String]) -> Option<(Module, Module)> {
    let shared = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    (shared < from.len() && shared < to.len())
        .then(|| (from[..=shared].to_vec(), to[..=shared].to_vec()))
}

/// Every unit `start` reaches in `graph`, itself included.
fn reach<'g>(
    graph: &'g BTreeMap<Module, BTreeSet<Module>>,
    start: &'g Module,
) -> BTreeSet<&'g Module> {
    let (mut seen, mut todo) = (BTreeSet::from([start]), vec![start]);
    while let Some(unit) = todo.pop() {
        for next in graph.get(unit).into_iter().flatten() {
            if seen.insert(next) {
                todo.push(next);
            }
        }
    }
    seen
}

fn shown(krate: &Crate, file: usize) -> String {
    let path = &krate.files[file].0;
    path.strip_prefix(&krate.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Each cycle: its units and the lines that join them.
fn cycles(krate: &Crate) -> Vec<String> {
    let all = edges(krate);
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut lines: BTreeMap<(Module, Module), BTreeSet<String>> = BTreeMap::new();
    for e in &all {
        let Some((a, b)) = units(&krate.files[e.from].1, &krate.files[e.to].1) else {
            continue;
        };
        graph.entry(b.clone()).or_default();
        graph.entry(a.clone()).or_default().insert(b.clone());
        let (from, to) = (shown(krate, e.from), shown(krate, e.to));
        let line = format!("  {from}:{} → {to}: {}", e.line, e.text);
        lines.entry((a, b)).or_default().insert(line);
    }
    let reached: BTreeMap<&Module, BTreeSet<&Module>> = graph
        .keys()
        .map(|unit| (unit, reach(&graph, unit)))
        .collect();
    let mut components = BTreeSet::new();
    for (unit, from_it) in &reached {
        let component: BTreeSet<&Module> = from_it
            .iter()
            .filter(|other| reached[*other].contains(unit))
            .copied()
            .collect();
        if component.len() > 1 {
            components.insert(component);
        }
    }
    let name = |m: &Module| {
        ["crate".to_owned()]
            .iter()
            .chain(m)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut report = Vec::new();
    for component in components {
        let names: Vec<String> = component.iter().map(|m| name(m).join("::")).collect();
        let mut text = format!("cycle between {}:\n", names.join(", "));
        for ((a, b), joined) in &lines {
            if component.contains(a) && component.contains(b) {
                text.extend(joined.iter().map(|l| format!("{l}\n")));
            }
        }
        report.push(text);
    }
    report
}

fn krate() -> Crate {
    load(Path::new(env!("CARGO_MANIFEST_DIR")))
}

#[test]
fn the_module_tree_follows_path_attributes_and_skips_tests() {
    let krate = krate();
    let file = |module: &[&str]| {
        let key: Module = module.iter().map(|s| s.to_string()).collect();
        krate.modules.get(&key).map(|&f| shown(&krate, f))
    };
    let plan = file(&["k8s", "driver_cache", "plan"]);
    assert_eq!(plan.as_deref(), Some("src/k8s/driver_cache_plan.rs"));
    assert_eq!(
        file(&["backend", "cns", "about"]).as_deref(),
        Some("src/backend/cns/about.rs")
    );
    assert_eq!(
        file(&["registrar", "reason"]).as_deref(),
        Some("src/registrar/mod.rs")
    );
    assert!(
        file(&["registrar", "tests"]).is_none(),
        "a #[cfg(test)] module was followed"
    );
    assert!(
        krate
            .files
            .iter()
            .all(|(f, ..)| !f.to_string_lossy().ends_with("tests.rs"))
    );
    assert!(
        krate.files.len() > 60,
        "only {} files found",
        krate.files.len()
    );
}

#[test]
fn comments_and_strings_are_not_references() {
    let src = "/// crate::a::B\n//! use crate::a;\nfn f() { let s = \"crate::a\"; let c = '\"'; }\n\
               /* crate::a /* nested */ crate::a */ fn g<'a>(x: &'a str) -> crate::b::C {\n\
               let q = '\\''; r#\"crate::a\"# }\n";
    let code = String::from_utf8(blank(src)).unwrap_or_default();
    assert_eq!(code.len(), src.len());
    assert_eq!(code.lines().count(), src.lines().count());
    assert_eq!(code.matches("crate").count(), 1, "{code}");
    assert!(code.contains("-> crate::b::C"), "{code}");
    let m = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Module>();
    assert_eq!(units(&m(&["a", "b"]), &m(&["a"])), None);
    let joined = units(&m(&["a", "b", "x"]), &m(&["a", "c"]));
    assert_eq!(joined, Some((m(&["a", "b"]), m(&["a", "c"]))));
}

#[test]
fn the_benchmarks_have_no_import_cycle_either() {
    let bench = load_from(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("bench"),
        "src/main.rs",
    );
    assert!(
        bench.files.len() > 10,
        "the bench crate's modules were found: {}",
        bench.files.len()
    );
    let found = cycles(&bench);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_module_imports_itself_through_another() {
    let found = cycles(&krate());
    assert!(
        found.is_empty(),
        "{} import cycle(s) between modules; move what both sides need into the module that \
         owns it (docs/design.md §3.4):\n{}",
        found.len(),
        found.join("\n")
    );
}
