//! Why a configuration was refused: shared by the main config (`config.rs`) and the
//! sections that check themselves (`backbone.rs`, `upstream.rs`), which the main config
//! holds; kept apart so that those sections do not depend on what holds them.

use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config {key} = {value}: {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
}

/// `key = value` is refused for `reason` (which says what is allowed).
pub(crate) fn invalid(
    key: &'static str,
    value: impl std::fmt::Display,
    reason: &str,
) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}
