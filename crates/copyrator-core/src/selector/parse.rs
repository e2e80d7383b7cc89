//! The lexer and parser of the `kubectl -l` selector syntax.

use std::{collections::BTreeSet, fmt};

use super::{Operator, Requirement, SelectorError, err, validate_key, validate_value};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Open,
    Close,
    Eq,
    NotEq,
    Not,
    Gt,
    Lt,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Comma => f.write_str("','"),
            Token::Open => f.write_str("'('"),
            Token::Close => f.write_str("')'"),
            Token::Eq => f.write_str("'='"),
            Token::NotEq => f.write_str("'!='"),
            Token::Not => f.write_str("'!'"),
            Token::Gt => f.write_str("'>'"),
            Token::Lt => f.write_str("'<'"),
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn lex(input: &str) -> Result<Vec<Token>, SelectorError> {
    let mut tokens = Vec::new();
    let mut chars = input.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            ',' => Token::Comma,
            '(' => Token::Open,
            ')' => Token::Close,
            '>' => Token::Gt,
            '<' => Token::Lt,
            '=' => {
                if chars.peek().is_some_and(|(_, c)| *c == '=') {
                    chars.next();
                }
                Token::Eq
            }
            '!' => {
                if chars.peek().is_some_and(|(_, c)| *c == '=') {
                    chars.next();
                    Token::NotEq
                } else {
                    Token::Not
                }
            }
            c if is_ident_char(c) => {
                let mut end = i + c.len_utf8();
                while let Some((j, c)) = chars.peek().copied() {
                    if !is_ident_char(c) {
                        break;
                    }
                    end = j + c.len_utf8();
                    chars.next();
                }
                Token::Ident(input[i..end].to_string())
            }
            other => {
                return Err(err(format!(
                    "unexpected character {other:?} at position {i}"
                )));
            }
        };
        tokens.push(token);
    }
    Ok(tokens)
}

/// The requirements of a selector in the string syntax, in order (none for an empty string).
pub(super) fn requirements(input: &str) -> Result<Vec<Requirement>, SelectorError> {
    let tokens = lex(input)?;
    let mut p = Parser { tokens, pos: 0 };
    let mut requirements = Vec::new();
    if p.peek().is_none() {
        return Ok(requirements);
    }
    loop {
        requirements.push(p.requirement()?);
        match p.next() {
            None => return Ok(requirements),
            Some(Token::Comma) => {
                if p.peek().is_none() {
                    return Err(err("trailing ',' at the end of the selector"));
                }
            }
            Some(t) => return Err(err(format!("expected ',' but found {t}"))),
        }
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn ident(&mut self, what: &str) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Ident(s)) => Ok(s),
            Some(t) => Err(err(format!("expected {what} but found {t}"))),
            None => Err(err(format!("expected {what} but the selector ended"))),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Not) {
            self.next();
            let key = self.ident("a label key after '!'")?;
            validate_key(&key)?;
            return Ok(Requirement {
                key,
                op: Operator::DoesNotExist,
            });
        }
        let key = self.ident("a label key")?;
        validate_key(&key)?;
        let op = match self.peek().cloned() {
            None | Some(Token::Comma) => Operator::Exists,
            Some(Token::Eq) => {
                self.next();
                Operator::In(BTreeSet::from([self.value()?]))
            }
            Some(Token::NotEq) => {
                self.next();
                Operator::NotIn(BTreeSet::from([self.value()?]))
            }
            Some(Token::Gt) | Some(Token::Lt) => {
                let gt = self.next() == Some(Token::Gt);
                let raw = self.ident("an integer")?;
                let n = raw
                    .parse::<i64>()
                    .map_err(|_| err(format!("{raw:?} is not an integer")))?;
                if gt {
                    Operator::GreaterThan(n)
                } else {
                    Operator::LessThan(n)
                }
            }
            Some(Token::Ident(word)) if word == "in" || word == "notin" => {
                self.next();
                let values = self.value_set(&key, &word)?;
                if word == "in" {
                    Operator::In(values)
                } else {
                    Operator::NotIn(values)
                }
            }
            Some(t) => {
                return Err(err(format!(
                    "expected an operator (=, ==, !=, in, notin, >, <) after {key:?} but found {t}"
                )));
            }
        };
        Ok(Requirement { key, op })
    }

    /// A value after `=`/`!=`; may be empty (`a=`), as in Kubernetes.
    fn value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            None | Some(Token::Comma) => Ok(String::new()),
            _ => {
                let v = self.ident("a label value")?;
                validate_value(&v)?;
                Ok(v)
            }
        }
    }

    fn value_set(&mut self, key: &str, op: &str) -> Result<BTreeSet<String>, SelectorError> {
        if self.next() != Some(Token::Open) {
            return Err(err(format!("expected '(' after \"{key} {op}\"")));
        }
        let mut values = BTreeSet::new();
        loop {
            match self.next() {
                Some(Token::Ident(v)) => {
                    validate_value(&v)?;
                    values.insert(v);
                }
                Some(Token::Close) if values.is_empty() => {
                    return Err(err(format!("\"{key} {op} ()\" needs at least one value")));
                }
                Some(t) => {
                    return Err(err(format!(
                        "expected a value in \"{key} {op} (...)\" but found {t}"
                    )));
                }
                None => return Err(err(format!("unclosed '(' in \"{key} {op} (...)\""))),
            }
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => return Ok(values),
                Some(t) => {
                    return Err(err(format!(
                        "expected ',' or ')' in \"{key} {op} (...)\" but found {t}"
                    )));
                }
                None => return Err(err(format!("unclosed '(' in \"{key} {op} (...)\""))),
            }
        }
    }
}
