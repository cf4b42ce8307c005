//! Why a configuration was refused: shared by the main config (`config.rs`) and the
//! sections that check themselves (`backbone.rs`, `upstream.rs`), which the main config
//! holds; kept apart so that those sections do not depend on what holds them.

use thiserror::Error;

/// Why a node's configuration was refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why not.
        reason: String,
    },
    /// The file is not TOML of the expected shape.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A value is not allowed.
    #[error("config {key} = {value}: {reason}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
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
