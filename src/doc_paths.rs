//! Every repository path named in a comment or a document exists: a comment that points at a
//! file that moved sends the reader nowhere, and nothing else would notice. Scans the comments
//! of the Rust sources, of the YAML under `deploy/` (the chart's templates and values) and of
//! the scripts, and the project's Markdown, for paths under the repository's top-level folders
//! (`src/…rs`, `docs/…md`, `tests/e2e/`), and the targets of relative Markdown links.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// The top-level folders a named path starts with.
const ROOTS: [&str; 7] = [
    "src/", "crates/", "tests/", "docs/", "deploy/", "scripts/", "benches/",
];

/// Folders whose Rust files have their comments read.
const CODE: [&str; 4] = ["src", "crates", "tests", "benches"];

/// Markdown read whole: every file under `docs/`, and these.
const MARKDOWN: [&str; 5] = [
    "README.md",
    "BENCHMARKS.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "deploy/helm/copyrator/README.md",
];

fn files(path: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            files(&entry, ext, out);
        }
    } else if path.extension().is_some_and(|e| e == ext) {
        out.push(path.to_path_buf());
    }
}

/// The comment text of a line of Rust: after a leading `//` (`///`, `//!`), or after a
/// trailing ` // `. Strings holding ` // ` are rare enough to read as comments.
fn comment(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix("//") {
        return Some(rest);
    }
    line.find(" // ").map(|at| &line[at + 4..])
}

/// Folders whose YAML, Helm template and shell files have their `#` comments read (and the
/// templates' `{{/* … */}}` ones), with those files' endings.
const HASH_COMMENTED: [(&str, &[&str]); 2] =
    [("deploy", &["yaml", "yml", "tpl"]), ("scripts", &["sh"])];

/// The comment text of a line of YAML, shell or a Helm template: after a leading `#`, after a
/// ` #`, or after a template's `{{/*` (`{{- /*`).
fn hash_comment(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix('#') {
        return Some(rest);
    }
    if let Some(at) = line
        .find("/*")
        .filter(|&at| line[..at].trim_end().ends_with(['{', '-']))
    {
        return Some(&line[at + 2..]);
    }
    line.find(" #").map(|at| &line[at + 2..])
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '{' | '}' | ',')
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one level, as the README's diagram writes them).
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_string()];
    };
    if close < open || path[close + 1..].contains('{') {
        return Vec::new();
    }
    path[open + 1..close]
        .split(',')
        .map(|part| format!("{}{part}{}", &path[..open], &path[close + 1..]))
        .collect()
}

/// Whether a path names a file (its last part has an extension) or a folder (a trailing `/`).
fn is_specific(path: &str) -> bool {
    if path.ends_with('/') {
        return true;
    }
    let last = path.rsplit('/').next().unwrap_or("");
    last.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && ext.chars().all(|c| c.is_ascii_alphanumeric()) && !ext.is_empty()
    })
}

/// The repository paths `text` names. Skipped: URLs and other paths' tails (a path must not
/// follow a path character, `:` or `~`), globs and placeholders (`*`, `<name>`, `…`, `$VAR`
/// right after the path), braces that do not close.
fn named_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.char_indices() {
        let rest = &text[at..];
        if !ROOTS.iter().any(|root| rest.starts_with(root)) {
            continue;
        }
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| path_char(c) || matches!(c, ':' | '~' | '$' | '@')) {
            continue;
        }
        let mut end = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
        // A `,` inside braces belongs to the path; outside them it ends it.
        let mut depth = 0;
        for (i, c) in rest[..end].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let after = rest[end..].chars().next();
        if after.is_some_and(|c| matches!(c, '*' | '<' | '$' | '…' | '[')) {
            continue;
        }
        let path = rest[..end].trim_end_matches(['.', ',']);
        if path.contains("..") || path.matches('{').count() != path.matches('}').count() {
            continue;
        }
        for one in expand_braces(path) {
            if is_specific(&one) {
                found.push(one);
            }
        }
    }
    found
}

/// The targets of relative Markdown links (`[text](design/x.md#part)`), without the fragment.
fn link_targets(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        let external = target.contains("://") || target.starts_with("mailto:");
        if !target.is_empty() && !external && !target.contains(char::is_whitespace) {
            found.push(target.to_string());
        }
    }
    found
}

/// Whether `named` exists from the repository's root or, for a file inside a crate under
/// `crates/`, from that crate's root (its comments name `src/plan/mod.rs` as its own).
fn exists(repo: &Path, file: &Path, named: &str) -> bool {
    if repo.join(named).exists() {
        return true;
    }
    let relative = file.strip_prefix(repo).unwrap_or(file);
    let mut parts = relative.components();
    match (parts.next(), parts.next()) {
        (Some(first), Some(krate)) if first.as_os_str() == "crates" => {
            repo.join("crates").join(krate).join(named).exists()
        }
        _ => false,
    }
}

