//! Kubernetes label selectors: the string syntax of `kubectl -l` (used by the inline
//! `copyrator.io/namespace-selector` annotation) and `metav1.LabelSelector` (used by CopyRule),
//! parsed into one validated form that matches label maps and renders back to the string syntax
//! for server-side LIST filtering.

use std::{collections::BTreeMap, collections::BTreeSet, fmt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

mod names;
mod parse;

pub use names::{is_dns_label, is_dns_subdomain, validate_key, validate_value};

/// A parsed, validated label selector: all requirements must hold (AND).
/// No requirements means "matches everything", as in Kubernetes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Operator {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

/// Why a selector is invalid; the message is meant for the person who wrote it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

fn err(msg: impl Into<String>) -> SelectorError {
    SelectorError(msg.into())
}

impl Selector {
    /// The selector that matches every label set.
    pub fn everything() -> Self {
        Self {
            requirements: Vec::new(),
        }
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches(&self, labels: &impl LabelLookup) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector selects everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses the string syntax (`a=b,c in (x,y),!d`). An empty string selects everything.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        if input.len() > MAX_SELECTOR_CHARS {
            return Err(err(format!(
                "is {} characters long; at most {MAX_SELECTOR_CHARS} are allowed",
                input.len()
            )));
        }
        let requirements = parse::requirements(input)?;
        if requirements.is_empty() {
            return Ok(Self::everything());
        }
        Self::checked(requirements)
    }

    /// Caps what one selector may ask, so that matching it stays cheap wherever it runs.
    fn checked(requirements: Vec<Requirement>) -> Result<Self, SelectorError> {
        if requirements.len() > MAX_REQUIREMENTS {
            return Err(err(format!(
                "has {} requirements; at most {MAX_REQUIREMENTS} are allowed",
                requirements.len()
            )));
        }
        let values: usize = requirements
            .iter()
            .map(|r| match &r.op {
                Operator::In(v) | Operator::NotIn(v) => v.len(),
                _ => 0,
            })
            .sum();
        if values > MAX_VALUES {
            return Err(err(format!(
                "lists {values} values; at most {MAX_VALUES} are allowed"
            )));
        }
        Ok(Self { requirements })
    }

    /// Converts a `metav1.LabelSelector` (matchLabels AND matchExpressions).
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in sel.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(value)?;
            requirements.push(Requirement {
                key: key.clone(),
                op: Operator::In(BTreeSet::from([value.clone()])),
            });
        }
        for (i, expr) in sel.match_expressions.iter().flatten().enumerate() {
            validate_key(&expr.key).map_err(|e| err(format!("matchExpressions[{i}].key: {e}")))?;
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            for v in &values {
                validate_value(v).map_err(|e| err(format!("matchExpressions[{i}].values: {e}")))?;
            }
            let op = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(err(format!(
                        "matchExpressions[{i}]: operator {} needs at least one value",
                        expr.operator
                    )));
                }
                "In" => Operator::In(values),
                "NotIn" => Operator::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(err(format!(
                        "matchExpressions[{i}]: operator {} takes no values",
                        expr.operator
                    )));
                }
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(err(format!(
                        "matchExpressions[{i}].operator: {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                    )));
                }
            };
            requirements.push(Requirement {
                key: expr.key.clone(),
                op,
            });
        }
        Self::checked(requirements)
    }
}

impl Selector {
    /// The `metav1.LabelSelector` form (for a CopyRule): equalities as `matchLabels`, the
    /// rest as `matchExpressions`. `None` for `>` and `<`, which it cannot express.
    pub fn to_label_selector(&self) -> Option<LabelSelector> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let mut labels = BTreeMap::new();
        let mut expressions = Vec::new();
        for r in &self.requirements {
            let expr =
                |operator: &str, values: Option<&BTreeSet<String>>| LabelSelectorRequirement {
                    key: r.key.clone(),
                    operator: operator.into(),
                    values: values.map(|v| v.iter().cloned().collect()),
                };
            match &r.op {
                Operator::In(set) if set.len() == 1 && !labels.contains_key(&r.key) => {
                    labels.insert(r.key.clone(), set.iter().next()?.clone());
                }
                Operator::In(set) => expressions.push(expr("In", Some(set))),
                Operator::NotIn(set) => expressions.push(expr("NotIn", Some(set))),
                Operator::Exists => expressions.push(expr("Exists", None)),
                Operator::DoesNotExist => expressions.push(expr("DoesNotExist", None)),
                Operator::GreaterThan(_) | Operator::LessThan(_) => return None,
            }
        }
        Some(LabelSelector {
            match_labels: (!labels.is_empty()).then_some(labels),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        })
    }
}

