//! A namespace's labels, packed into one allocation.
//!
//! A full resync holds every namespace's labels at once. As a `BTreeMap<String, String>` a
//! namespace with a few labels costs a 544-byte tree node and two allocations per label; packed
//! it costs one allocation of about the labels' length (SPEC §5).

use std::{collections::BTreeMap, fmt};

/// Labels sorted by key, each key and value stored as `<length>:<text>` in one string. The
/// lengths make any text safe to store (nothing in a label can be mistaken for a separator).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<str>);

/// A selector matches labels here: the selector is the leaf, the labels are matched by it.
impl crate::selector::LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl Labels {
    /// The value of `key`, if the label is set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut rest: &str = &self.0;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let (key, after_key) = split_field(rest);
            let (value, after_value) = split_field(after_key);
            rest = after_value;
            Some((key, value))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// The labels as a map (for output and for code that edits them).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Splits `<length>:<text><rest>` into text and rest. Only ever applied to what [`pack`]
/// wrote; anything else ends the iteration (empty rest) rather than panicking.
fn split_field(s: &str) -> (&str, &str) {
    let Some((len, rest)) = s.split_once(':') else {
        return ("", "");
    };
    len.parse::<usize>()
        .ok()
        .and_then(|n| rest.split_at_checked(n))
        .unwrap_or_default()
}

fn pack<'a>(sorted: impl Iterator<Item = (&'a str, &'a str)>) -> Labels {
    let mut out = String::new();
    for (k, v) in sorted {
        for field in [k, v] {
            out.push_str(&field.len().to_string());
            out.push(':');
            out.push_str(field);
        }
    }
    Labels(out.into_boxed_str())
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        pack(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self::from(&map)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Labels {
    /// Later pairs win over earlier ones with the same key, as in a map.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<String, String> = iter
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self::from(&map)
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_reads_back_in_key_order() {
        let labels: Labels = [("team", "a"), ("env", "prod"), ("empty", "")]
            .into_iter()
            .collect();
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("empty", ""), ("env", "prod"), ("team", "a")]
        );
        assert_eq!(labels.get("env"), Some("prod"));
        assert_eq!(labels.get("empty"), Some(""));
        assert_eq!(labels.get("missing"), None);
        assert!(labels.contains_key("team"));
        assert_eq!(labels.len(), 3);
        assert_eq!(
            format!("{labels:?}"),
            r#"{"empty": "", "env": "prod", "team": "a"}"#
        );
    }

    #[test]
    fn any_text_survives_packing() {
        // Separators and digits inside keys and values are not mistaken for structure.
        let tricky = [("3:a", "1:b:"), ("k", "12:x\0y"), ("ü", "é:")];
        let labels: Labels = tricky.into_iter().collect();
        let map: BTreeMap<String, String> = tricky
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(labels.to_map(), map);
        assert_eq!(labels.get("k"), Some("12:x\0y"));
    }

    #[test]
    fn the_last_value_of_a_key_wins_and_empty_is_empty() {
        let labels: Labels = [("a", "1"), ("a", "2")].into_iter().collect();
        assert_eq!(labels.get("a"), Some("2"));
        assert_eq!(labels.len(), 1);
        let none = Labels::default();
        assert!(none.is_empty());
        assert_eq!(none.iter().count(), 0);
        assert_eq!(Labels::from(BTreeMap::new()), none);
    }
}
