//! What the `nats_frames` fuzz target checks, shared with the stable-Rust corpus
//! replay test: the NATS parser of the lab's peer tools, fed anything, reads frame
//! after frame without a panic, each frame taking at least one byte and no more than
//! what is there, until it wants more or refuses the rest.

use tickwire_bench::nats::{parse, Frame};

/// How far the input went: every byte taken as frames, a frame still incomplete, or
/// refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Whole,
    Incomplete,
    Refused,
}

pub(crate) fn nats_frames(data: &[u8]) -> Outcome {
    let mut at = 0;
    while at < data.len() {
        match parse(&data[at..]) {
            Ok(Some((frame, used))) => {
                assert!(
                    used > 0 && used <= data.len() - at,
                    "took {used} of {}",
                    data.len() - at
                );
                if let Frame::Msg {
                    payload, subject, ..
                } = frame
                {
                    assert!(payload.len() + subject.len() < used);
                }
                at += used;
            }
            Ok(None) => return Outcome::Incomplete,
            Err(_) => return Outcome::Refused,
        }
    }
    Outcome::Whole
}
