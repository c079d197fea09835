//! Sizes with K/M/G/T suffixes, as Lustre tools accept them, and durations with s/m/h/d/w.

/// A number with an optional one-letter unit: the number times `unit(letter)`; `what`
/// names the kind of value in errors.
fn with_unit(s: &str, what: &str, unit: impl Fn(char) -> Option<u64>) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => match unit(c) {
            Some(m) => (&s[..s.len() - 1], m),
            None => return Err(format!("bad {what} '{s}': unknown unit '{c}'")),
        },
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad {what} '{s}'"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{what} '{s}' is too large"))
}

/// Parses `1048576`, `1M`, `64k`, `4G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    with_unit(s, "size", |c| match c.to_ascii_uppercase() {
        'K' => Some(1 << 10),
        'M' => Some(1 << 20),
        'G' => Some(1 << 30),
        'T' => Some(1 << 40),
        _ => None,
    })
}

/// Parses `90s`, `30m`, `12h`, `1d`, `2w` (a bare number is seconds) into seconds.
pub fn parse_duration_s(s: &str) -> Result<u64, String> {
    with_unit(s, "duration", |c| match c.to_ascii_lowercase() {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        'w' => Some(7 * 86_400),
        _ => None,
    })
}

/// Formats bytes the way `lfs df -h` does.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("12"), Ok(12));
        assert!(parse_size("1Q").is_err());
        assert!(parse_size("x").is_err());
        assert_eq!(human(1536), "1.5K");
        assert_eq!(parse_duration_s("1d"), Ok(86_400));
        assert_eq!(parse_duration_s("90"), Ok(90));
        assert_eq!(parse_duration_s("30m"), Ok(1800));
        assert!(parse_duration_s("1y").is_err());
        assert!(parse_duration_s("d").is_err());
    }
}
