//! `tickwire._native.Subscriber`: the library's blocking Subscriber behind a mutex, so
//! the GIL can be released while it waits and an asyncio executor thread can drive it.

use crate::connect::{seconds, Connect};
use crate::detach::detach;
use crate::errors;
use crate::event::Event;
use crate::fork;
use crate::values::FieldNames;
use crate::wait::{Wait, Waker};
use pyo3::exceptions::{PyConnectionError, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tickwire_client::proto::{Dictionary, FieldList, ServiceState};
use tickwire_client::{Event as ClientEvent, RequestOptions, StreamId};

/// While another thread makes a reconnect, how long a wait with no socket to watch
/// lasts at most before looking again (that thread pokes it once connected).
const RECONNECTING_LOOK: Duration = Duration::from_millis(100);

struct Connected {
    sub: tickwire_client::Subscriber,
    /// Open streams by (service, item), to close them by name.
    streams: HashMap<(String, String), StreamId>,
    /// Events that arrived while `answer` waited for a post's answer: delivered first.
    backlog: VecDeque<ClientEvent>,
    next_post_id: u32,
    /// The (service, item) of posts sent by `send_post` whose answer has not come, so
    /// that the answer's event names them.
    unanswered: std::collections::BTreeMap<u32, (String, String)>,
}

/// Posts waiting for an answer, at most (the oldest are forgotten past it: their
/// answers would come without names).
const MAX_UNANSWERED: usize = 4096;

#[pyclass(frozen, module = "tickwire._native")]
pub struct Subscriber {
    /// `None` once disconnected.
    state: Mutex<Option<Connected>>,
    /// The error that ended the session (a lost connection without reconnecting, a
    /// refused login): every later call raises it again.
    ended: errors::EndedBy,
    dictionary: Arc<Dictionary>,
    names: FieldNames,
    /// The process it was connected in (a forked child may not use it).
    born: fork::Born,
    /// Wakes the threads waiting for the node (they wait without the lock).
    waker: Waker,
}

impl Subscriber {
    /// Runs `f` on the connection with the GIL released, so that Python's other threads
    /// go on while it waits (for the lock, or for the node); a ConnectionError once
    /// disconnected.
    fn with_connected<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Connected) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        self.ended
            .run(py, || self.lock(), |c: &Connected| c.sub.is_ended(), f)
    }

    /// As `with_connected`, for a call that writes to the node: what the socket did not
    /// take is written by a thread waiting for the node, woken for it.
    fn writing<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Connected) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        self.with_connected(py, |c| {
            let result = f(c);
            if c.sub.wants_write() {
                self.waker.poke();
            }
            result
        })
    }

    /// Waits for the node as `wait` says, up to `deadline`, without the GIL and without
    /// the lock (another thread's calls go on meanwhile); then runs Python's signal
    /// handlers (Ctrl-C's KeyboardInterrupt), a signal having cut the wait short.
    fn wait(&self, py: Python<'_>, wait: Wait, deadline: Option<Instant>) -> PyResult<()> {
        // A signal handled since the last look (before the wait could be cut short by
        // it) is taken now, not at the wait's end (a heartbeat away).
        py.check_signals()?;
        detach(py, || self.waker.wait(wait, deadline, RECONNECTING_LOOK));
        py.check_signals()
    }

    /// Makes a reconnect that is due with the lock released (its connect waits up to
    /// the connect time-out per node): the subscriber's other calls, an asyncio
    /// loop's among them, go on meanwhile.
    fn reconnect_unlocked(&self, py: Python<'_>) -> PyResult<()> {
        let Some(reconnect) = self.with_connected(py, |c| Ok(c.sub.take_reconnect()))? else {
            return Ok(());
        };
        let made = detach(py, || reconnect.connect());
        let finished =
            self.with_connected(py, |c| c.sub.finish_reconnect(made).map_err(errors::client));
        // Threads waiting meanwhile had no socket to watch: one is there now (or the
        // next try's time).
        self.waker.poke();
        finished
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Connected>>> {
        self.born.check("subscriber")?;
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            return Err(PyConnectionError::new_err("the subscriber is disconnected"));
        }
        Ok(guard)
    }

    fn view(&self, view: Option<Vec<Bound<'_, PyAny>>>) -> PyResult<Option<Vec<i16>>> {
        let Some(view) = view else { return Ok(None) };
        view.iter()
            .map(|f| {
                if let Ok(name) = f.extract::<String>() {
                    self.dictionary.fid(&name).ok_or_else(|| {
                        PyKeyError::new_err(format!("field {name:?} is not in the dictionary"))
                    })
                } else if f.is_instance_of::<PyBool>() {
                    Err(PyValueError::new_err(
                        "a view lists field names or field ids",
                    ))
                } else {
                    let id = f.extract::<i128>().map_err(|_| {
                        PyValueError::new_err("a view lists field names or field ids")
                    })?;
                    i16::try_from(id).map_err(|_| {
                        PyKeyError::new_err(format!("field id {id} is not in the dictionary"))
                    })
                }
            })
            .collect::<PyResult<Vec<i16>>>()
            .map(Some)
    }
}

