//! Modules depend on each other in one direction only, at every level: read from the paths
//! of every source file (`crate::`, `super::`, `self::`, re-exports followed to the module that
//! defines a name), the files and submodules of each folder, in `src/` and in the core crate
//! (`crates/copyrator-core/src`), use each other without a cycle. The modules that keep what
//! jobs may trust (`freshness`, `queue`) reach no module that does I/O. A new import that
//! closes a cycle fails here, naming the files that make it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Modules that may use nothing but these (besides the core crate and themselves).
const LEAVES: [(&str, &[&str]); 2] = [
    ("freshness", &["metrics", "queue"]),
    ("queue", &["metrics"]),
];

/// The one-off commands: siblings that only `main` starts. Nothing in the library imports
/// them, so what they share lives where the service has it too (`cluster`, `cli`).
const ONE_OFF: [&str; 3] = ["explain", "migrate", "manifests"];

/// Crates that do I/O, which the modules keeping what jobs may trust never name.
const IO_CRATES: [&str; 5] = ["kube::", "hyper::", "axum::", "tokio::net", "hyper_util::"];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Rust source with comments, strings and character literals blanked out (newlines kept), so
/// that what is left is code: paths and braces are read from it alone.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (i == 0
                || !ident(chars[i - 1])
                || (chars[i - 1] == 'b' && (i < 2 || !ident(chars[i - 2]))))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote right after one character).
            i += if next == Some('\\') { 3 } else { 2 };
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The words and punctuation of code: identifiers (numbers too), `::`, and single characters.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            let mut end = at + c.len_utf8();
            while let Some(&(i, n)) = chars.peek() {
                if !(n.is_ascii_alphanumeric() || n == '_') {
                    break;
                }
                end = i + n.len_utf8();
                chars.next();
            }
            out.push(code[at..end].to_string());
        } else if c == ':' && chars.peek().is_some_and(|&(_, n)| n == ':') {
            chars.next();
            out.push("::".to_string());
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// A `use` tree from `tokens[*at]` on: each imported path with the name it takes in the
/// importing module (`a::{self, b as c}` gives `a` as `a`, `a::b` as `c`); globs give none.
fn use_tree(
    tokens: &[String],
    at: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(*at).map(String::as_str) {
            Some("::") => *at += 1,
            Some("{") => {
                *at += 1;
                while tokens.get(*at).is_some_and(|t| t != "}") {
                    use_tree(tokens, at, &path, out);
                    if tokens.get(*at).is_some_and(|t| t == ",") {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            Some("*") => {
                *at += 1;
                out.push((path, "*".to_string()));
                return;
            }
            Some("self") if !path.is_empty() => *at += 1,
            Some(t) if is_ident(t) && t != "as" => {
                path.push(t.to_string());
                *at += 1;
            }
            _ => break,
        }
    }
    let mut name = path.last().cloned().unwrap_or_default();
    if tokens.get(*at).is_some_and(|t| t == "as") {
        name = tokens.get(*at + 1).cloned().unwrap_or_default();
        *at += 2;
    }
    if !path.is_empty() {
        out.push((path, name));
    }
}

/// What one file names: the `use` imports (with the module they are in and the name they
/// take there) and every `crate::`, `super::` or `self::` path, unresolved.
#[derive(Default)]
struct Named {
    /// Modules declared inline (`mod tests { … }`), as paths from the file's module.
    inline: Vec<Vec<String>>,
    /// Child modules in files that only tests compile (`#[cfg(test)] mod tests;`).
    test_children: Vec<String>,
    /// (the module it is in, the path, the name it takes).
    imports: Vec<(Vec<String>, Vec<String>, String)>,
    /// (the module it is in, the path).
    paths: Vec<(Vec<String>, Vec<String>)>,
}

/// Whether the item at `tokens[at]` (`mod`, `use`) is compiled for tests only.
fn test_only(tokens: &[String], at: usize) -> bool {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut start = at;
    if start >= 4 && tokens[start - 4..start] == ["pub", "(", "crate", ")"] {
        start -= 4;
    } else if start >= 1 && tokens[start - 1] == "pub" {
        start -= 1;
    }
    start >= CFG_TEST.len() && tokens[start - CFG_TEST.len()..start] == CFG_TEST
}

/// What a file's code names; what only its tests use (`#[cfg(test)]` modules and imports) is
/// left out: a test may build its inputs with a module above the one it tests.
fn named(text: &str, module: &[String]) -> Named {
    let tokens = tokens(&code_only(text));
    let mut found = Named::default();
    // Inline modules, with the brace depth that closes each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    // The depth that closes the `#[cfg(test)]` module we are in.
    let mut in_test: Option<usize> = None;
    let mut i = 0;
    while i < tokens.len() {
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let token = tokens[i].as_str();
        let prev = i.checked_sub(1).map(|p| tokens[p].as_str());
        match token {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                if in_test == Some(depth) {
                    in_test = None;
                }
                depth -= 1;
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                depth += 1;
                inline.push((tokens[i + 1].clone(), depth));
                if in_test.is_none() && test_only(&tokens, i) {
                    in_test = Some(depth);
                }
                let mut declared = here[module.len()..].to_vec();
                declared.push(tokens[i + 1].clone());
                found.inline.push(declared);
                i += 3;
                continue;
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == ";") && test_only(&tokens, i) => {
                found.test_children.push(tokens[i + 1].clone());
            }
            "use" if in_test.is_some() || test_only(&tokens, i) => {}
            "crate" | "super" | "self" if in_test.is_some() => {}
            "use" => {
                let mut at = i + 1;
                let mut trees = Vec::new();
                use_tree(&tokens, &mut at, &[], &mut trees);
                for (path, name) in trees {
                    found.imports.push((here.clone(), path, name));
                }
                i = at;
                continue;
            }
            "crate" | "super" | "self"
                if tokens.get(i + 1).is_some_and(|t| t == "::")
                    && prev != Some("::")
                    && prev != Some("in") =>
            {
                let mut path = vec![token.to_string()];
                let mut at = i + 1;
                while tokens.get(at).is_some_and(|t| t == "::")
                    && tokens.get(at + 1).is_some_and(|t| is_ident(t))
                {
                    path.push(tokens[at + 1].clone());
                    at += 2;
                }
                found.paths.push((here.clone(), path));
                i = at;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The module a source file is, from its path below the crate's `src/`.
fn file_module(relative: &Path) -> Vec<String> {
    let mut module: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().to_string())
        .collect();
    if let Some(last) = module.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && !(module.is_empty() && stem == "lib") {
            module.push(stem.to_string());
        }
    }
    module
}

/// One crate's import graphs: for each folder (the module path of a module that has files
/// below it; the crate's root is `[]`), each of its files' or submodules' uses of the others,
/// with a file that makes each (its path from the repository).
type Graphs = BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>>;

fn graphs(repo: &Path, crate_src: &str) -> Graphs {
    let src = repo.join(crate_src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut sources = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if relative == Path::new("main.rs") {
            continue; // the binary is another crate; it reaches the library by its name
        }
        let module = file_module(relative);
        let text = fs::read_to_string(&file).unwrap();
        let named = named(&text, &module);
        let shown = file.strip_prefix(repo).unwrap().display().to_string();
        sources.push((shown, module, named));
    }
    let tests: Vec<Vec<String>> = sources
        .iter()
        .flat_map(|(_, module, named)| {
            named.test_children.iter().map(|child| {
                let mut test = module.clone();
                test.push(child.clone());
                test
            })
        })
        .collect();
    sources.retain(|(_, module, _)| !tests.iter().any(|test| module.starts_with(test)));
    let file_modules: BTreeSet<Vec<String>> = sources.iter().map(|(_, m, _)| m.clone()).collect();
    let mut modules = file_modules.clone();
    for (_, module, named) in &sources {
        for inline in &named.inline {
            modules.insert(module.iter().chain(inline).cloned().collect());
        }
    }
    // A path as written in module `at`, from the crate's root; `None` for other crates'.
    let resolve = |at: &[String], path: &[String]| -> Option<Vec<String>> {
        let mut base = at.to_vec();
        let mut rest = path;
        match path.first().map(String::as_str)? {
            "crate" => {
                base.clear();
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let mut child = at.to_vec();
                child.push(first.to_string());
                if !modules.contains(&child) {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    };
    // What each imported name stands for, so that a path through a re-export (`super::Thing`
    // where `mod.rs` says `pub use watch::Thing`) reaches the module that defines it.
    let mut aliases: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (_, _, named) in &sources {
        for (at, path, name) in &named.imports {
            if let Some(target) = resolve(at, path).filter(|_| name != "*") {
                let mut alias = at.clone();
                alias.push(name.clone());
                if alias != target {
                    aliases.insert(alias, target);
                }
            }
        }
    }
    let canonical = |mut path: Vec<String>| -> Vec<String> {
        for _ in 0..8 {
            let Some(k) = (1..=path.len())
                .rev()
                .find(|&k| aliases.contains_key(&path[..k]))
            else {
                break;
            };
            let mut target = aliases[&path[..k]].clone();
            target.extend(path[k..].iter().cloned());
            path = target;
        }
        path
    };
    let mut graphs = Graphs::new();
    for folder in &file_modules {
        let nodes: BTreeMap<String, BTreeMap<String, String>> = file_modules
            .iter()
            .filter(|m| m.len() > folder.len() && m.starts_with(folder))
            .map(|m| (m[folder.len()].clone(), BTreeMap::new()))
            .collect();
        if !nodes.is_empty() {
            graphs.insert(folder.clone(), nodes);
        }
    }
    for (shown, module, named) in &sources {
        let written = named
            .imports
            .iter()
            .map(|(at, path, _)| (at, path))
            .chain(named.paths.iter().map(|(at, path)| (at, path)));
        for (at, path) in written {
            let Some(target) = resolve(at, path).map(&canonical) else {
                continue;
            };
            for depth in 0..module.len() {
                let (folder, node) = (&module[..depth], &module[depth]);
                let Some(graph) = graphs.get_mut(folder) else {
                    continue;
                };
                let used = match target.get(depth) {
                    Some(used) if target.starts_with(folder) && used != node => used,
                    _ => continue,
                };
                if graph.contains_key(used) {
                    graph
                        .get_mut(node)
                        .unwrap()
                        .entry(used.clone())
                        .or_insert_with(|| shown.clone());
                }
            }
        }
    }
    graphs
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level modules of `src/`: each one's uses of the others, with a file that makes each.
fn graph() -> BTreeMap<String, BTreeMap<String, String>> {
    graphs(repo(), "src").remove(&Vec::new()).unwrap()
}

/// A cycle through `graph`, if there is one: the modules in order, the first repeated last.
fn cycle(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeMap<String, String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|n| n == node) {
            let mut found = path[i..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|u| u.keys()) {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(graph, start, &mut Vec::new(), &mut done))
}

/// Every circle of each folder's graph: one cycle through each set of files or modules that
/// reach each other, written `folder: a -> b (the file that makes it) -> a (…)`.
fn circles(graphs: &Graphs, crate_src: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (folder, graph) in graphs {
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.to_string()];
            while let Some(node) = todo.pop() {
                for next in graph[&node].keys() {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, BTreeSet<String>> =
            graph.keys().map(|node| (node, reach(node))).collect();
        let mut placed = BTreeSet::new();
        for node in graph.keys() {
            if placed.contains(node) || !reaches[node].contains(node) {
                continue;
            }
            let members: BTreeSet<&String> = graph
                .keys()
                .filter(|other| reaches[node].contains(*other) && reaches[*other].contains(node))
                .collect();
            placed.extend(members.iter().map(|m| (*m).clone()));
            let within: BTreeMap<String, BTreeMap<String, String>> = members
                .iter()
                .map(|m| {
                    let uses = graph[*m]
                        .iter()
                        .filter(|(used, _)| members.contains(used))
                        .map(|(used, file)| (used.clone(), file.clone()))
                        .collect();
                    ((*m).clone(), uses)
                })
                .collect();
            if let Some(cycle) = cycle(&within) {
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("{} -> {} ({})", w[0], w[1], within[&w[0]][&w[1]]))
                    .collect();
                let place = std::iter::once(crate_src.to_string())
                    .chain(folder.iter().cloned())
                    .collect::<Vec<_>>()
                    .join("/");
                let names: Vec<&str> = members.iter().map(|m| m.as_str()).collect();
                found.push(format!(
                    "{place}/ ({}): {}",
                    names.join(", "),
                    steps.join(", ")
                ));
            }
        }
    }
    found
}

#[test]
fn no_folder_has_an_import_cycle() {
    let mut found = Vec::new();
    for crate_src in ["src", "crates/copyrator-core/src"] {
        let graphs = graphs(repo(), crate_src);
        assert!(
            graphs[&Vec::new()].len() > 10,
            "{crate_src}'s modules are found: {:?}",
            graphs[&Vec::new()].keys()
        );
        found.extend(circles(&graphs, crate_src));
    }
    assert!(
        found.is_empty(),
        "{} import cycles:\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

#[test]
fn freshness_and_queue_reach_no_module_that_does_io() {
    let graph = graph();
    for (module, allowed) in LEAVES {
        let extra: Vec<String> = graph[module]
            .iter()
            .filter(|(used, _)| !allowed.contains(&used.as_str()))
            .map(|(used, file)| format!("{used} (in {file})"))
            .collect();
        assert!(extra.is_empty(), "{module} uses {extra:?}");
    }
}

#[test]
fn cluster_queues_nothing() {
    // What an event or a read asks for is the dispatcher's and the jobs' to decide: the I/O
    // layer hands events over and queues no job itself.
    let graph = graph();
    assert!(
        !graph["cluster"].contains_key("queue"),
        "cluster uses queue (in {})",
        graph["cluster"]["queue"]
    );
}

#[test]
fn nothing_imports_a_one_off_command() {
    let graph = graph();
    for (module, uses) in &graph {
        for command in ONE_OFF {
            assert!(
                !uses.contains_key(command),
                "{module} imports the one-off command {command} (in {})",
                uses[command]
            );
        }
    }
}

#[test]
fn freshness_and_queue_name_no_io_crate() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, _) in LEAVES {
        let mut files = Vec::new();
        for path in [src.join(module), src.join(format!("{module}.rs"))] {
            if path.exists() {
                rust_files(&path, &mut files);
            }
        }
        assert!(!files.is_empty(), "{module}'s files are found");
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for io in IO_CRATES {
                    assert!(!line.contains(io), "{} names {io}: {line}", file.display());
                }
            }
        }
    }
}

#[test]
fn grouped_nested_relative_and_re_exported_paths_are_read() {
    let text = "use crate::{\n    a::{b, c::{d}},\n    e as f,\n};\n// crate::commented\nlet s = \"crate::quoted\";\nlet x = crate::g::h();\nuse copyrator_core::i;\nmod tests { use super::super::j; }\n";
    let found = named(text, &["m".to_string()]);
    let imports: Vec<_> = found
        .imports
        .iter()
        .map(|(at, path, name)| format!("{}: {} as {name}", at.join("::"), path.join("::")))
        .collect();
    assert_eq!(
        imports,
        [
            "m: crate::a::b as b",
            "m: crate::a::c::d as d",
            "m: crate::e as f",
            "m: copyrator_core::i as i",
            "m::tests: super::super::j as j",
        ]
    );
    let paths: Vec<_> = found.paths.iter().map(|(_, p)| p.join("::")).collect();
    assert_eq!(paths, ["crate::g::h"]);
    assert_eq!(found.inline, [vec!["tests".to_string()]]);
    assert_eq!(
        code_only("let c = '{'; let l: &'a str = r#\"}\"#;"),
        "let c = ' '; let l: &'a str = \"\";"
    );
    let graph = BTreeMap::from([
        (
            "x".to_string(),
            BTreeMap::from([("y".to_string(), "x.rs".to_string())]),
        ),
        (
            "y".to_string(),
            BTreeMap::from([("x".to_string(), "y.rs".to_string())]),
        ),
    ]);
    assert_eq!(
        cycle(&graph),
        Some(vec!["x".into(), "y".into(), "x".into()])
    );
}

#[test]
fn a_cycle_through_a_re_export_is_found() {
    let repo = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let folder = repo.join("src/f");
    fs::create_dir_all(&folder).unwrap();
    fs::write(repo.join("src/lib.rs"), "mod f;\n").unwrap();
    fs::write(folder.join("mod.rs"), "mod a;\nmod b;\npub use a::Thing;\n").unwrap();
    fs::write(
        folder.join("a.rs"),
        "use super::b::helper;\npub struct Thing;\n",
    )
    .unwrap();
    fs::write(
        folder.join("b.rs"),
        "use super::Thing;\npub fn helper() {}\n",
    )
    .unwrap();
    let found = circles(&graphs(&repo, "src"), "src");
    fs::remove_dir_all(&repo).unwrap();
    assert_eq!(
        found,
        ["src/f/ (a, b): a -> b (src/f/a.rs), b -> a (src/f/b.rs)"]
    );
}
