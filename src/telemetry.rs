//! Structured logs with tracing: `--log-format text|json`, `--log-level` or `RUST_LOG`.
//! Nothing in copyrator logs an object's payload; spans carry kinds, namespaces and names.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use clap::ValueEnum;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber. `RUST_LOG`, when set, overrides `level`.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(v),
        _ => EnvFilter::try_new(level),
    }
    .map_err(|e| format!("invalid log level/filter: {e}"))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init(),
        LogFormat::Text => registry.with(fmt::layer().with_target(false)).try_init(),
    };
    result.map_err(|e| e.to_string())
}
