//! The shape of perf-pub's images and updates: the reference Level 1 quote, or the
//! wide items LSEG's perf tools publish.

use tickwire_proto::{FieldList, FieldListWriter, Real, Time, Value};

/// What each item's image and updates hold.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Shape {
    /// The reference Level 1 quote: a 14-field image (with the display name), 10-field
    /// updates in image order.
    #[default]
    Level1,
    /// As the Real-Time SDK perf tools' MarketPrice items (their MsgData.xml): an
    /// 83-field image (reals, enumerations, strings and times) and 23-field updates,
    /// the extra fields not in image order. `tickwire bench rssl` compares the node's
    /// RSSL path with its native path on this shape.
    Wide,
}

/// Fields the wide shape adds to the Level 1 quote's 11 in an image (83 in all) ...
const WIDE_EXTRA_IMAGE_FIELDS: usize = 72;
/// ... and to its 10 in an update (23 in all).
const WIDE_EXTRA_UPDATE_FIELDS: usize = 13;
/// The first of the extra fields' ids (not in the built-in dictionary: perf-sub reads
/// any field).
const WIDE_FIRST_FID: i16 = 4000;

/// The extra field `k`'s value: a real, an enumeration, a short string or a time by
/// `k`, its content moved by `step`.
fn extra(k: usize, step: u64, tod: Time) -> Value<'static> {
    const CODES: [&str; 4] = ["NYS", "LSE", "TKY", "HKG"];
    match k % 4 {
        0 => Value::Real(Real::new(1_000_000 + (step % 1000) as i64, -4)),
        1 => Value::Enum((step % 200) as u16),
        2 => Value::Ascii(CODES[(step % 4) as usize]),
        _ => Value::Time(tod),
    }
}

impl Shape {
    /// Appends the shape's extra image fields to `w` (none for Level 1).
    pub fn image_extras(self, w: &mut FieldListWriter<'_>, tod: Time) {
        if self == Shape::Wide {
            for k in 0..WIDE_EXTRA_IMAGE_FIELDS {
                w.push(WIDE_FIRST_FID + k as i16, extra(k, 0, tod));
            }
        }
    }

    /// An update: the Level 1 fields in `level1` (an encoded field list), then the
    /// shape's extra update fields, into `out`.
    pub fn update(self, level1: &[u8], step: u64, tod: Time, out: &mut Vec<u8>) {
        out.clear();
        if self == Shape::Level1 {
            out.extend_from_slice(level1);
            return;
        }
        let mut w = FieldListWriter::new(out);
        for (f, raw) in FieldList::from_trusted(level1).raw_iter() {
            w.push_raw(f, raw);
        }
        // Spread over the image and out of its order, as the perf tools' are.
        for j in 0..WIDE_EXTRA_UPDATE_FIELDS {
            let k = (j * 37 + 11) % WIDE_EXTRA_IMAGE_FIELDS;
            w.push(WIDE_FIRST_FID + k as i16, extra(k, step + j as u64, tod));
        }
        w.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_shape_has_the_perf_tools_field_counts() {
        let tod = Time::from_hms_nanos(12, 0, 0, 0);
        let mut level1 = Vec::new();
        let mut w = FieldListWriter::new(&mut level1);
        for f in 0..10 {
            w.push(f, Value::UInt(1));
        }
        w.finish();
        let mut img = Vec::new();
        let mut w = FieldListWriter::new(&mut img);
        w.push(3, Value::Ascii("SYM0"));
        for (f, raw) in FieldList::from_trusted(&level1).raw_iter() {
            w.push_raw(f, raw);
        }
        Shape::Wide.image_extras(&mut w, tod);
        w.finish();
        assert_eq!(FieldList::decode(&img).unwrap().len(), 83);
        let mut up = Vec::new();
        Shape::Wide.update(&level1, 7, tod, &mut up);
        let up = FieldList::decode(&up).unwrap();
        assert_eq!(up.len(), 23);
        // Every extra field of an update is in the image, none twice.
        let fids: std::collections::BTreeSet<i16> = up.iter().map(|(f, _)| f).collect();
        assert_eq!(fids.len(), 23);
        assert!(fids.iter().all(|f| *f < 10 || (4000..4072).contains(f)));
        let mut same = Vec::new();
        Shape::Level1.update(&level1, 7, tod, &mut same);
        assert_eq!(same, level1);
    }
}
