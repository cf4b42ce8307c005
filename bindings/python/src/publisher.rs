//! `tickwire._native.Publisher`: the library's blocking Publisher, with a thread of its
//! own that answers the node (heartbeats, reconnection) while Python is busy elsewhere.
//! Python's calls and that thread share the publisher through a mutex.

use crate::connect::{seconds, Connect};
use crate::detach::detach;
use crate::errors;
use crate::fork;
use crate::values::encode_dict;
use crate::wait::{Wait, Waker};
use pyo3::exceptions::{PyConnectionError, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_client::proto::{Dictionary, FieldList, UpdateType};
use tickwire_client::{ClientError, PublishError, PublisherOptions};

/// While disconnected with the next reconnect due, how long the driver thread waits
/// at most before looking again (it is the thread that reconnects: not reached).
const RECONNECTING_LOOK: Duration = Duration::from_millis(100);
/// A wait is cut in slices this long, Ctrl-C (Python's signal handlers) looked at
/// between them.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

struct Shared {
    /// `None` once closed.
    publisher: Mutex<Option<tickwire_client::Publisher>>,
    stop: AtomicBool,
    /// The driver thread is in a reconnect's connect (up to connect_timeout a node):
    /// `close` does not wait for it.
    connecting: AtomicBool,
    /// Why the driver thread stopped, if the connection failed for good.
    failed: Mutex<Option<String>>,
    /// Wakes the driver thread: output left queued by a call, or `close`.
    waker: Waker,
}

#[pyclass(frozen, module = "tickwire._native")]
pub struct Publisher {
    shared: Arc<Shared>,
    /// The error of a call that ended the session (a lost connection without
    /// reconnecting): every later call raises it again.
    ended: errors::EndedBy,
    driver: Mutex<Option<JoinHandle<()>>>,
    dictionary: Arc<Dictionary>,
    /// The process it was connected in (a forked child may not use it, nor join its
    /// thread, which the child does not have).
    born: fork::Born,
}

impl Publisher {
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<tickwire_client::Publisher>>> {
        self.born.check("publisher")?;
        if let Some(why) = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(PyConnectionError::new_err(why));
        }
        let guard = self
            .shared
            .publisher
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            return Err(PyConnectionError::new_err("the publisher is closed"));
        }
        Ok(guard)
    }

    /// Runs `f` on the open publisher with the GIL released, so that Python's other
    /// threads go on while it waits (for the driver thread's turn, or for the socket); a
    /// ConnectionError once closed or failed.
    fn with_open<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut tickwire_client::Publisher) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        self.ended
            .run(py, || self.lock(), tickwire_client::Publisher::is_ended, f)
    }

    /// Without `room` (past the library's high-water mark), waits for the node to take what is queued,
    /// in slices with Ctrl-C looked at between them (the library takes a node that
    /// takes nothing for 10 s as lost).
    fn make_room(&self, py: Python<'_>, mut room: bool) -> PyResult<()> {
        while !room {
            py.check_signals()?;
            room = self.with_open(py, |p| {
                p.wait_for_room(SIGNAL_CHECK).map_err(errors::client)
            })?;
        }
        Ok(())
    }

    /// A refresh or an update: `publish` on the open publisher, then what the socket
    /// takes is written at once (the rest is the driver thread's), and past the
    /// library's high-water mark the call waits for room.
    fn publish_with(
        &self,
        py: Python<'_>,
        publish: impl FnOnce(&mut tickwire_client::Publisher) -> PyResult<()> + Send,
    ) -> PyResult<()> {
        let room = self.with_open(py, |p| {
            publish(p)?;
            p.write_pending().map_err(errors::publish)?;
            self.poke_if_queued(p);
            p.wait_for_room(Duration::ZERO).map_err(errors::client)
        })?;
        self.make_room(py, room)
    }

    /// What the socket did not take is the driver thread's to write: woken for it.
    fn poke_if_queued(&self, p: &mut tickwire_client::Publisher) {
        if p.wants_write() {
            self.shared.waker.poke();
        }
    }

    fn encode(&self, fields: &Bound<'_, PyDict>) -> PyResult<Vec<u8>> {
        let mut out = Vec::with_capacity(16 + fields.len() * 12);
        encode_dict(fields, &self.dictionary, &mut out)?;
        Ok(out)
    }
}