/// What a thread waiting for the node watches: the library's socket, its output, its
/// next deadline.
fn wait_of(sub: &mut tickwire_client::Subscriber) -> Wait {
    Wait {
        fd: sub.raw_fd(),
        write: sub.wants_write(),
        until: sub.poll_timeout(),
    }
}

#[pymethods]
impl Subscriber {
    #[new]
    fn new(py: Python<'_>, connect: &Connect) -> PyResult<Self> {
        let (opts, dictionary) = connect.options("tickwire-python");
        let mut sub =
            detach(py, || tickwire_client::Subscriber::connect(opts)).map_err(errors::client)?;
        // Made by `reconnect_unlocked` alone, never by a call holding the lock.
        sub.reconnect_when_taken_only();
        let waker = Waker::new()
            .map_err(|e| PyConnectionError::new_err(format!("cannot make an eventfd: {e}")))?;
        Ok(Subscriber {
            waker,
            born: fork::Born::now(),
            ended: errors::EndedBy::default(),
            state: Mutex::new(Some(Connected {
                sub,
                streams: HashMap::new(),
                backlog: VecDeque::new(),
                next_post_id: 1,
                unanswered: Default::default(),
            })),
            names: FieldNames::new(py, &dictionary),
            dictionary,
        })
    }

    /// Opens a stream per item; returns their stream ids. An item already open is not
    /// opened twice (its id is returned again).
    #[pyo3(signature = (service, items, *, view=None, snapshot=false))]
    fn subscribe(
        &self,
        py: Python<'_>,
        service: &str,
        items: Vec<String>,
        view: Option<Vec<Bound<'_, PyAny>>>,
        snapshot: bool,
    ) -> PyResult<Vec<StreamId>> {
        let view = self.view(view)?;
        self.writing(py, |c| {
            let mut ids = Vec::with_capacity(items.len());
            for item in items {
                let key = (service.to_string(), item);
                if let Some(&sid) = c.streams.get(&key).filter(|_| !snapshot) {
                    ids.push(sid);
                    continue;
                }
                let options = RequestOptions {
                    snapshot,
                    view: view.clone(),
                    replay: None,
                };
                let sid = c
                    .sub
                    .subscribe(service, &key.1, options)
                    .map_err(errors::client)?;
                if !snapshot {
                    c.streams.insert(key, sid);
                }
                ids.push(sid);
            }
            Ok(ids)
        })
    }

    /// Closes streams by id: those of a snapshot given up on (left open, each would be
    /// asked for again after every reconnection). An id not open is skipped.
    fn close_ids(&self, py: Python<'_>, sids: Vec<u32>) -> PyResult<()> {
        self.writing(py, |c| {
            for sid in sids {
                c.sub.unsubscribe(sid).map_err(errors::client)?;
            }
            Ok(())
        })
    }

    /// Closes the streams of these items; an item with no open stream is a KeyError.
    fn close(&self, py: Python<'_>, service: &str, items: Vec<String>) -> PyResult<()> {
        self.writing(py, |c| {
            for item in items {
                let key = (service.to_string(), item);
                let Some(sid) = c.streams.remove(&key) else {
                    return Err(PyKeyError::new_err(format!(
                        "no open stream for {}/{}",
                        key.0, key.1
                    )));
                };
                c.sub.unsubscribe(sid).map_err(errors::client)?;
            }
            Ok(())
        })
    }

