//! Go `time.ParseDuration` strings, as Metacontroller's flags and the CRDs' `timeout` fields
//! spell them.

use std::time::Duration;

/// A non-negative Go duration (`0`, `10s`, `1h30m`, `1.5h`, `250ms`, `500us`), as flags and the
/// CRDs' `timeout` fields spell them; `None` for anything else.
pub fn go_duration(value: &str) -> Option<Duration> {
    let s = value.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    // Go's units; jiff's friendly parser accepts the same compact form ("1h30m", "1.5h", "250ms").
    let d: jiff::SignedDuration = s.parse().ok()?;
    if d.is_negative() || s.starts_with('P') || s.starts_with('p') || s.contains(' ') {
        return None;
    }
    Duration::try_from(d).ok()
}

/// A string that is not a non-negative Go duration; it names the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration (e.g. 10s, 1m30s, 500ms)")]
pub(crate) struct NotADuration(pub String);

/// Parses a Go duration string (`10s`, `1m30s`, `500ms`, `1.5h`, `250us`).
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, NotADuration> {
    go_duration(s).ok_or_else(|| NotADuration(s.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("1.5h").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_go_duration("250us").unwrap(),
            Duration::from_micros(250)
        );
        assert_eq!(
            parse_go_duration("1h2m3s").unwrap(),
            Duration::from_secs(3723)
        );
        assert!(parse_go_duration("-5s").is_err());
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("10parsecs").is_err());
        assert!(parse_go_duration("").is_err());
        assert_eq!(
            parse_go_duration("10parsecs").unwrap_err().to_string(),
            "\"10parsecs\" is not a duration (e.g. 10s, 1m30s, 500ms)"
        );
    }
}
