//! Errors as Python exceptions: a lost or refused connection is a `ConnectionError`, a
//! wait that ran out a `TimeoutError`, a login the node rejected a `LoginError` carrying
//! the node's reason, anything else from the node a `TickwireError`.

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
