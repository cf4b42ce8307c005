//! The connection arguments both classes take (`tickwire._native.Connect`), turned into
//! the library's options and the field dictionary.

use crate::values::load_dictionary;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use tickwire_client::proto::Dictionary;
use tickwire_client::{tls, ConnectOptions};

/// Made before the class that connects with it: checked, and its files (the TLS CA
/// file, the dictionary) loaded, once.
#[pyclass(frozen, module = "tickwire._native")]
pub(crate) struct Connect {
    /// Its application is set by the class that connects, unless one is given.
    options: ConnectOptions,
    application: Option<String>,
    dictionary: Arc<Dictionary>,
}

#[pymethods]
impl Connect {
    #[new]
    #[pyo3(signature = (address, *, user=None, token=None, application=None,
        connect_timeout=5.0, reconnect=true, ca_file=None, dictionary=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        address: String,
        user: Option<String>,
        token: Option<String>,
        application: Option<String>,
        connect_timeout: f64,
        reconnect: bool,
        ca_file: Option<String>,
        dictionary: Option<String>,
    ) -> PyResult<Self> {
        let mut options = ConnectOptions::new(address);
        if let Some(user) = user {
            options.user = user;
        }
        if let Some(token) = token {
            options.token = token;
        }
        if connect_timeout <= 0.0 {
            return Err(PyValueError::new_err(format!(
                "connect_timeout must be more than 0 seconds (got {connect_timeout})"
            )));
        }
        options.connect_timeout = seconds("connect_timeout", connect_timeout)?;
        options.reconnect = reconnect;
        if let Some(ca) = ca_file {
            options.tls = Some(
                tls::client_config_from_ca_file(std::path::Path::new(&ca))
                    .map_err(PyValueError::new_err)?,
            );
        }
        Ok(Connect {
            options,
            application,
            dictionary: load_dictionary(dictionary.as_deref())?,
        })
    }
}

impl Connect {
    /// The library's options (with `default_application` unless one is given) and the
    /// field dictionary.
    pub(crate) fn options(&self, default_application: &str) -> (ConnectOptions, Arc<Dictionary>) {
        let mut options = self.options.clone();
        options.application = self
            .application
            .clone()
            .unwrap_or_else(|| default_application.to_string());
        (options, self.dictionary.clone())
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
