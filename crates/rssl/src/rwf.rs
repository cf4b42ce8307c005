//! RWF, the Real-Time SDK's binary encoding of messages and data.
//!
//! [`wire`]: integers and length-prefixed bytes; [`primitive`]: values (Real, Date,
//! Time, Enum...); [`container`]: field lists, element lists, maps, filter lists,
//! series and arrays; [`msg`]: the messages. Decoders borrow from the bytes and check
//! every length against what is there.

pub mod container;
pub mod msg;
pub mod primitive;
pub mod wire;

pub use wire::RwfError;

/// Bytes from hex pairs, spaces anywhere ("08 00 03", "0800 03"): how the tests write
/// the bytes the SDK's codec makes.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}
