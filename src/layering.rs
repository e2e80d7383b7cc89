//! The top-level modules depend on each other in one direction only: read from the `crate::`
//! paths of every source file, the graph of modules has no cycle, and the modules that keep
//! what jobs may trust (`freshness`, `queue`) reach no module that does I/O. A new import
//! that closes a cycle fails here, naming the files that make it.

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

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names `text` reaches through `crate::` paths, grouped imports included
/// (`crate::{a::b, c}` reaches `a` and `c`). Comment lines are skipped.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        // `copyrator_core::...` or `my_crate::` are other paths.
        let prev = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item_start) = (1, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if item_start && (c.is_ascii_alphabetic() || c == '_') && depth == 1 => {
                        found.insert(ident(&group[i..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest).to_string());
        }
    }
    found
}

/// Each top-level module's uses of the others, with a file that makes each.
fn graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let rust = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        if rust && name != "lib" && name != "main" {
            modules.insert(name, path);
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (name, path) in &modules {
        let mut files = Vec::new();
        rust_files(path, &mut files);
        let mut uses = BTreeMap::new();
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            for used in crate_refs(&text) {
                if used != *name && names.contains(&used) {
                    let shown = file.strip_prefix(&src).unwrap().display().to_string();
                    uses.entry(used).or_insert(shown);
                }
            }
        }
        graph.insert(name.clone(), uses);
    }
    graph
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

#[test]
fn top_level_modules_have_no_import_cycle() {
    let graph = graph();
    assert!(
        graph.len() > 10,
        "the modules are found: {:?}",
        graph.keys()
    );
    if let Some(found) = cycle(&graph) {
        let steps: Vec<String> = found
            .windows(2)
            .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]]))
            .collect();
        panic!("import cycle:\n  {}", steps.join("\n  "));
    }
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
fn grouped_nested_and_inline_paths_are_read() {
    let text = "use crate::{\n    a::{b, c::{d}},\n    e,\n};\n// crate::commented\nlet x = crate::f::g();\nuse copyrator_core::h;\n";
    let found: Vec<_> = crate_refs(text).into_iter().collect();
    assert_eq!(found, ["a", "e", "f"]);
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
