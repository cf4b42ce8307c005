//! What waking a thread on an idle CPU costs on this machine: the floor under every
//! latency figure the lab prints.
//!
//! A latency sample crosses at least two wake-ups (the publisher's write wakes the node,
//! the node's write wakes the subscriber). When a CPU has gone idle, the kernel has
//! halted it, and on a virtual machine whose idle CPUs halt at once (no guest halt
//! polling) bringing it back takes the hypervisor tens of microseconds. The lab measures
//! that once per run, the way the ladders meet it: two threads on two CPUs exchange one
//! byte over loopback TCP, each exchange a millisecond after the last (as the ladders'
//! bursts are), so both CPUs are idle when it starts. A round trip is two wake-ups.
//!
//! The machine's idle settings that decide this (the cpuidle driver and governor, the
//! guest halt polling limit) are read from sysfs: a figure from a machine that polls
//! before halting is not comparable with one from a machine that does not.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::{IdleSettings, WakeRoundTrip};

/// Round trips measured (after `WARM_UP` that are not).
pub const ROUND_TRIPS: usize = 500;
/// Round trips before measuring: connection set-up, first faults.
const WARM_UP: usize = 20;
/// Idle time before each round trip, as between two bursts of a latency ladder.
pub const IDLE_BETWEEN: Duration = Duration::from_millis(1);
/// The measurement stops after this long whatever it has (a machine too loaded to
/// finish is still described).
const TIME_LIMIT: Duration = Duration::from_secs(5);

/// Reads the idle settings; never fails.
pub fn idle_settings() -> IdleSettings {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    IdleSettings {
        driver: read("/sys/devices/system/cpu/cpuidle/current_driver"),
        governor: read("/sys/devices/system/cpu/cpuidle/current_governor_ro")
            .or_else(|| read("/sys/devices/system/cpu/cpuidle/current_governor")),
        guest_halt_poll_ns: read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
            .and_then(|s| s.parse().ok()),
    }
}

/// The first two CPUs this process may run on (one twice if it may use only one).
fn two_allowed_cpus() -> [usize; 2] {
    // SAFETY: cpu_set_t is plain data, filled by sched_getaffinity for this thread.
    let allowed: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return [0, 0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .take(2)
            .collect()
    };
    match allowed[..] {
        [a, b] => [a, b],
        [a] => [a, a],
        _ => [0, 0],
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Measures [`ROUND_TRIPS`] round trips (fewer if `TIME_LIMIT` passes first).
pub fn measure() -> Result<WakeRoundTrip> {
    let cpus = two_allowed_cpus();
    let listener = TcpListener::bind("127.0.0.1:0").context("wake-up probe: bind")?;
    let addr = listener.local_addr()?;
    let echo =
        std::thread::Builder::new()
            .name("wake-echo".into())
            .spawn(move || -> Result<()> {
                crate::stats::pin(&[cpus[1]])?;
                let (mut s, _) = listener.accept()?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(TIME_LIMIT))?;
                let mut b = [0u8; 1];
                // Echo until the other side closes (read returns 0) or goes silent.
                while s.read(&mut b)? == 1 {
                    s.write_all(&b)?;
                }
                Ok(())
            })?;
    let pinger = std::thread::Builder::new().name("wake-ping".into()).spawn(
        move || -> Result<Vec<u64>> {
            crate::stats::pin(&[cpus[0]])?;
            let mut s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TIME_LIMIT))?;
            let started = Instant::now();
            let mut rtts = Vec::with_capacity(ROUND_TRIPS);
            let mut b = [0u8; 1];
            for i in 0..WARM_UP + ROUND_TRIPS {
                if started.elapsed() > TIME_LIMIT {
                    break;
                }
                std::thread::sleep(IDLE_BETWEEN);
                let t = Instant::now();
                s.write_all(b"w")?;
                s.read_exact(&mut b)?;
                if i >= WARM_UP {
                    rtts.push(t.elapsed().as_nanos() as u64);
                }
            }
            Ok(rtts)
        },
    )?;
    let rtts = pinger
        .join()
        .map_err(|_| anyhow::anyhow!("wake-up probe: thread panicked"))??;
    // The pinger's socket is closed: the echo thread reads 0 and ends.
    echo.join()
        .map_err(|_| anyhow::anyhow!("wake-up probe: thread panicked"))??;
    anyhow::ensure!(
        !rtts.is_empty(),
        "wake-up probe: no round trip in {TIME_LIMIT:?}"
    );
    let mut sorted = rtts;
    sorted.sort_unstable();
    Ok(WakeRoundTrip {
        p50_ns: percentile(&sorted, 0.5),
        p90_ns: percentile(&sorted, 0.9),
        min_ns: sorted[0],
        count: sorted.len(),
        idle_us: IDLE_BETWEEN.as_micros() as u64,
        cpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_is_measured_between_two_allowed_cpus() {
        let w = measure().unwrap();
        assert!(w.count > 0 && w.count <= ROUND_TRIPS);
        assert!(w.min_ns > 0 && w.min_ns <= w.p50_ns && w.p50_ns <= w.p90_ns);
        let cpus = two_allowed_cpus();
        assert_eq!(w.cpus, cpus);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
            assert_ne!(cpus[0], cpus[1]);
        }
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&v, 0.5), 6);
        assert_eq!(percentile(&v, 0.9), 9);
        assert_eq!(percentile(&[7], 0.9), 7);
    }

    #[test]
    fn idle_settings_read_what_sysfs_exposes() {
        let s = idle_settings();
        // Where the haltpoll module exposes its limit, it is read as a number.
        if std::path::Path::new("/sys/module/haltpoll/parameters/guest_halt_poll_ns").exists() {
            assert!(s.guest_halt_poll_ns.is_some());
        }
        if std::path::Path::new("/sys/devices/system/cpu/cpuidle/current_driver").exists() {
            assert!(s.driver.is_some());
        }
    }
}