/// Every named path that does not exist, as `file:line: path`.
fn missing(repo: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let mut report = |file: &Path, line: usize, named: &str| {
        let shown = file.strip_prefix(repo).unwrap_or(file).display();
        missing.push(format!("{shown}:{line}: {named}"));
    };
    let mut rust = Vec::new();
    for dir in CODE {
        files(&repo.join(dir), "rs", &mut rust);
    }
    // This file's own examples name paths that do not exist on purpose.
    let this_file = repo.join(file!());
    for file in rust.iter().filter(|f| **f != this_file) {
        let text = fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for named in comment(line).map(named_paths).unwrap_or_default() {
                if !exists(repo, file, &named) {
                    report(file, i + 1, &named);
                }
            }
        }
    }
    let mut commented = Vec::new();
    for (dir, endings) in HASH_COMMENTED {
        for ending in endings {
            files(&repo.join(dir), ending, &mut commented);
        }
    }
    for file in &commented {
        let text = fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for named in hash_comment(line).map(named_paths).unwrap_or_default() {
                if !exists(repo, file, &named) {
                    report(file, i + 1, &named);
                }
            }
        }
    }
    let mut markdown = Vec::new();
    files(&repo.join("docs"), "md", &mut markdown);
    markdown.extend(MARKDOWN.iter().map(|name| repo.join(name)));
    for file in &markdown {
        let text = fs::read_to_string(file).unwrap();
        let dir = file.parent().unwrap_or(repo);
        for (i, line) in text.lines().enumerate() {
            for named in named_paths(line) {
                if !exists(repo, file, &named) {
                    report(file, i + 1, &named);
                }
            }
            for target in link_targets(line) {
                if !dir.join(&target).exists() {
                    report(file, i + 1, &target);
                }
            }
        }
    }
    missing
}

#[test]
fn every_path_named_in_a_comment_or_document_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let missing = missing(repo);
    assert!(
        missing.is_empty(),
        "{} named paths do not exist (fix the name, or the text):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

#[test]
fn paths_are_read_as_a_reader_would() {
    let line = "see src/cluster/watch.rs, `tests/e2e/` and src/admission/{namespaces,sources}.rs.";
    assert_eq!(
        named_paths(line),
        [
            "src/cluster/watch.rs",
            "tests/e2e/",
            "src/admission/namespaces.rs",
            "src/admission/sources.rs"
        ]
    );
    // URLs, globs, placeholders, module paths and other paths' tails are not repository paths.
    let skipped = "https://x.io/docs/a.md src/jobs/<kind>.rs docs/design/*.md src/cluster \
                   crates/x/src/y.rs ~/src/a.rs $HOME/docs/a.md src/sync/jobs/{a.rs";
    assert_eq!(named_paths(skipped), ["crates/x/src/y.rs"]);
    assert_eq!(comment("let x = 1; // in src/a.rs"), Some("in src/a.rs"));
    assert_eq!(comment("let url = \"http://x\";"), None);
    assert_eq!(hash_comment("  # see src/a.rs"), Some(" see src/a.rs"));
    assert_eq!(hash_comment("key: v # src/a.rs"), Some(" src/a.rs"));
    assert_eq!(hash_comment("{{- /* src/a.rs */}}"), Some(" src/a.rs */}}"));
    assert_eq!(hash_comment("echo \"${#x}\""), None);
    assert_eq!(
        link_targets("[a](design/x.md#why) [b](https://x.io) [c](#top)"),
        ["design/x.md"]
    );
}

#[test]
fn the_code_layout_names_every_top_level_module() {
    // docs/architecture.md's "How it is built" is the one code layout; a module it does not
    // name is one a newcomer cannot place.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    let layout = architecture
        .split_once("## How it is built")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("docs/architecture.md has a section \"How it is built\"");
    let mut unnamed = Vec::new();
    for entry in fs::read_dir(repo.join("src")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let shown = if path.is_dir() {
            format!("src/{name}/")
        } else if name.ends_with(".rs") && name != "lib.rs" {
            format!("src/{name}")
        } else {
            continue;
        };
        if !layout.contains(&shown) {
            unnamed.push(shown);
        }
    }
    unnamed.sort();
    assert!(
        unnamed.is_empty(),
        "docs/architecture.md's code layout does not name {unnamed:?}"
    );
}
