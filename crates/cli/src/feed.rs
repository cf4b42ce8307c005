//! A synthetic random-walk Level 1 quote feed, for `tickwire publish` and the demo.

use std::time::{SystemTime, UNIX_EPOCH};
use tickwire_proto::reference::{write_level1, write_level1_image, FeedRng, Level1};
use tickwire_proto::{fid, FieldList, FieldListWriter, Real, Time, Value};

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) fn time_of_day(ns_since_epoch: u64) -> Time {
    Time {
        nanos_since_midnight: ns_since_epoch % tickwire_proto::field::NANOS_PER_DAY,
    }
}

/// One synthetic instrument.
pub(crate) struct Instrument {
    pub name: String,
    q: Level1,
    open: i64,
}

impl Instrument {
    pub(crate) fn new(name: &str, rng: &mut FeedRng) -> Self {
        // Prices in 1/10,000: between 10 and 500.
        let mid = 100_000 + rng.below(4_900_000) as i64;
        let mid = mid - mid % 100;
        Instrument {
            name: name.to_string(),
            q: Level1 {
                bid: mid - 100,
                ask: mid + 100,
                last: mid,
                net_change: 0,
                bid_size: 100 * (1 + rng.below(50)),
                ask_size: 100 * (1 + rng.below(50)),
                trade_volume: 100,
                total_volume: 0,
                time_of_day: time_of_day(now_ns()),
                send_time_ns: now_ns(),
            },
            open: mid,
        }
    }

    /// Moves the quote one tick; returns true if it traded.
    pub(crate) fn step(&mut self, rng: &mut FeedRng, send_time_ns: u64) -> bool {
        let tick = 100;
        let r = rng.below(3) as i64 - 1;
        let mid = ((self.q.bid + self.q.ask) / 2 + r * tick).max(2 * tick);
        let spread = tick * (1 + rng.below(3) as i64);
        let mut traded = false;
        self.q.bid = mid - spread / 2 - spread % 2 * tick / 2;
        self.q.ask = self.q.bid + spread;
        if rng.below(4) == 0 {
            self.q.last = if rng.below(2) == 0 {
                self.q.bid
            } else {
                self.q.ask
            };
            self.q.trade_volume = 100 * (1 + rng.below(20));
            self.q.total_volume += self.q.trade_volume;
            traded = true;
        }
        self.q.net_change = self.q.last - self.open;
        self.q.bid_size = 100 * (1 + rng.below(50));
        self.q.ask_size = 100 * (1 + rng.below(50));
        self.q.time_of_day = time_of_day(send_time_ns);
        self.q.send_time_ns = send_time_ns;
        traded
    }

    /// A posted quote: BID and/or ASK (any other field is refused, as is a price of
    /// zero or less, or a bid above the ask). On success the quote is the posted one;
    /// publish it with [`Instrument::write_update`].
    pub(crate) fn apply_post(
        &mut self,
        fields: FieldList<'_>,
        send_time_ns: u64,
    ) -> Result<(), String> {
        let (mut bid, mut ask) = (self.q.bid, self.q.ask);
        if fields.is_empty() {
            return Err("a post must carry BID or ASK".into());
        }
        for (f, v) in fields.iter() {
            let price = match v {
                Value::Real(r) => r.to_f64(),
                Value::Int(i) => i as f64,
                Value::UInt(u) => u as f64,
                other => return Err(format!("field {f}: a price was expected, not {other:?}")),
            };
            // In 1/10,000, as the feed keeps its prices.
            let ticks = (price * 10_000.0).round();
            if !(1.0..1e15).contains(&ticks) {
                return Err(format!("field {f}: price {price} is out of range"));
            }
            match f {
                fid::BID => bid = ticks as i64,
                fid::ASK => ask = ticks as i64,
                other => return Err(format!("only BID and ASK may be posted, not field {other}")),
            }
        }
        if bid > ask {
            return Err(format!(
                "the bid ({}) would be above the ask ({})",
                Real::new(bid, -4),
                Real::new(ask, -4)
            ));
        }
        self.q.bid = bid;
        self.q.ask = ask;
        self.q.time_of_day = time_of_day(send_time_ns);
        self.q.send_time_ns = send_time_ns;
        Ok(())
    }

    /// The last trade alone (price, size, accumulated volume, time): a do-not-conflate
    /// update, so every trade reaches every subscriber; ACVOL_1 - TRDVOL_1 of a trade is
    /// the ACVOL_1 of the one before.
    pub(crate) fn write_trade(&self, out: &mut Vec<u8>) {
        let mut w = FieldListWriter::new(out);
        w.push(fid::TRDPRC_1, Value::Real(Real::new(self.q.last, -4)));
        w.push(fid::TRDVOL_1, Value::UInt(self.q.trade_volume));
        w.push(fid::ACVOL_1, Value::UInt(self.q.total_volume));
        w.push(fid::TIMACT, Value::Time(self.q.time_of_day));
        w.finish();
    }

    /// The reference Level 1 update for the current quote.
    pub(crate) fn write_update(&self, out: &mut Vec<u8>) {
        write_level1(out, &self.q);
    }

    /// A full image: the update fields plus static ones.
    pub(crate) fn write_image(&self, out: &mut Vec<u8>) {
        write_level1_image(out, &self.name, self.open, &self.q);
    }
}

/// Reads item names from a file: one per line, `#` comments and blank lines skipped.
pub(crate) fn read_item_file(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read item file {}", path.display()))?;
    let items: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if items.is_empty() {
        anyhow::bail!("item file {} lists no items", path.display());
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_proto::FieldList;

    #[test]
    fn image_and_update_are_valid_field_lists() {
        let mut rng = FeedRng::new(7);
        let mut inst = Instrument::new("SYM0", &mut rng);
        let mut img = Vec::new();
        inst.write_image(&mut img);
        let list = FieldList::decode(&img).unwrap();
        assert_eq!(list.len(), 14);
        let mut trades = 0;
        let mut volume = 0;
        for _ in 0..1000 {
            if inst.step(&mut rng, now_ns()) {
                trades += 1;
                let mut t = Vec::new();
                inst.write_trade(&mut t);
                let acvol = FieldList::decode(&t)
                    .unwrap()
                    .iter()
                    .find(|(id, _)| *id == fid::ACVOL_1)
                    .map(|(_, v)| v.to_string())
                    .unwrap();
                assert!(acvol.parse::<u64>().unwrap() > volume);
                volume = acvol.parse().unwrap();
            }
            let q = inst.q;
            assert!(q.bid < q.ask && q.bid > 0, "{q:?}");
        }
        assert!(trades > 100, "{trades} trades");
        let mut upd = Vec::new();
        inst.write_update(&mut upd);
        assert_eq!(FieldList::decode(&upd).unwrap().len(), 10);
    }
}