    /// Changes the view of the items' open streams where they stand (None: every
    /// field), with no new image; an item with no open stream is a KeyError.
    #[pyo3(signature = (service, items, *, view=None))]
    fn change_view(
        &self,
        py: Python<'_>,
        service: &str,
        items: Vec<String>,
        view: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<()> {
        let view = self.view(view)?;
        self.writing(py, |c| {
            // Every item first: an unknown one changes none.
            let mut sids = Vec::with_capacity(items.len());
            for item in items {
                let key = (service.to_string(), item);
                let Some(&sid) = c.streams.get(&key) else {
                    return Err(PyKeyError::new_err(format!(
                        "no open stream for {}/{}",
                        key.0, key.1
                    )));
                };
                sids.push(sid);
            }
            for sid in sids {
                c.sub
                    .change_view(sid, view.clone())
                    .map_err(errors::client)?;
            }
            Ok(())
        })
    }

    /// Waits up to `timeout` seconds (forever with None) for events and returns every
    /// one available then (an empty list if none came). The GIL is released while
    /// waiting; Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn next_events(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Event>> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + seconds("timeout", t)?),
            None => None,
        };
        // What arrives is taken with the lock held and no wait; between, the thread
        // waits for the node without the lock (`wait`).
        loop {
            self.reconnect_unlocked(py)?;
            let (got, mut named, wait) = self.with_connected(py, |c| {
                let mut got: Vec<ClientEvent> = c.backlog.drain(..).collect();
                c.sub
                    .dispatch(Duration::ZERO, |e| got.push(ClientEvent::from(&e)))
                    .map_err(errors::client)?;
                // A stream that ended is no longer open by name.
                for e in &got {
                    let (ClientEvent::Refresh {
                        service,
                        name,
                        stream,
                        state,
                        ..
                    }
                    | ClientEvent::Status {
                        service,
                        name,
                        stream,
                        state,
                    }) = e
                    else {
                        continue;
                    };
                    let key = (service.clone(), name.clone());
                    if state.stream != tickwire_client::proto::StreamState::Open
                        && c.streams.get(&key) == Some(stream)
                    {
                        c.streams.remove(&key);
                    }
                }
                // The answers to `send_post`'s posts: named by what was posted.
                let mut named = HashMap::new();
                for e in &got {
                    if let ClientEvent::Ack { post_id, .. } = e {
                        if let Some(names) = c.unanswered.remove(post_id) {
                            named.insert(*post_id, names);
                        }
                    }
                }
                Ok((got, named, wait_of(&mut c.sub)))
            })?;
            let events = got
                .into_iter()
                .filter_map(|e| Event::from_client(py, e, &self.names).transpose())
                .map(|ev| {
                    let mut ev = ev?;
                    if let Some((service, item)) = ev.post_id.and_then(|id| named.remove(&id)) {
                        ev.service = service;
                        ev.item = item;
                    }
                    Ok(ev)
                })
                .collect::<PyResult<Vec<Event>>>()?;
            if !events.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(events);
            }
            self.wait(py, wait, deadline)?;
        }
    }

    /// Sends a post (contributes field values to an item) and returns its id at once.
    /// With `ack` its answer is awaited with `answer`, or comes as an "ack" event from
    /// `next_events` (with this service and item), the id in its `post_id`.
    #[pyo3(signature = (service, item, fields, *, ack=true))]
    fn send_post(
        &self,
        py: Python<'_>,
        service: &str,
        item: &str,
        fields: &Bound<'_, pyo3::types::PyDict>,
        ack: bool,
    ) -> PyResult<u32> {
        let mut encoded = Vec::new();
        crate::values::encode_dict(fields, &self.dictionary, &mut encoded)?;
        self.writing(py, |c| {
            let id = c.next_post_id;
            c.next_post_id = c.next_post_id.wrapping_add(1).max(1);
            let to = tickwire_client::PostTo::Item {
                service,
                name: item,
            };
            c.sub
                .post(to, id, FieldList::from_trusted(&encoded), ack)
                .map_err(errors::client)?;
            if ack {
                if c.unanswered.len() >= MAX_UNANSWERED {
                    c.unanswered.pop_first();
                }
                c.unanswered
                    .insert(id, (service.to_string(), item.to_string()));
            }
            Ok(id)
        })
    }

    /// Waits up to `timeout` seconds for the answer to a post that `send_post` sent with
    /// `ack`, and returns it (an "ack" Event: `accepted`, and for a refusal `nak` and
    /// `text`). Events of the streams that arrive meanwhile are kept for `next_events`;
    /// a late answer comes from it, unnamed.
    #[pyo3(signature = (post_id, timeout=5.0))]
    fn answer(&self, py: Python<'_>, post_id: u32, timeout: f64) -> PyResult<Event> {
        let deadline = Instant::now() + seconds("timeout", timeout)?;
        let (service, item) = self
            .with_connected(py, |c| Ok(c.unanswered.remove(&post_id)))?
            .ok_or_else(|| PyKeyError::new_err(format!("post {post_id} awaits no answer")))?;
        loop {
            self.reconnect_unlocked(py)?;
            let (answer, wait) = self.with_connected(py, |c| {
                let mut got = Vec::new();
                c.sub
                    .dispatch(Duration::ZERO, |e| got.push(ClientEvent::from(&e)))
                    .map_err(errors::client)?;
                let mut answer = None;
                for e in got {
                    match e {
                        ClientEvent::Ack { post_id: id, .. } if id == post_id => answer = Some(e),
                        other => c.backlog.push_back(other),
                    }
                }
                Ok((answer, wait_of(&mut c.sub)))
            })?;
            if let Some(a) = answer {
                let mut ev = Event::from_client(py, a, &self.names)?.expect("an ack");
                ev.service = service;
                ev.item = item;
                return Ok(ev);
            }
            if Instant::now() >= deadline {
                return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                    "no answer to post {post_id} to {service}/{item} within {timeout} s"
                )));
            }
            self.wait(py, wait, Some(deadline))?;
        }
    }

    /// The connection's socket (for an event loop to watch), `None` while the library
    /// reconnects.
    fn fileno(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        detach(py, || {
            Ok(self.lock()?.as_ref().and_then(|c| c.sub.raw_fd()))
        })
    }

    /// Seconds until the library's next deadline (a heartbeat to send, the node's
    /// silence to judge, the next reconnect), when `next_events(0)` is due even if
    /// nothing arrives (0 if it is already), and whether output waits for the socket to
    /// be writable: what an event loop watching `fileno()` waits for besides input.
    fn wait_hint(&self, py: Python<'_>) -> PyResult<(Option<f64>, bool)> {
        self.with_connected(py, |c| {
            let until = c
                .sub
                .poll_timeout()
                .map(|t| t.saturating_duration_since(Instant::now()).as_secs_f64());
            Ok((until, c.sub.wants_write()))
        })
    }

    /// The node's services and their state ("up" or "down"), as its directory says.
    fn services(&self, py: Python<'_>) -> PyResult<HashMap<String, &'static str>> {
        detach(py, || {
            let guard = self.lock()?;
            let c = guard.as_ref().expect("locked connected");
            Ok(c.sub
                .directory()
                .iter()
                .map(|(name, state)| {
                    let s = match state {
                        ServiceState::Up => "up",
                        _ => "down",
                    };
                    (name.clone(), s)
                })
                .collect())
        })
    }

    /// Connected now (False while the library reconnects).
    #[getter]
    fn connected(&self, py: Python<'_>) -> bool {
        // Another thread's call may hold the lock while the library reconnects: waited
        // for without the GIL, so the interpreter's other threads go on.
        if !self.born.here() {
            return false;
        }
        detach(py, || {
            let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
            guard.as_ref().is_some_and(|c| c.sub.is_connected())
        })
    }

    /// Times the connection was re-established.
    #[getter]
    fn reconnects(&self, py: Python<'_>) -> PyResult<u64> {
        detach(py, || {
            Ok(self.lock()?.as_ref().expect("connected").sub.reconnects())
        })
    }

    /// Closes the connection; the subscriber cannot be used afterwards. In a process
    /// forked after it connected, it does nothing (the connection is the parent's).
    fn disconnect(&self, py: Python<'_>) {
        if !self.born.here() {
            return;
        }
        // The lock is waited for without the GIL, as in every call that may wait for it.
        detach(py, || {
            let taken = self.state.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(taken);
            // Threads waiting for the node find it closed.
            self.waker.close();
        });
    }
}
