//! The connection arguments both classes take, turned into the library's options.

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use std::time::Duration;
use tickwire_client::{tls, ConnectOptions};

pub(crate) struct ConnectArgs {
    pub address: String,
    pub user: Option<String>,
    pub token: Option<String>,
    pub application: Option<String>,
    pub connect_timeout: f64,
    pub reconnect: bool,
    pub ca_file: Option<String>,
}

impl ConnectArgs {
    pub(crate) fn options(self, default_application: &str) -> PyResult<ConnectOptions> {
        let mut opts = ConnectOptions::new(self.address);
        opts.application = self
            .application
            .unwrap_or_else(|| default_application.to_string());
        if let Some(user) = self.user {
            opts.user = user;
        }
        if let Some(token) = self.token {
            opts.token = token;
        }
        if self.connect_timeout <= 0.0 {
            return Err(PyValueError::new_err(format!(
                "connect_timeout must be more than 0 seconds (got {})",
                self.connect_timeout
            )));
        }
        opts.connect_timeout = seconds("connect_timeout", self.connect_timeout)?;
        opts.reconnect = self.reconnect;
        if let Some(ca) = self.ca_file {
            opts.tls = Some(
                tls::client_config_from_ca_file(std::path::Path::new(&ca))
                    .map_err(PyValueError::new_err)?,
            );
        }
        Ok(opts)
    }
}

/// A timeout in seconds from Python: finite and not negative.
pub(crate) fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    /// A century: longer waits are that (a Duration or an Instant cannot hold any).
    const LONGEST: f64 = 100.0 * 365.0 * 24.0 * 3600.0;
    if s.is_finite() && s >= 0.0 {
        Ok(Duration::from_secs_f64(s.min(LONGEST)))
    } else {
        Err(PyValueError::new_err(format!(
            "{what} must be a number of seconds, 0 or more (got {s})"
        )))
    }
}