/// Answers the node while nobody publishes: dispatch, then wait for input, for the
/// socket to take what waits, for the library's next deadline (a heartbeat to send, a
/// reconnect due) or for a call's poke, whichever is first.
fn drive(shared: Arc<Shared>) {
    // Signals are for the interpreter's threads: Ctrl-C then cuts short the main
    // thread's wait rather than this one's.
    crate::wait::block_signals();
    while !shared.stop.load(Ordering::Acquire) {
        // A reconnect that is due is made with the lock released (its connect waits
        // up to the connect time-out per node): `update` and the rest go on meanwhile.
        let reconnect = {
            let mut guard = shared.publisher.lock().unwrap_or_else(|p| p.into_inner());
            let Some(p) = guard.as_mut() else { return };
            p.take_reconnect()
        };
        if let Some(reconnect) = reconnect {
            // `close` stores `stop` then reads `connecting`; this stores `connecting`
            // then reads `stop` (all sequentially consistent): one of them sees the
            // other's, so `close` never waits for a connect begun after it.
            shared.connecting.store(true, Ordering::SeqCst);
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let made = reconnect.connect();
            shared.connecting.store(false, Ordering::SeqCst);
            let mut guard = shared.publisher.lock().unwrap_or_else(|p| p.into_inner());
            let Some(p) = guard.as_mut() else { return };
            if let Err(e) = p.finish_reconnect(made) {
                *shared.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                return;
            }
        }
        let wait = {
            let mut guard = shared.publisher.lock().unwrap_or_else(|p| p.into_inner());
            let Some(p) = guard.as_mut() else { return };
            // Events (closed items, reconnections) need nothing from a Python
            // publisher: it is not interactive and takes no posts.
            if let Err(e) = p.dispatch(Duration::ZERO) {
                *shared.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                return;
            }
            Wait {
                fd: p.raw_fd(),
                write: p.wants_write(),
                until: p.poll_timeout(),
            }
        };
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        shared.waker.wait(wait, None, RECONNECTING_LOOK);
    }
}

fn update_type(name: &str) -> PyResult<UpdateType> {
    Ok(match name {
        "quote" => UpdateType::Quote,
        "trade" => UpdateType::Trade,
        "other" => UpdateType::Other,
        _ => {
            return Err(PyValueError::new_err(format!(
                "update_type is \"quote\", \"trade\" or \"other\", not {name:?}"
            )))
        }
    })
}

