//! The `tickwire._native` Python extension: the Rust client library's [`Subscriber`] and
//! [`Publisher`] (and so its protocol code, reconnection and watchlist) behind a small
//! Python API. The `tickwire` Python package (python/tickwire) wraps it with iteration,
//! asyncio, snapshots and DataFrames.
//!
//! Every call that waits on the network releases the GIL.
//!
//! [`Subscriber`]: tickwire_client::Subscriber
//! [`Publisher`]: tickwire_client::Publisher

mod connect;
mod detach;
mod errors;
mod event;
mod fork;
mod publisher;
mod subscriber;
mod values;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    fork::watch();
    values::import_datetime_types(py)?;
    m.add("TickwireError", py.get_type::<errors::TickwireError>())?;
    m.add("LoginError", py.get_type::<errors::LoginError>())?;
    m.add_class::<connect::Connect>()?;
    m.add_class::<subscriber::Subscriber>()?;
    m.add_class::<publisher::Publisher>()?;
    m.add_class::<event::Event>()?;
    m.add_function(wrap_pyfunction!(event::_event, m)?)?;
    m.add_function(wrap_pyfunction!(values::field_names, m)?)?;
    Ok(())
}
