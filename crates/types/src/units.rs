//! Sizes with K/M/G/T suffixes, as Lustre tools accept them, and durations with s/m/h/d/w.

/// Parses `1048576`, `1M`, `64k`, `4G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("bad size '{s}': unknown suffix '{c}'")),
            };
            (&s[..s.len() - 1], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// Parses `90s`, `30m`, `12h`, `1d`, `2w` (a bare number is seconds) into seconds.
pub fn parse_duration_s(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                's' => 1u64,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                'w' => 7 * 86_400,
                _ => return Err(format!("bad duration '{s}': unknown unit '{c}'")),
            };
            (&s[..s.len() - 1], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad duration '{s}'"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("duration '{s}' is too long"))
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