#[pymethods]
impl Publisher {
    #[new]
    #[pyo3(signature = (connect, service, *, start_down=false))]
    fn new(py: Python<'_>, connect: &Connect, service: String, start_down: bool) -> PyResult<Self> {
        let (connect, dictionary) = connect.options("tickwire-python-publisher");
        let mut opts = PublisherOptions::new(connect, service);
        opts.start_down = start_down;
        let mut publisher =
            detach(py, || tickwire_client::Publisher::connect(opts)).map_err(errors::client)?;
        // Waits for the node are made here, in slices that look at Ctrl-C.
        publisher.set_wait_in_publish(false);
        // Made by the driver thread with the lock released, never by a call holding it.
        publisher.reconnect_when_taken_only();
        let shared = Arc::new(Shared {
            publisher: Mutex::new(Some(publisher)),
            stop: AtomicBool::new(false),
            connecting: AtomicBool::new(false),
            failed: Mutex::new(None),
            waker: Waker::new()
                .map_err(|e| PyConnectionError::new_err(format!("cannot make an eventfd: {e}")))?,
        });
        let driver = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("tickwire-publisher".into())
                .spawn(move || drive(shared))
                .map_err(|e| PyConnectionError::new_err(format!("cannot start a thread: {e}")))?
        };
        Ok(Publisher {
            born: fork::Born::now(),
            shared,
            ended: errors::EndedBy::default(),
            driver: Mutex::new(Some(driver)),
            dictionary,
        })
    }

    /// Sets an item's whole image (a dict of field name -> value) and sends it.
    fn refresh(&self, py: Python<'_>, item: &str, fields: &Bound<'_, PyDict>) -> PyResult<()> {
        let encoded = self.encode(fields)?;
        self.publish_with(py, |p| {
            p.publish_refresh(item, FieldList::from_trusted(&encoded))
                .map_err(errors::publish)?;
            Ok(())
        })
    }

    /// Merges the fields into the item's image and sends them as an update. The item
    /// needs a refresh first.
    #[pyo3(signature = (item, fields, *, update_type="other", do_not_conflate=false))]
    fn update(
        &self,
        py: Python<'_>,
        item: &str,
        fields: &Bound<'_, PyDict>,
        update_type: &str,
        do_not_conflate: bool,
    ) -> PyResult<()> {
        let kind = self::update_type(update_type)?;
        let encoded = self.encode(fields)?;
        self.publish_with(py, |p| {
            let id = p.item(item).ok_or_else(|| {
                PyKeyError::new_err(format!(
                    "{item:?} has no image yet: publish a refresh of it first"
                ))
            })?;
            p.publish_update(id, kind, FieldList::from_trusted(&encoded), do_not_conflate)
                .map_err(errors::publish)
        })
    }

    /// Announces the service up (or down).
    fn set_service_up(&self, py: Python<'_>, up: bool) -> PyResult<()> {
        self.with_open(py, |p| {
            p.set_service_up(up).map_err(errors::publish)?;
            self.poke_if_queued(p);
            Ok(())
        })
    }

    /// Waits up to `timeout` seconds until everything published is written.
    #[pyo3(signature = (timeout=5.0))]
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let deadline = Instant::now() + seconds("timeout", timeout)?;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK);
            let last = Instant::now() + slice >= deadline;
            let written = self.with_open(py, |p| match p.flush(slice) {
                Ok(()) => Ok(true),
                Err(PublishError::Client(ClientError::Timeout(_))) if !last => Ok(false),
                Err(e) => Err(errors::publish(e)),
            })?;
            if written {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// Connected now (False while the library reconnects).
    #[getter]
    fn connected(&self, py: Python<'_>) -> bool {
        // The thread that answers the node may hold the lock while the library
        // reconnects: waited for without the GIL.
        if !self.born.here() {
            return false;
        }
        detach(py, || {
            let guard = self
                .shared
                .publisher
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            guard.as_ref().is_some_and(|p| p.is_connected())
        })
    }

    /// Updates sent to the node so far.
    #[getter]
    fn updates_sent(&self, py: Python<'_>) -> PyResult<u64> {
        detach(py, || {
            Ok(self.lock()?.as_mut().expect("open").updates_sent())
        })
    }

    /// The names of the items published.
    #[getter]
    fn items(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        detach(py, || {
            let guard = self.lock()?;
            let p = guard.as_ref().expect("open");
            Ok((0..p.item_count())
                .filter_map(|id| p.item_name(id).map(str::to_string))
                .collect())
        })
    }

    /// Writes what is queued (up to `timeout` seconds), stops the thread that answers
    /// the node and closes the connection. The node marks the items suspect. In a
    /// process forked after it connected, it does nothing (the connection is the
    /// parent's).
    #[pyo3(signature = (timeout=5.0))]
    fn close(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds("timeout", timeout)?;
        if !self.born.here() {
            return Ok(());
        }
        detach(py, || {
            self.shared.stop.store(true, Ordering::SeqCst);
            self.shared.waker.close();
            if let Some(driver) = self.driver.lock().unwrap_or_else(|p| p.into_inner()).take() {
                // A thread in a connect ends by itself once it returns: it finds the
                // publisher gone (taken below) and drops what it opened.
                if !self.shared.connecting.load(Ordering::SeqCst) {
                    let _ = driver.join();
                }
            }
            let taken = self
                .shared
                .publisher
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            match taken {
                Some(mut p) if p.is_connected() => p.flush(timeout).map_err(errors::publish),
                _ => Ok(()),
            }
        })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.waker.close();
    }
}
