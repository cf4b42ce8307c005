//! Errors as Python exceptions: a lost or refused connection is a `ConnectionError`, a
//! wait that ran out a `TimeoutError`, a login the node rejected a `LoginError` carrying
//! the node's reason, anything else from the node a `TickwireError`.

use crate::detach::detach;
use pyo3::exceptions::{PyConnectionError, PyException, PyTimeoutError, PyValueError};
use pyo3::PyErr;
use tickwire_client::publishing::PublishError;
use tickwire_client::ClientError;

pyo3::create_exception!(
    tickwire,
    TickwireError,
    PyException,
    "An error the node or the protocol reported."
);
pyo3::create_exception!(
    tickwire,
    LoginError,
    TickwireError,
    "The node rejected the login (user, token or entitlement); the message has its reason."
);

pub(crate) fn client(e: ClientError) -> PyErr {
    let text = e.to_string();
    match e {
        ClientError::Connect { .. }
        | ClientError::Refused(_)
        | ClientError::Disconnected(_)
        | ClientError::Io(_) => PyConnectionError::new_err(text),
        ClientError::Timeout(_) => PyTimeoutError::new_err(text),
        ClientError::Rejected { .. } => LoginError::new_err(text),
        ClientError::Encode(_) => PyValueError::new_err(text),
        // Protocol and decoding errors, and any kind a later client library adds.
        _ => TickwireError::new_err(text),
    }
}

pub(crate) fn publish(e: PublishError) -> PyErr {
    match e {
        PublishError::Client(e) => client(e),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// The error that ended a session, raised again by every later call. It is kept as its
/// type and text and raised new each time: a kept exception's traceback would hold the
/// frames that raised it, and through them the object that keeps it, a cycle Python's
/// collector cannot see through the native object.
#[derive(Default)]
pub(crate) struct EndedBy(std::sync::Mutex<Option<(pyo3::Py<pyo3::types::PyType>, String)>>);

impl EndedBy {
    /// `Err` with the ending error, if the session has ended.
    pub(crate) fn check(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match kept.as_ref() {
            Some((kind, text)) => Err(PyErr::from_type(kind.bind(py).clone(), text.clone())),
            None => Ok(()),
        }
    }

    /// Runs `f` on the session that `lock` guards, with the GIL released so that
    /// Python's other threads go on while it waits (for the lock, or for the node). An
    /// error after which `is_ended` says the session is over is kept; once kept, every
    /// call raises it without running.
    pub(crate) fn run<S, G, T>(
        &self,
        py: pyo3::Python<'_>,
        lock: impl FnOnce() -> pyo3::PyResult<G> + Send,
        is_ended: impl FnOnce(&S) -> bool + Send,
        f: impl FnOnce(&mut S) -> pyo3::PyResult<T> + Send,
    ) -> pyo3::PyResult<T>
    where
        G: std::ops::DerefMut<Target = Option<S>>,
        T: Send,
    {
        self.check(py)?;
        let (result, ended) = detach(py, || {
            let mut guard = lock()?;
            let session = guard.as_mut().expect("locked: not closed");
            let result = f(session);
            Ok::<_, PyErr>((result, is_ended(session)))
        })?;
        if let (Err(e), true) = (&result, ended) {
            self.keep(py, e);
        }
        result
    }

    /// Keeps `e` as the error that ended the session.
    pub(crate) fn keep(&self, py: pyo3::Python<'_>, e: &PyErr) {
        let kind = e.get_type(py).unbind();
        let text = e.value(py).to_string();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((kind, text));
    }
}
