//! Values of command-line flags the benchmarks share with `creek sim`:
//! durations with a unit. Parsing only; what a duration means is the
//! caller's.

/// A positive duration with a unit (`10s`, `500ms`, `300us`), microseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    match parse_duration_or_zero(s)? {
        0 => Err(format!("duration {:?} must be positive", s.trim())),
        us => Ok(us),
    }
}

/// Like [`parse_duration`], also accepting zero (`0` alone, or `0s`).
pub fn parse_duration_or_zero(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(0);
    }
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000)
    } else {
        return Err(format!("duration {s:?} needs a unit: s, ms or us"));
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?}"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("duration {s:?} must not be negative"));
    }
    Ok((n * mult as f64) as u64)
}
