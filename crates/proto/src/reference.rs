//! The reference Level 1 update used by the performance lab and the demo feed: a quote
//! and last trade with sizes, volume, time of the event and the latency timestamp
//! TIM_TRK_1. docs/PROTOCOL.md gives its size on the wire.

use crate::dictionary::fid;
use crate::field::{FieldListWriter, Real, Time, Value};

/// One Level 1 quote-and-trade record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level1 {
    /// Prices in 1/10,000 (exponent -4).
    pub bid: i64,
    /// Ask price (mantissa, 4 decimals).
    pub ask: i64,
    /// Last trade price (mantissa, 4 decimals).
    pub last: i64,
    /// Net change (mantissa, 4 decimals).
    pub net_change: i64,
    /// Bid size.
    pub bid_size: u64,
    /// Ask size.
    pub ask_size: u64,
    /// Last trade volume.
    pub trade_volume: u64,
    /// Volume today.
    pub total_volume: u64,
    /// Time of the event.
    pub time_of_day: Time,
    /// Nanoseconds since the Unix epoch: when the publisher meant to send this update.
    pub send_time_ns: u64,
}

/// Writes the reference update field list (10 fields).
pub fn write_level1(out: &mut Vec<u8>, q: &Level1) {
    let mut w = FieldListWriter::new(out);
    w.push(fid::BID, Value::Real(Real::new(q.bid, -4)));
    w.push(fid::ASK, Value::Real(Real::new(q.ask, -4)));
    w.push(fid::BIDSIZE, Value::UInt(q.bid_size));
    w.push(fid::ASKSIZE, Value::UInt(q.ask_size));
    w.push(fid::TRDPRC_1, Value::Real(Real::new(q.last, -4)));
    w.push(fid::NETCHNG_1, Value::Real(Real::new(q.net_change, -4)));
    w.push(fid::TRDVOL_1, Value::UInt(q.trade_volume));
    w.push(fid::ACVOL_1, Value::UInt(q.total_volume));
    w.push(fid::TIMACT, Value::Time(q.time_of_day));
    w.push(fid::TIM_TRK_1, Value::UInt(q.send_time_ns));
    w.finish();
}

/// Writes the reference image (14 fields), the one `tickwire publish` sends: the
/// item's name, its open and previous close at `open` (1/10,000), the currency (USD),
/// then the 10 Level 1 fields of `q`.
pub fn write_level1_image(out: &mut Vec<u8>, name: &str, open: i64, q: &Level1) {
    let start = out.len();
    let mut w = FieldListWriter::new(out);
    w.push(fid::DSPLY_NAME, Value::Ascii(name));
    w.push(fid::OPEN_PRC, Value::Real(Real::new(open, -4)));
    w.push(fid::HST_CLOSE, Value::Real(Real::new(open, -4)));
    w.push(fid::CURRENCY, Value::Enum(840));
    w.finish();
    let mut rest = Vec::with_capacity(96);
    write_level1(&mut rest, q);
    // Append the Level 1 fields to the image: patch the count, copy the fields.
    let count =
        u16::from_be_bytes([out[start], out[start + 1]]) + u16::from_be_bytes([rest[0], rest[1]]);
    out[start..start + 2].copy_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&rest[2..]);
}

impl Level1 {
    /// Moves the quote at random around a 100-dollar price, as the benchmarks' feed
    /// does: the mid a tick up, down or not, the spread one to three ticks, a trade at
    /// the bid one time in four, new sizes, the clocks a little later. Some encoded
    /// lengths change from one update to the next, as in a real feed.
    pub fn random_step(&mut self, rng: &mut FeedRng) {
        let mid = (self.bid + self.ask) / 2 + (rng.below(3) as i64 - 1) * 100;
        let spread = 100 * (1 + rng.below(3) as i64);
        self.bid = mid - spread / 2;
        self.ask = self.bid + spread;
        if rng.below(4) == 0 {
            self.last = self.bid;
            self.trade_volume = 100 * (1 + rng.below(20));
            self.total_volume += self.trade_volume;
        }
        self.net_change = self.last - 1_000_000;
        self.bid_size = 100 * (1 + rng.below(50));
        self.ask_size = 100 * (1 + rng.below(50));
        self.time_of_day.nanos_since_midnight += 1_000 + rng.below(1_000_000);
        self.send_time_ns += 1_000 + rng.below(1_000_000);
    }
}

/// `n` successive updates of one item, from `q` on by [`Level1::random_step`], each
/// encoded by [`write_level1`]: the benchmarks' run of one item's quotes, some of whose
/// fields change length from one update to the next.
pub fn random_walk(mut q: Level1, rng: &mut FeedRng, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            q.random_step(rng);
            let mut u = Vec::new();
            write_level1(&mut u, &q);
            u
        })
        .collect()
}

/// A typical record (a 100-dollar stock at midday) used to state the reference size.
pub fn typical() -> Level1 {
    Level1 {
        bid: 1_000_125,
        ask: 1_000_250,
        last: 1_000_200,
        net_change: -1_275,
        bid_size: 1_200,
        ask_size: 800,
        trade_volume: 25_000,
        total_volume: 4_512_300,
        time_of_day: Time::from_hms_nanos(12, 30, 15, 123_456_789),
        send_time_ns: 1_795_000_000_000_000_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::FieldList;

    #[test]
    fn reference_update_size() {
        let mut out = Vec::new();
        write_level1(&mut out, &typical());
        let list = FieldList::decode(&out).unwrap();
        assert_eq!(list.len(), 10);
        // docs/PROTOCOL.md states this number; keep them in step.
        assert_eq!(out.len(), 74, "reference field list is {} bytes", out.len());
    }

    #[test]
    fn the_reference_image_is_the_static_fields_then_the_level1_ones() {
        let mut out = vec![0xAA]; // written after what the buffer holds
        write_level1_image(&mut out, "SYM0", 1_000_000, &typical());
        let list = FieldList::decode(&out[1..]).unwrap();
        let fids: Vec<i16> = list.iter().map(|(f, _)| f).collect();
        assert_eq!(fids.len(), 14);
        assert_eq!(
            &fids[..4],
            [
                fid::DSPLY_NAME,
                fid::OPEN_PRC,
                fid::HST_CLOSE,
                fid::CURRENCY
            ]
        );
        assert_eq!(fids[13], fid::TIM_TRK_1);
        assert_eq!(out[0], 0xAA);
    }
}

/// xorshift64*: a fast generator giving the same sequence for a seed on every machine,
/// for synthetic feeds and benchmarks (never for anything secret).
#[derive(Debug, Clone)]
pub struct FeedRng(u64);

impl FeedRng {
    /// A generator from `seed` (0 is taken as 1: xorshift's state must not be 0).
    pub fn new(seed: u64) -> Self {
        FeedRng(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for an `n` of 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
