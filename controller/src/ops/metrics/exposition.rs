//! The `/metrics` exposition formats: which one a scrape's `Accept` header asks for
//! ([`negotiate`]), and the Prometheus text format 0.0.4 written from the OpenMetrics text the
//! registry encodes ([`text_004`]), as client_golang and Metacontroller serve it by default.

use std::collections::HashMap;

/// Content type of the OpenMetrics 1.0.0 text exposition.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text exposition format 0.0.4 (what client_golang serves, and
/// Metacontroller with it, unless OpenMetrics is asked for).
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition formats `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Prometheus text format 0.0.4 (the default).
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => PROMETHEUS_TEXT,
            Format::OpenMetrics => OPENMETRICS,
        }
    }
}

/// The format for a scrape's `Accept` header, as client_golang's `NegotiateIncludingOpenMetrics`
/// chooses (protobuf aside): the media ranges by falling `q` (ties in header order, `q=0`
/// excluded); the first that is `application/openmetrics-text` (version 1.0.0, 0.0.1 or none)
/// or `text/plain` (version 0.0.4 or none) decides; otherwise — no header, `*/*`, anything
/// else — text 0.0.4.
pub(crate) fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<(f64, Option<Format>)> = accept
        .unwrap_or_default()
        .split(',')
        .map(media_range)
        .filter(|(q, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges
        .into_iter()
        .find_map(|(_, f)| f)
        .unwrap_or(Format::Text)
}

/// One `Accept` media range: its `q` (default 1) and the format it names, if any.
fn media_range(range: &str) -> (f64, Option<Format>) {
    let mut parts = range.split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let (mut q, mut version) = (1.0, String::new());
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "q" => q = v.parse().unwrap_or(0.0),
            "version" => version = v.to_owned(),
            _ => {}
        }
    }
    let format = match (media.as_str(), version.as_str()) {
        ("application/openmetrics-text", "" | "1.0.0" | "0.0.1") => Some(Format::OpenMetrics),
        ("text/plain", "" | "0.0.4") => Some(Format::Text),
        _ => None,
    };
    (q, format)
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition: a counter's `# HELP`/`# TYPE`
/// name carries its `_total` (the sample's name, as client_golang writes it; an info family's its
/// `_info`); `_created` samples,
/// `# UNIT` lines, exemplars and `# EOF` go; types 0.0.4 lacks become `untyped`; `\"` in help
/// text becomes `"`. Sample lines are otherwise the same in both formats.
pub(crate) fn text_004(openmetrics: &str) -> String {
    let mut types: HashMap<&str, &str> = HashMap::new();
    for line in openmetrics.lines() {
        if let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            types.insert(name, kind);
        }
    }
    let renamed = |name: &str| match types.get(name) {
        Some(&"counter") if !name.ends_with("_total") => format!("{name}_total"),
        Some(&"info") if !name.ends_with("_info") => format!("{name}_info"),
        _ => name.to_owned(),
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {} {}\n", renamed(name), help_004(help)));
        } else if let Some((name, kind)) =
            line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' '))
        {
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                _ => "untyped",
            };
            out.push_str(&format!("# TYPE {} {kind}\n", renamed(name)));
        } else if line.starts_with('#') || line.is_empty() || is_created(line, &types) {
            // # EOF, # UNIT, comments; _created samples
        } else {
            out.push_str(without_exemplar(line));
            out.push('\n');
        }
    }
    out
}

/// True for a `<family>_created` sample of a counter, histogram or summary family.
fn is_created(line: &str, types: &HashMap<&str, &str>) -> bool {
    let name = line.split(['{', ' ']).next().unwrap_or_default();
    name.strip_suffix("_created").is_some_and(|family| {
        matches!(
            types.get(family),
            Some(&("counter" | "histogram" | "summary"))
        )
    })
}

/// OpenMetrics help text as 0.0.4 help text: `\"` unescaped (0.0.4 escapes only `\\` and `\n`).
fn help_004(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('"') => out.push('"'),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            },
            _ => out.push(c),
        }
    }
    out
}

/// A sample line without its exemplar (` # {labels} value`), which 0.0.4 lacks. Label values
/// may hold `#`: the search starts after the label set.
fn without_exemplar(line: &str) -> &str {
    let mut labels_end = 0;
    if let Some(open) = line.find('{') {
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in line[open..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    labels_end = open + i;
                    break;
                }
                _ => {}
            }
        }
    }
    match line[labels_end..].find(" # ") {
        Some(at) => &line[..labels_end + at],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_accept_and_q_values() {
        // what Prometheus sends when it may scrape OpenMetrics
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            negotiate(Some("text/plain;version=0.0.4;q=0.9,*/*;q=0.1")),
            Format::Text
        );
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        assert_eq!(negotiate(Some("application/json")), Format::Text);
        // the higher q wins whatever the order; q=0 means "not this"
        assert_eq!(
            negotiate(Some(
                "text/plain;q=0.2, application/openmetrics-text; version=\"1.0.0\"; q=0.8"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0,text/plain;q=0.1")),
            Format::Text
        );
        // a version kmeta does not write is skipped
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=2.0.0")),
            Format::Text
        );
        assert_eq!(Format::Text.content_type(), PROMETHEUS_TEXT);
        assert_eq!(Format::OpenMetrics.content_type(), OPENMETRICS);
    }

    #[test]
    fn text_004_names_counters_with_total_and_drops_openmetrics_only_lines() {
        let om = "# HELP a_requests requests with \\\"quotes\\\" and \\\\.\n\
                  # TYPE a_requests counter\n\
                  # UNIT a_requests requests\n\
                  a_requests_total{url=\"http://h/#x} # {\"} 3 # {trace_id=\"1\"} 1.0\n\
                  a_requests_created{url=\"u\"} 1.7e9\n\
                  # HELP b_total already named.\n\
                  # TYPE b_total counter\n\
                  b_total 1\n\
                  # HELP c build.\n\
                  # TYPE c info\n\
                  c_info{v=\"1\"} 1\n\
                  # EOF\n";
        let want = "# HELP a_requests_total requests with \\\"quotes\\\" and \\\\.\n\
                    # TYPE a_requests_total counter\n\
                    a_requests_total{url=\"http://h/#x} # {\"} 3\n\
                    # HELP b_total already named.\n\
                    # TYPE b_total counter\n\
                    b_total 1\n\
                    # HELP c_info build.\n\
                    # TYPE c_info untyped\n\
                    c_info{v=\"1\"} 1\n";
        assert_eq!(text_004(om), want.replace("\\\"", "\""));
    }
}
