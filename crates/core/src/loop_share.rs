//! A share of the event loop for work any peer can ask for at will (the HTTP item name
//! queries, TLS handshakes): so many units a second, at most a second's worth in hand.

use std::time::{Duration, Instant};

/// Units refilled at `per_s` up to a second's worth; spending may take it below zero,
/// and what comes next then waits for what was taken.
#[derive(Debug, Clone)]
pub struct LoopShare {
    per_s: f64,
    in_hand: f64,
    at: Instant,
}

impl LoopShare {
    /// `per_s` units a second (more than zero), a second's worth in hand.
    pub fn new(per_s: f64, now: Instant) -> Self {
        let per_s = per_s.max(f64::MIN_POSITIVE);
        LoopShare {
            per_s,
            in_hand: per_s,
            at: now,
        }
    }

    /// Units a second.
    pub fn per_s(&self) -> f64 {
        self.per_s
    }

    /// When it was last looked at.
    pub fn last_asked(&self) -> Instant {
        self.at
    }

    /// Refilled to `now` (the clock only goes forward): whether at least `need` is in
    /// hand, or how long until it is.
    pub fn has(&mut self, need: f64, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.in_hand = (self.in_hand + elapsed * self.per_s).min(self.per_s);
        match self.in_hand >= need {
            true => Ok(()),
            false => Err(Duration::from_secs_f64((need - self.in_hand) / self.per_s)),
        }
    }

    /// Takes `cost` units if the share is not spent (whatever the cost: a piece of
    /// work larger than a second's worth goes too); else how long until it is not.
    pub fn take(&mut self, cost: f64, now: Instant) -> Result<(), Duration> {
        self.has(0.0, now)?;
        self.spend(cost);
        Ok(())
    }

    /// Takes `cost` units (after [`LoopShare::has`] said yes).
    pub fn spend(&mut self, cost: f64) {
        self.in_hand -= cost;
    }
}
