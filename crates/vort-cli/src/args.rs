//! Value parsers shared by the subcommands.

/// Parses a non-negative integer written as `100000`, `1_000_000`, `1e5` or `2.5E6`.
///
/// Exponent forms must denote an integer exactly representable in f64 (<= 2^53).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    let hint = "expected a non-negative integer such as 100000, 1e5 or 1_000_000";
    if t.is_empty() {
        return Err(hint.into());
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map_err(|_| format!("{t} is larger than {}", u64::MAX));
    }
    // Only plain decimal / exponent notation (no "inf", "nan", hex...).
    if !t
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return Err(hint.into());
    }
    let v: f64 = t.parse().map_err(|_| hint.to_string())?;
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0) {
        return Err(hint.into());
    }
    if v > EXACT {
        return Err(format!(
            "{s} is too large (at most 2^53 in exponent notation)"
        ));
    }
    Ok(v as u64)
}

/// Parses a real number (`0.35`, `1e-4`); NaN and infinities are refused here.
pub fn parse_real(s: &str) -> Result<f64, String> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    let v: f64 = t
        .parse()
        .map_err(|_| "expected a number such as 0.35 or 1e-4".to_string())?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err("expected a finite number".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_accept_the_documented_forms() {
        assert_eq!(parse_count("100000"), Ok(100_000));
        assert_eq!(parse_count("1e5"), Ok(100_000));
        assert_eq!(parse_count("1E6"), Ok(1_000_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("2.5e6"), Ok(2_500_000));
        assert_eq!(parse_count("0"), Ok(0));
        for bad in [
            "", "abc", "-1", "1.5", "1e-3", "inf", "nan", "1e300", "0x10",
        ] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reals_refuse_non_finite() {
        assert_eq!(parse_real("1e-4"), Ok(1e-4));
        assert_eq!(parse_real("0.35"), Ok(0.35));
        for bad in ["abc", "nan", "inf", "-inf", ""] {
            assert!(parse_real(bad).is_err(), "{bad}");
        }
    }
}
