//! Tracing subscriber set-up for the `kmeta` binary (libraries never install one).

use tracing_subscriber::EnvFilter;

use clap::ValueEnum;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// Human-readable lines.
    Text,
}

/// Validated logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Output format.
    pub format: LogFormat,
    /// An `EnvFilter` directive; None: $RUST_LOG, else "info".
    pub filter: Option<String>,
}

/// A logging setting the subscriber cannot use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// `--log-level` is not an `EnvFilter` directive.
    #[error("--log-level {directive:?}: {source}")]
    Filter {
        /// The directive as given.
        directive: String,
        /// Why `EnvFilter` refused it.
        source: tracing_subscriber::filter::ParseError,
    },
}

/// The filter directive: the explicit flag, else `$RUST_LOG`, else `info`.
pub(crate) fn filter(config: &LogConfig) -> Result<EnvFilter, LogError> {
    match &config.filter {
        Some(f) => EnvFilter::try_new(f).map_err(|source| LogError::Filter {
            directive: f.clone(),
            source,
        }),
        None => Ok(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))),
    }
}

/// Installs the global subscriber (JSON or text lines on stderr). Calling it twice is harmless:
/// the second call keeps the first subscriber.
pub fn init(config: &LogConfig) -> Result<(), LogError> {
    let filter = filter(config)?;
    // colours only for a terminal: logs redirected to a file or collected in a pod stay plain
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = match config.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    // An already-installed subscriber (tests) is not an error.
    let _ = result;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_filter_is_reported() {
        let cfg = LogConfig {
            format: LogFormat::Text,
            filter: Some("kmeta=loud".into()),
        };
        let e = filter(&cfg).expect_err("invalid directive").to_string();
        assert!(e.starts_with("--log-level \"kmeta=loud\": "), "{e}");
    }
}
