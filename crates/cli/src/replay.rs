//! `tickwire replay`: an item's history from the node's journal, then its live messages,
//! printed as `tickwire subscribe` prints them.

use crate::subscribe::SubscribeArgs;
use anyhow::{bail, Result};
use std::path::PathBuf;
use tickwire_proto::ReplayFrom;

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    conn: crate::node_args::NodeArgs,
    /// Service of the item (journaled with `[journal] updates = true` at the node).
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    service: String,
    /// The item.
    #[arg(value_name = "ITEM")]
    item: String,
    /// Where the history starts: the item's sequence number (e.g. 1200), or a UTC time
    /// in RFC 3339 (e.g. 2026-11-24T04:00:00Z, or with a fraction of a second).
    #[arg(long, value_name = "SEQ_OR_TIME", value_parser = parse_from)]
    from: ReplayFrom,
    /// One JSON object per line (as `tickwire subscribe --json`).
    #[arg(long)]
    json: bool,
    /// Exit (status 0) after this many messages, history and live together.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Give up (exit status 3) if --count messages have not arrived within this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = crate::subscribe::seconds)]
    timeout: Option<f64>,
    /// Field dictionary file (default: the built-in MarketPrice dictionary).
    #[arg(long, value_name = "FILE")]
    dictionary: Option<PathBuf>,
}

pub(crate) fn run(a: ReplayArgs) -> Result<()> {
    crate::subscribe::run(SubscribeArgs {
        conn: a.conn,
        service: a.service,
        items: vec![a.item],
        json: a.json,
        count: a.count,
        snapshot: false,
        view: None,
        dictionary: a.dictionary,
        slow_consumer: None,
        receive_buffer: None,
        timeout: a.timeout,
        replay: Some(a.from),
    })
}

/// An item sequence number, or an RFC 3339 UTC time.
pub(crate) fn parse_from(s: &str) -> Result<ReplayFrom, String> {
    if let Ok(seq) = s.parse::<u32>() {
        return Ok(ReplayFrom::Seq(seq));
    }
    parse_utc(s).map(ReplayFrom::Time).map_err(|why| {
        format!("{s:?} is neither a sequence number nor an RFC 3339 UTC time ({why})")
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)` to nanoseconds since the Unix epoch.
fn parse_utc(s: &str) -> Result<u64> {
    let s = s
        .strip_suffix('Z')
        .or_else(|| s.strip_suffix("+00:00"))
        .ok_or_else(|| anyhow::anyhow!("a UTC time ends in Z"))?;
    let (date, time) = s
        .split_once(['T', ' '])
        .ok_or_else(|| anyhow::anyhow!("expected DATE T TIME"))?;
    let d: Vec<&str> = date.split('-').collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = hms.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        bail!("expected YYYY-MM-DDTHH:MM:SS");
    }
    let (y, mo, da): (i64, u32, u32) = (d[0].parse()?, d[1].parse()?, d[2].parse()?);
    let (h, mi, se): (u64, u64, u64) = (t[0].parse()?, t[1].parse()?, t[2].parse()?);
    let date_ok = tickwire_proto::Date {
        year: u16::try_from(y)?,
        month: u8::try_from(mo)?,
        day: u8::try_from(da)?,
    }
    .is_valid();
    if !date_ok || h > 23 || mi > 59 || se > 59 || y < 1970 {
        bail!("out of range");
    }
    let nanos: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>()? * 10u64.pow(9 - frac.len() as u32)
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m as i64 + 2) / 5 + da as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe - 719_468) as u64;
    Ok(((days * 86_400 + h * 3600 + mi * 60 + se) * 1_000_000_000) + nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_is_a_sequence_number_or_a_utc_time() {
        assert_eq!(parse_from("1200"), Ok(ReplayFrom::Seq(1200)));
        assert_eq!(parse_from("1970-01-01T00:00:00Z"), Ok(ReplayFrom::Time(0)));
        assert_eq!(
            parse_from("2026-11-24T04:00:00.5Z"),
            Ok(ReplayFrom::Time(1_795_492_800_500_000_000))
        );
        assert_eq!(
            parse_from("2024-02-29T12:00:00+00:00"),
            Ok(ReplayFrom::Time(1_709_208_000_000_000_000))
        );
        for bad in [
            "",
            "-1",
            "2026-11-24",
            "2026-11-24T04:00:00",
            "2023-02-29T00:00:00Z",
            "2026-11-24T25:00:00Z",
            // A day or a month past 255 is not taken for its low byte.
            "2026-01-257T00:00:00Z",
            "2026-258-01T00:00:00Z",
        ] {
            assert!(parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
