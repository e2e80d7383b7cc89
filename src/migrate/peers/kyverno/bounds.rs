//! Bounds on the CEL of a GeneratingPolicy that `migrate` evaluates (SPEC §12.1): a policy is
//! input, and the CEL interpreter has no cost limit of its own. Before it is compiled, an
//! expression's size, bracket nesting and nested comprehensions are checked in its text; it
//! then runs on a worker thread that is given [`TIMEOUT`]. A policy past a bound is reported
//! with the bound, not migrated.

use std::{sync::mpsc, thread, time::Duration};

/// Most bytes in one expression.
pub const MAX_BYTES: usize = 5 * 1024;
/// Most brackets (`(`, `[`, `{`) open at once in one expression.
pub const MAX_NESTING: usize = 32;
/// Most comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) inside one another.
pub const MAX_COMPREHENSIONS_NESTED: usize = 2;
/// Longest one expression may run.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// The worker's stack: a long chain of operators is a deep tree, walked recursively.
const STACK_BYTES: usize = 64 * 1024 * 1024;

/// The CEL macros that iterate over a list or map.
const COMPREHENSIONS: [&str; 5] = ["all", "exists", "exists_one", "map", "filter"];

/// Checks `text` against [`MAX_BYTES`], [`MAX_NESTING`] and [`MAX_COMPREHENSIONS_NESTED`],
/// without parsing it (the parser recurses on nesting).
pub fn check(text: &str) -> Result<(), String> {
    if text.len() > MAX_BYTES {
        return Err(format!(
            "the expression is {} bytes, over the bound of {MAX_BYTES} bytes on one expression",
            text.len()
        ));
    }
    // Each open bracket, and whether it opens a comprehension's arguments.
    let mut open: Vec<bool> = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' | '\'' => {
                // A string literal: brackets in it are text. (An unterminated one is the
                // compiler's to refuse.)
                while let Some((_, inner)) = chars.next() {
                    match inner {
                        '\\' => {
                            chars.next();
                        }
                        q if q == c => break,
                        _ => {}
                    }
                }
            }
            '(' | '[' | '{' => {
                let comprehension = c == '(' && is_comprehension_call(&text[..at]);
                open.push(comprehension);
                if open.len() > MAX_NESTING {
                    return Err(format!(
                        "the expression nests brackets over {MAX_NESTING} deep, the bound on one expression"
                    ));
                }
                if open.iter().filter(|c| **c).count() > MAX_COMPREHENSIONS_NESTED {
                    return Err(format!(
                        "the expression nests comprehensions (all, exists, exists_one, map, filter) over {MAX_COMPREHENSIONS_NESTED} deep, the bound on one expression"
                    ));
                }
            }
            ')' | ']' | '}' => {
                open.pop();
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `before` ends with `.<comprehension macro>` (spaces allowed around the name).
fn is_comprehension_call(before: &str) -> bool {
    let before = before.trim_end();
    let name_start = before
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    COMPREHENSIONS.contains(&&before[name_start..])
        && before[..name_start].trim_end().ends_with('.')
}

/// `evaluate()` on a worker thread, its answer awaited at most `timeout`. A worker past it is
/// left to finish on its own (nothing can stop the interpreter), its answer dropped; `migrate`
/// is a command that ends.
pub fn run_bounded<T: Send + 'static>(
    timeout: Duration,
    evaluate: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("migrate-cel".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let _ = tx.send(evaluate());
        })
        .map_err(|e| format!("no thread to evaluate the expression on: {e}"))?;
    match rx.recv_timeout(timeout) {
        Ok(answer) => answer,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "the expression ran past the bound of {} ms on one expression",
            timeout.as_millis()
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err("the expression's evaluation failed (the CEL interpreter panicked)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_expressions_pass() {
        for ok in [
            r#"generator.Apply(object.metadata.name, [resource.Get("v1", "secrets", "platform", "ca")])"#,
            "[1, 2].map(x, [3].map(y, x + y))",
            r#"object.metadata.name + "map(((((""#,
            "{'a': [1, {'b': (2)}]}",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn hostile_expressions_are_refused_naming_the_bound() {
        let long = format!("[{}0]", "0, ".repeat(MAX_BYTES / 3));
        let e = check(&long).unwrap_err();
        assert!(e.contains("over the bound of 5120 bytes"), "{e}");

        let deep = format!(
            "{}1{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        let e = check(&deep).unwrap_err();
        assert!(e.contains("nests brackets over 32 deep"), "{e}");
        // A variable of a thousand items: a billion steps three deep.
        let big = "variables.big";
        let cubed = format!("{big}.map(a, {big}.map(b, {big} . exists (c, a + b + c < 0)))");
        let e = check(&cubed).unwrap_err();
        assert!(e.contains("nests comprehensions"), "{e}");
        assert!(e.contains("over 2 deep"), "{e}");
    }

    #[test]
    fn an_expression_that_runs_too_long_is_cut_off_at_the_timeout() {
        let started = std::time::Instant::now();
        let e = run_bounded(Duration::from_millis(50), || {
            thread::sleep(Duration::from_secs(5));
            Ok(())
        })
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "{e}");
        assert!(e.contains("ran past the bound of 50 ms"), "{e}");
        assert_eq!(run_bounded(TIMEOUT, || Ok(7)), Ok(7));
    }
}
