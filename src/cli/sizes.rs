//! Sizes on the command line as Kubernetes writes quantities: `6Mi`, `16Ki`, `1Gi`, `500k`, or
//! plain bytes. Help shows defaults the same way.

/// Parses a byte size: a whole number of bytes, or one with a suffix: `Ki`, `Mi`, `Gi`, `Ti`
/// (powers of 1024) or `k`, `M`, `G`, `T` (powers of 1000), as in a Pod's resources.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(split);
    let multiplier: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "{s:?} is not a size: give bytes, or a number with Ki, Mi, Gi (e.g. 6Mi, 512Ki)"
            ));
        }
    };
    let number: u64 = digits.parse().map_err(|_| {
        format!("{s:?} is not a size: give bytes, or a number with Ki, Mi, Gi (e.g. 6Mi)")
    })?;
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// [`parse_size`] for a flag held as `usize`.
pub fn parse_size_usize(s: &str) -> Result<usize, String> {
    usize::try_from(parse_size(s)?).map_err(|_| format!("{s:?} is too large"))
}

/// `bytes` as the shortest exact binary quantity (`6Mi`, `16Ki`), or plain bytes.
pub fn format_size(bytes: u64) -> String {
    for (suffix, unit) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bytes_or_kubernetes_quantities() {
        assert_eq!(parse_size("6Mi"), Ok(6 * 1024 * 1024));
        assert_eq!(parse_size("16Ki"), Ok(16 * 1024));
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_size("500k"), Ok(500_000));
        assert_eq!(parse_size("2M"), Ok(2_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 0 "), Ok(0));
        for bad in [
            "",
            "Mi",
            "6MB",
            "6 Mi",
            "-1",
            "1.5Mi",
            "6mi",
            "99999999999999Ti",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} refused");
        }
    }

    #[test]
    fn sizes_print_as_they_are_written() {
        for (bytes, text) in [
            (6 << 20, "6Mi"),
            (16 << 10, "16Ki"),
            (1 << 30, "1Gi"),
            (1000, "1000"),
        ] {
            assert_eq!(format_size(bytes), text);
            assert_eq!(parse_size(text), Ok(bytes), "round trip");
        }
    }
}