/// Longest selector in the string syntax.
pub const MAX_SELECTOR_CHARS: usize = 4096;
/// Most requirements in one selector.
pub const MAX_REQUIREMENTS: usize = 64;
/// Most values across the `in`/`notin` sets of one selector.
pub const MAX_VALUES: usize = 512;

/// What a selector is matched against: label values by key.
pub trait LabelLookup {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Requirement {
    fn matches(&self, labels: &impl LabelLookup) -> bool {
        let value = labels.label(&self.key);
        match &self.op {
            Operator::In(set) => value.is_some_and(|v| set.contains(v)),
            Operator::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Operator::LessThan(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// Renders the string syntax the API server accepts in `?labelSelector=`.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let join = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(",");
            match &r.op {
                Operator::In(set) if set.len() == 1 => write!(f, "{}={}", r.key, join(set))?,
                Operator::In(set) => write!(f, "{} in ({})", r.key, join(set))?,
                Operator::NotIn(set) if set.len() == 1 => write!(f, "{}!={}", r.key, join(set))?,
                Operator::NotIn(set) => write!(f, "{} notin ({})", r.key, join(set))?,
                Operator::Exists => write!(f, "{}", r.key)?,
                Operator::DoesNotExist => write!(f, "!{}", r.key)?,
                Operator::GreaterThan(n) => write!(f, "{}>{n}", r.key)?,
                Operator::LessThan(n) => write!(f, "{}<{n}", r.key)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    #[test]
    fn string_syntax_matches_like_kubernetes() {
        let cases: &[Case] = &[
            ("secret=yes", &[("secret", "yes")], true),
            ("secret=yes", &[("secret", "no")], false),
            ("secret=yes", &[], false),
            ("secret==yes", &[("secret", "yes")], true),
            ("secret!=yes", &[], true),
            ("secret!=yes", &[("secret", "yes")], false),
            ("env in (prod,staging)", &[("env", "staging")], true),
            ("env in (prod, staging)", &[("env", "dev")], false),
            ("env notin (prod)", &[], true),
            ("env notin (prod)", &[("env", "prod")], false),
            ("registry", &[("registry", "")], true),
            ("registry", &[], false),
            ("!registry", &[], true),
            ("!registry", &[("registry", "x")], false),
            ("tier>2", &[("tier", "3")], true),
            ("tier>2", &[("tier", "x")], false),
            ("tier<2", &[("tier", "1")], true),
            (
                "registry=enabled,env in (prod,staging)",
                &[("registry", "enabled"), ("env", "prod")],
                true,
            ),
            (
                "registry=enabled,env in (prod,staging)",
                &[("registry", "enabled")],
                false,
            ),
            ("", &[("anything", "x")], true),
            ("example.com/team=a", &[("example.com/team", "a")], true),
            ("empty=", &[("empty", "")], true),
        ];
        for (input, l, want) in cases {
            let sel = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.matches(&labels(l)), *want, "{input:?} against {l:?}");
        }
    }

    #[test]
    fn string_syntax_errors_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("env in prod", "expected '('"),
            ("env in ()", "at least one value"),
            ("env in (a", "unclosed"),
            ("a=b,", "trailing ','"),
            ("a b", "expected an operator"),
            ("-bad=x", "invalid label key"),
            ("a=b c", "expected ','"),
            ("a=-x", "invalid label value"),
            ("tier>x", "not an integer"),
            ("a=b;c", "unexpected character"),
            ("!", "after '!'"),
            ("UPPER.example.com/x=y", "prefix must be a DNS subdomain"),
        ];
        for (input, needle) in cases {
            let e = Selector::parse(input).expect_err(input).to_string();
            assert!(
                e.contains(needle),
                "{input:?}: {e:?} should mention {needle:?}"
            );
        }
    }

    #[test]
    fn renders_back_to_equivalent_string() {
        for input in [
            "secret=yes",
            "env in (prod,staging)",
            "env notin (a,b)",
            "env!=a",
            "registry",
            "!registry",
            "tier>2",
            "a=b,!c,d in (x,y)",
        ] {
            let sel = Selector::parse(input).unwrap();
            let rendered = sel.to_string();
            assert_eq!(
                Selector::parse(&rendered).unwrap(),
                sel,
                "{input} -> {rendered}"
            );
        }
    }

    #[test]
    fn label_selector_match_labels_and_expressions() {
        let sel = Selector::from_label_selector(&LabelSelector {
            match_labels: Some([("registry".to_string(), "enabled".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "NotIn".into(),
                values: Some(vec!["dev".into()]),
            }]),
        })
        .unwrap();
        assert!(sel.matches(&labels(&[("registry", "enabled")])));
        assert!(sel.matches(&labels(&[("registry", "enabled"), ("env", "prod")])));
        assert!(!sel.matches(&labels(&[("registry", "enabled"), ("env", "dev")])));
        assert!(!sel.matches(&labels(&[("env", "prod")])));
        assert_eq!(sel.to_string(), "registry=enabled,env!=dev");
    }

    #[test]
    fn string_selectors_convert_to_label_selectors_that_match_the_same() {
        let namespaces: &[&[(&str, &str)]] = &[
            &[],
            &[("env", "prod")],
            &[("env", "dev"), ("team", "a")],
            &[("env", "prod"), ("team", "a"), ("legacy", "")],
        ];
        for input in [
            "",
            "env=prod",
            "env in (prod,staging),team",
            "env!=prod,!legacy",
            "env notin (dev),team=a",
        ] {
            let sel = Selector::parse(input).unwrap();
            let converted = Selector::from_label_selector(&sel.to_label_selector().unwrap())
                .unwrap_or_else(|e| panic!("{input:?}: {e}"));
            for l in namespaces {
                assert_eq!(
                    converted.matches(&labels(l)),
                    sel.matches(&labels(l)),
                    "{input:?} on {l:?}"
                );
            }
        }
        assert!(
            Selector::parse("tier>2")
                .unwrap()
                .to_label_selector()
                .is_none()
        );
        assert_eq!(
            Selector::everything().to_label_selector(),
            Some(LabelSelector::default())
        );
    }

    #[test]
    fn empty_label_selector_matches_everything() {
        let sel = Selector::from_label_selector(&LabelSelector::default()).unwrap();
        assert!(sel.is_everything());
        assert!(sel.matches(&labels(&[])));
    }

    #[test]
    fn label_selector_rejects_bad_operators_and_values() {
        let bad = |operator: &str, values: Option<Vec<&str>>| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: operator.into(),
                values: values.map(|v| v.into_iter().map(String::from).collect()),
            }]),
        };
        let cases = [
            (bad("Equals", Some(vec!["a"])), "is not one of In, NotIn"),
            (bad("In", None), "needs at least one value"),
            (bad("Exists", Some(vec!["a"])), "takes no values"),
            (bad("In", Some(vec!["not valid"])), "invalid label value"),
        ];
        for (sel, needle) in cases {
            let e = Selector::from_label_selector(&sel).unwrap_err().to_string();
            assert!(e.contains(needle), "{e:?} should mention {needle:?}");
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("team-a"));
        assert!(!is_dns_label("Team"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_label("-a"));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("a..b"));
    }

    #[test]
    fn selectors_are_capped_so_matching_stays_cheap() {
        let many_terms = (0..20_000)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let e = Selector::parse(&many_terms).unwrap_err().to_string();
        assert!(e.contains("at most 4096 are allowed"), "{e}");
        let terms = (0..65)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let e = Selector::parse(&terms).unwrap_err().to_string();
        assert!(e.contains("65 requirements; at most 64"), "{e}");
        let values = (0..513)
            .map(|i| format!("v{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let e = Selector::parse(&format!("k in ({values})"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("513 values; at most 512"), "{e}");
        let expressions = (0..65)
            .map(
                |i| k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: format!("k{i}"),
                    operator: "Exists".into(),
                    values: None,
                },
            )
            .collect();
        let e = Selector::from_label_selector(&LabelSelector {
            match_labels: None,
            match_expressions: Some(expressions),
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("at most 64"), "{e}");
        assert!(
            Selector::parse(
                &(0..64)
                    .map(|i| format!("k{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
            .is_ok()
        );
    }
}
