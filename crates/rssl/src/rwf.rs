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

#[cfg(test)]
pub(crate) use crate::testing::hex;
