//! The manifest files one-off commands take (`-f FILE`, `-` for stdin): read, and parsed as a
//! YAML stream, with errors in one line that name the file and the place, as kubectl's do.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// The documents of `file` (`-`: stdin), empty ones left out.
pub fn read_documents(file: &Path) -> anyhow::Result<Vec<Value>> {
    let (name, text) = if file.as_os_str() == "-" {
        (
            "stdin".to_string(),
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
        )
    } else {
        (
            file.display().to_string(),
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?,
        )
    };
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| anyhow::anyhow!("{name}: {}", yaml_error(&e.to_string())))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The parser's message in one line: its first line, without the advice meant for programs
/// that call the parser (`set DuplicateKeyPolicy in Options`) and without the source excerpt.
pub fn yaml_error(message: &str) -> String {
    let first = message.lines().next().unwrap_or_default().trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let first = match first.find(", set DuplicateKeyPolicy") {
        Some(at) => format!(
            "{}: a YAML mapping names each key once; remove the second",
            &first[..at]
        ),
        None => first.to_string(),
    };
    // "line 2 column 1: ..." reads as kubectl's "line 2: ...".
    format!("invalid YAML at {first}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_errors_are_one_line_with_no_advice_for_programs() {
        for (text, says) in [
            ("a: 1\na: 2\n", "line 2 column 1: duplicate mapping key"),
            ("a: [1\n", "unclosed bracket"),
        ] {
            let err = serde_saphyr::from_multiple::<Value>(text).unwrap_err();
            let line = yaml_error(&err.to_string());
            assert!(!line.contains('\n'), "{line}");
            assert!(line.contains(says), "{line}");
            assert!(!line.contains("DuplicateKeyPolicy"), "{line}");
            assert!(line.starts_with("invalid YAML at line "), "{line}");
        }
    }
}
