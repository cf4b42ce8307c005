//! Prometheus standing in: `GET /metrics` on a node's HTTP port once a second while a
//! rig runs (`bench ... --scrape-metrics`), so the lab shows what being watched costs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often Prometheus would scrape a node that is watched closely.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// A thread scraping one node's `/metrics`; counts what it got.
pub struct Scraper {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

impl Scraper {
    /// Scrapes `http://{addr}/metrics` every [`INTERVAL`] until dropped.
    pub fn start(addr: String) -> Scraper {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let thread = {
            let (stop, counts) = (stop.clone(), counts.clone());
            std::thread::Builder::new()
                .name("metrics-scraper".into())
                .spawn(move || {
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        if Instant::now() >= next {
                            match scrape(&addr) {
                                Ok(n) => {
                                    counts.ok.fetch_add(1, Ordering::Relaxed);
                                    counts.bytes.fetch_add(n as u64, Ordering::Relaxed);
                                }
                                Err(_) => {
                                    counts.failed.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            next += INTERVAL;
                        }
                        // Short sleeps: a rig that stops is not held up by a second.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .expect("spawn the metrics scraper")
        };
        Scraper {
            stop,
            counts,
            thread: Some(thread),
        }
    }

    /// Scrapes answered, failed, and the bytes of the answers so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.counts.ok.load(Ordering::Relaxed),
            self.counts.failed.load(Ordering::Relaxed),
            self.counts.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One scrape; the size of the answer.
fn scrape(addr: &str) -> std::io::Result<usize> {
    Ok(get_metrics(addr)?.len())
}

/// A counter's value now, from the node's `/metrics` (the lab reads a node's counters
/// as Prometheus would, never from its log): `series` as exposed, labels included
/// (`tickwire_backbone_naks_total{direction="sent"}`).
pub fn counter(http: Option<&str>, series: &str) -> anyhow::Result<u64> {
    let http = http.ok_or_else(|| anyhow::anyhow!("the node serves no /metrics (no --ws)"))?;
    match metric(http, series)? {
        Some(v) => Ok(v as u64),
        None => anyhow::bail!("http://{http}/metrics has no {series}"),
    }
}

/// A sample's value in one scrape of `http://{addr}/metrics`: the first line of the
/// exposition whose series is `name` (with its labels as exposed, when it has any).
pub fn metric(addr: &str, name: &str) -> std::io::Result<Option<f64>> {
    let body = get_metrics(addr)?;
    let text = String::from_utf8_lossy(&body);
    Ok(text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.split_whitespace().next()?.parse().ok())?
    }))
}

/// `GET /metrics`, the whole answer.
fn get_metrics(addr: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        // As Prometheus asks: OpenMetrics first.
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    if !body.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("not 200 OK"));
    }
    Ok(body)
}
