//! The backbone's keyed MACs: with a key file, a node hears only nodes that hold the
//! backbone's key (docs/PROTOCOL.md, section 11.0, "Sealed messages").
//!
//! A sealed message is the plain one with the `SEALED` bit set in its version byte and
//! a trailer of 36 bytes:
//!
//! ```text
//! key id u32 | origin u64 | counter u64 | tag (16 bytes)
//! ```
//!
//! `tag` is the MAC of the key named by `key id` over every byte before the tag, for the
//! message's [`Lane`], cut to 16 bytes: a message sealed for one stream fails its check
//! on another, so that no one can replay it there. A key's MAC is keyed BLAKE3 (with a
//! key derived from it for each lane) or HMAC-SHA256 (of the lane's byte, not sent, and
//! the message): its line in the key file says which ([`Mac`]). `origin` is random for each run of a node's backbone; `counter` grows with
//! every message an origin sends and starts from the wall clock in nanoseconds, so
//! that a receiver can tell a replayed message (a counter it has passed) and, for an
//! origin it has not heard yet, a recorded one (a counter far from its own clock).
//!
//! Sans-IO like the rest of the crate: [`Keys::parse`] takes the file's text,
//! [`Verifier::verify`] the wall-clock time.

use ring::hmac;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::wire::{HEADER_LEN, SEALED};

/// Key id, origin, counter and tag.
pub const TRAILER_LEN: usize = 4 + 8 + 8 + TAG_LEN;
const TAG_LEN: usize = 16;
/// Bytes of a key.
pub const KEY_LEN: usize = 32;
/// Keys a file may list (the one signing, those still accepted during a rotation).
pub const MAX_KEYS: usize = 16;
/// A receiver takes an origin it has not heard yet only if its counter is within this
/// much of the receiver's clock (nodes' clocks must agree that well): older messages
/// are recordings.
pub const MAX_CLOCK_SKEW_NS: u64 = 60_000_000_000;
/// Origins a receiver remembers (the longest-silent is forgotten past it). Only
/// messages that carry a valid MAC add one, so only key holders can fill it.
pub const MAX_ORIGINS: usize = 4096;

/// The MAC a key seals with: the third word of its line in a key file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mac {
    /// Keyed BLAKE3 (`blake3`): what `tickwire backbone keygen` writes. About three
    /// times as fast as HMAC-SHA256 on a files chunk and twice on one update, a fifth
    /// slower on a full 1,500-byte datagram (one 1 KiB chunk hashed alone, against
    /// SHA instructions): `cargo bench -p tickwire-backbone --bench seal`.
    Blake3,
    /// HMAC-SHA256 (`hmac-sha256`, or no third word: key files written before BLAKE3).
    HmacSha256,
}

impl Mac {
    /// Its word in a key file.
    pub fn name(self) -> &'static str {
        match self {
            Mac::Blake3 => "blake3",
            Mac::HmacSha256 => "hmac-sha256",
        }
    }
}

impl FromStr for Mac {
    type Err = ();

    fn from_str(word: &str) -> Result<Mac, ()> {
        match word {
            "blake3" => Ok(Mac::Blake3),
            "hmac-sha256" => Ok(Mac::HmacSha256),
            _ => Err(()),
        }
    }
}

/// BLAKE3's context for a lane's key (its rule: fixed, and unique to this use).
const BLAKE3_LANE_CONTEXT: &str = "Tickwire backbone 2026-12-01 seal key of one lane";

/// A key made ready to seal: what each message's MAC starts from.
#[derive(Clone)]
enum Keyed {
    /// The key of each lane, by its byte less one.
    Blake3([[u8; KEY_LEN]; LANES]),
    HmacSha256(hmac::Key),
}

/// One key of a key file.
#[derive(Clone)]
pub struct Key {
    /// The key's id (sealed messages name it).
    pub id: u32,
    mac: Mac,
    keyed: Keyed,
    bytes: [u8; KEY_LEN],
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:08x})", self.id)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.id == other.id && self.mac == other.mac && self.bytes == other.bytes
    }
}

impl Key {
    /// A key from its id, bytes and MAC.
    pub fn new(id: u32, bytes: [u8; KEY_LEN], mac: Mac) -> Key {
        let keyed = match mac {
            // A key of its own for each lane: the lane is in the key, not hashed
            // before the message, which would start BLAKE3's chunks off their
            // boundaries (a 62 KiB chunk took a third longer).
            Mac::Blake3 => Keyed::Blake3(std::array::from_fn(|i| {
                let mut material = [0u8; KEY_LEN + 1];
                material[..KEY_LEN].copy_from_slice(&bytes);
                material[KEY_LEN] = (i + 1) as u8;
                blake3::derive_key(BLAKE3_LANE_CONTEXT, &material)
            })),
            Mac::HmacSha256 => Keyed::HmacSha256(hmac::Key::new(hmac::HMAC_SHA256, &bytes)),
        };
        Key {
            id,
            mac,
            keyed,
            bytes,
        }
    }

    /// The MAC it seals with.
    pub fn mac(&self) -> Mac {
        self.mac
    }
}

/// The keys of a key file: the first signs, every one is accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Keys {
    keys: Vec<Key>,
}

/// Why a key file was refused; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// A line that is not a key.
    #[error("line {line}: {what} (a key line is \"<8 hex digits: key id> <64 hex digits: key> [blake3|hmac-sha256]\"; `tickwire backbone keygen` writes one)")]
    Line {
        /// The line (from 1).
        line: usize,
        /// What is wrong with it.
        what: String,
    },
    /// No key in the file.
    #[error("no key in the file (`tickwire backbone keygen > FILE` writes one)")]
    Empty,
    /// More keys than a file may hold.
    #[error("more than {MAX_KEYS} keys")]
    TooMany,
}

impl Keys {
    /// Reads a key file's text: one key per line, `<id> <key>` in hex and its MAC
    /// (`blake3`, or `hmac-sha256` when left out); `#` starts a comment.
    pub fn parse(text: &str) -> Result<Keys, KeyFileError> {
        let mut keys: Vec<Key> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |what: &str| KeyFileError::Line {
                line: n + 1,
                what: what.to_string(),
            };
            let mut words = line.split_whitespace();
            let (Some(id), Some(key), mac, None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(bad("two or three words expected"));
            };
            let mac = match mac {
                None => Mac::HmacSha256,
                Some(word) => word
                    .parse()
                    .map_err(|()| bad("the MAC is not blake3 or hmac-sha256"))?,
            };
            let mut id_bytes = [0u8; 4];
            if hex::decode_to_slice(id, &mut id_bytes).is_err() {
                return Err(bad("the key id is not 8 hex digits"));
            }
            let mut bytes = [0u8; KEY_LEN];
            if hex::decode_to_slice(key, &mut bytes).is_err() {
                return Err(bad("the key is not 64 hex digits (32 bytes)"));
            }
            let id = u32::from_be_bytes(id_bytes);
            if keys.iter().any(|k| k.id == id) {
                return Err(bad("a key id listed twice"));
            }
            if keys.len() == MAX_KEYS {
                return Err(KeyFileError::TooMany);
            }
            keys.push(Key::new(id, bytes, mac));
        }
        if keys.is_empty() {
            return Err(KeyFileError::Empty);
        }
        Ok(Keys { keys })
    }

    /// A key file's text with one new key of `mac` from `random` (32 bytes of key, 4 of
    /// id). An HMAC-SHA256 key's line names no MAC: nodes built before BLAKE3 read it.
    pub fn generate(random: [u8; KEY_LEN + 4], mac: Mac) -> String {
        let word = match mac {
            Mac::Blake3 => " blake3",
            Mac::HmacSha256 => "",
        };
        format!(
            "# Tickwire backbone key file (tickwire backbone keygen). Keep it secret: every\n\
             # node of the backbone needs the same file, readable by the node only.\n\
             # One key per line, \"<key id> <key> <MAC>\" (id and key in hex; the MAC blake3,\n\
             # or hmac-sha256, the MAC when a line names none). The first key signs what the\n\
             # node sends; every key listed is accepted. To rotate without a restart: add the\n\
             # new key as a second line on every node, then move it first on every node, then\n\
             # remove the old one (nodes re-read the file within a second of a change).\n\
             {} {}{word}\n",
            hex::encode(&random[KEY_LEN..]),
            hex::encode(&random[..KEY_LEN])
        )
    }

    /// The key that signs.
    pub fn signing(&self) -> &Key {
        &self.keys[0]
    }

    /// The keys' ids.
    pub fn ids(&self) -> Vec<u32> {
        self.keys.iter().map(|k| k.id).collect()
    }

    fn get(&self, id: u32) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }
}

/// The stream a message is sealed for. Its byte is signed, not sent: the receiver knows
/// it from the stream the message came on (and, on the files streams, from the message:
/// a source's down, an edge's up). A stream has one lane and one [`Verifier`] at a
/// receiver, except the files streams of a node that is both source and edge, whose one
/// verifier catches a copy of a message taken from the other stream as a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Lane {
    /// The sources' data stream.
    Data = 1,
    /// The edges' request stream (requests, and the sites' file-transfer answers).
    Requests = 2,
    /// A source's files stream (its file-transfer messages, down to the edges).
    FilesDown = 3,
    /// An edge's files stream (its file-transfer messages as a sender, up).
    FilesUp = 4,
}

/// Lanes, their bytes 1 to 4.
const LANES: usize = 4;

fn tag(key: &Key, lane: Lane, signed: &[u8]) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    match &key.keyed {
        Keyed::Blake3(lanes) => {
            let full = blake3::keyed_hash(&lanes[lane as usize - 1], signed);
            t.copy_from_slice(&full.as_bytes()[..TAG_LEN]);
        }
        Keyed::HmacSha256(k) => {
            let mut ctx = hmac::Context::with_key(k);
            ctx.update(&[lane as u8]);
            ctx.update(signed);
            t.copy_from_slice(&ctx.sign().as_ref()[..TAG_LEN]);
        }
    }
    t
}

/// Seals what one origin sends.
#[derive(Debug)]
pub struct Sealer {
    origin: u64,
    counter: u64,
    scratch: Vec<u8>,
}

impl Sealer {
    /// `origin`: random for this run; `now_ns`: the wall clock (the first counter).
    pub fn new(origin: u64, now_ns: u64) -> Sealer {
        Sealer {
            origin,
            counter: now_ns,
            scratch: Vec::new(),
        }
    }

    /// `msg` sealed with `key` (borrowed until the next call). The counter advances
    /// with the wall clock `now_ns` when that is ahead, so that a receiver hearing this
    /// origin for the first time finds it near its own clock.
    pub fn seal(&mut self, key: &Key, lane: Lane, msg: &[u8], now_ns: u64) -> &[u8] {
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        s.extend_from_slice(msg);
        self.seal_in_place(key, lane, &mut s, now_ns);
        self.scratch = s;
        &self.scratch
    }

    /// Seals `msg` where it is (its trailer appended), for a message built to be sent
    /// once: no copy of it is made.
    pub fn seal_in_place(&mut self, key: &Key, lane: Lane, msg: &mut Vec<u8>, now_ns: u64) {
        // The wall clock stepped back (NTP, a restored VM): counters kept that far ahead
        // of it are stale to every receiver new to this origin until the clock catches
        // up. A new origin starts from the clock again (the old one's counters stay
        // passed where they were heard).
        if self.counter > now_ns.saturating_add(MAX_CLOCK_SKEW_NS / 2) {
            self.origin = crate::random_id();
            self.counter = now_ns;
        }
        self.counter = (self.counter + 1).max(now_ns);
        if msg.len() > 1 {
            msg[1] |= SEALED;
        }
        msg.extend_from_slice(&key.id.to_be_bytes());
        msg.extend_from_slice(&self.origin.to_be_bytes());
        msg.extend_from_slice(&self.counter.to_be_bytes());
        let t = tag(key, lane, msg);
        msg.extend_from_slice(&t);
    }
}

/// Why a received message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not sealed, or too short to be.
    Unsealed,
    /// Sealed with a key this node does not have.
    UnknownKey,
    /// The MAC does not match: forged, damaged, or sealed for another stream.
    BadMac,
    /// A counter this origin has already passed: a replay.
    Replayed,
    /// Sealed more than a minute before this node's clock says (or, the first of its
    /// origin, as far after): a recording, or clocks that disagree.
    Stale,
}

impl Rejected {
    /// Every reason, in the order /metrics lists them.
    pub const ALL: [Rejected; 5] = [
        Rejected::Unsealed,
        Rejected::UnknownKey,
        Rejected::BadMac,
        Rejected::Replayed,
        Rejected::Stale,
    ];

    /// Its name, for /metrics.
    pub fn name(self) -> &'static str {
        match self {
            Rejected::Unsealed => "unsealed",
            Rejected::UnknownKey => "unknown_key",
            Rejected::BadMac => "bad_mac",
            Rejected::Replayed => "replayed",
            Rejected::Stale => "stale",
        }
    }

    /// Said in the log.
    pub fn text(self) -> &'static str {
        match self {
            Rejected::Unsealed => "not sealed (a sender with no key_file, or a stranger)",
            Rejected::UnknownKey => "sealed with a key this node does not have",
            Rejected::BadMac => "its MAC does not match (forged, damaged, or sealed for another stream)",
            Rejected::Replayed => "a replay (a counter its sender has passed)",
            Rejected::Stale => "sealed more than 60 s from this node's clock (a recording, or clocks that disagree)",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Checks what one node receives on one stream.
#[derive(Debug, Default)]
pub struct Verifier {
    /// Per origin: the last counter taken.
    seen: HashMap<u64, u64>,
    /// Messages dropped, by [`Rejected`].
    pub rejected: [u64; 5],
}

impl Verifier {
    /// The plain message inside `msg` if it is sealed with one of `keys` for `lane`,
    /// fresh and not seen before; else why not (counted).
    pub fn verify<'a>(
        &mut self,
        keys: &Keys,
        lane: Lane,
        msg: &'a [u8],
        now_ns: u64,
    ) -> Result<Plain<'a>, Rejected> {
        let r = self.check(keys, lane, msg, now_ns);
        if let Err(why) = r {
            self.rejected[why.index()] += 1;
        }
        r
    }

    fn check<'a>(
        &mut self,
        keys: &Keys,
        lane: Lane,
        msg: &'a [u8],
        now_ns: u64,
    ) -> Result<Plain<'a>, Rejected> {
        let key = sealing_key(keys, msg)?;
        let (signed, got) = msg.split_at(msg.len() - TAG_LEN);
        let trailer = &signed[signed.len() - (TRAILER_LEN - TAG_LEN)..];
        let word = |at: usize, n: usize| {
            trailer[at..at + n]
                .iter()
                .fold(0u64, |v, &b| v << 8 | u64::from(b))
        };
        let (origin, counter) = (word(4, 8), word(12, 8));
        let want = tag(key, lane, signed);
        // Constant time: a forger learns nothing from how long the check took.
        if want.iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b)) != 0 {
            return Err(Rejected::BadMac);
        }
        match self.seen.get_mut(&origin) {
            Some(last) if counter <= *last => return Err(Rejected::Replayed),
            // Every message, not only the first: a recording begun within the minute
            // passed whole, trickled for as long as it lasted (keeping a dead source
            // live at a node that had just started).
            Some(_) if now_ns.saturating_sub(counter) > MAX_CLOCK_SKEW_NS => {
                return Err(Rejected::Stale)
            }
            Some(last) => *last = counter,
            None => {
                if counter.abs_diff(now_ns) > MAX_CLOCK_SKEW_NS {
                    return Err(Rejected::Stale);
                }
                if self.seen.len() >= MAX_ORIGINS {
                    // The longest silent: the counter follows its sender's clock.
                    if let Some(oldest) = self.seen.iter().min_by_key(|(_, c)| **c).map(|(o, _)| *o)
                    {
                        self.seen.remove(&oldest);
                    }
                }
                self.seen.insert(origin, counter);
            }
        }
        Ok(Plain {
            body: &msg[..msg.len() - TRAILER_LEN],
            origin,
        })
    }

    /// Messages refused, for all reasons.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// What can be told of `msg` without hashing it: that it is sealed, and with a key id of
/// `keys`. Key ids are not secret: a message that passes may still be forged.
pub fn precheck(keys: &Keys, msg: &[u8]) -> Result<(), Rejected> {
    sealing_key(keys, msg).map(|_| ())
}

/// The key of `keys` that `msg` names, if it is sealed.
fn sealing_key<'k>(keys: &'k Keys, msg: &[u8]) -> Result<&'k Key, Rejected> {
    if msg.len() < HEADER_LEN + TRAILER_LEN || msg[1] & SEALED == 0 {
        return Err(Rejected::Unsealed);
    }
    let at = msg.len() - TRAILER_LEN;
    let id = u32::from_be_bytes([msg[at], msg[at + 1], msg[at + 2], msg[at + 3]]);
    keys.get(id).ok_or(Rejected::UnknownKey)
}

/// A verified message: the plain bytes (the `SEALED` bit still set: the decoder
/// ignores it) and who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plain<'a> {
    /// The message, its seal checked.
    pub body: &'a [u8],
    /// The sender's node id.
    pub origin: u64,
}

/// A new key file's text with a key of `mac`, from the system's random number
/// generator.
pub fn new_key_file(mac: Mac) -> Result<String, ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut random = [0u8; KEY_LEN + 4];
    ring::rand::SystemRandom::new().fill(&mut random)?;
    Ok(Keys::generate(random, mac))
}

/// The wall clock in nanoseconds since 1970.
pub fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::BackboneMessage;

    const NOW: u64 = 1_800_000_000_000_000_000;

    /// Every lane (a BLAKE3 key holds one key for each).
    const ALL: [Lane; LANES] = [Lane::Data, Lane::Requests, Lane::FilesDown, Lane::FilesUp];

    /// A key file of BLAKE3 keys (id, byte repeated): the first signs.
    pub(crate) fn keys(lines: &[(u32, u8)]) -> Keys {
        keys_with(Mac::Blake3, lines)
    }

    fn keys_with(mac: Mac, lines: &[(u32, u8)]) -> Keys {
        let text: String = lines
            .iter()
            .map(|(id, b)| {
                let key = format!("{b:02x}").repeat(32);
                match mac {
                    // Lines written before the MAC word: HMAC-SHA256.
                    Mac::HmacSha256 => format!("{id:08x} {key}\n"),
                    Mac::Blake3 => format!("{id:08x} {key} blake3\n"),
                }
            })
            .collect();
        let k = Keys::parse(&text).unwrap();
        assert_eq!(k.signing().mac(), mac);
        k
    }

    fn heartbeat() -> Vec<u8> {
        let mut v = Vec::new();
        BackboneMessage::Heartbeat {
            source: 7,
            name: "src",
            directory_version: 3,
        }
        .encode(&mut v)
        .unwrap();
        v
    }

    /// [`heartbeat`] sealed by `s` on the data lane with `keys`' signing key at `now_ns`.
    fn sealed_heartbeat(s: &mut Sealer, keys: &Keys, now_ns: u64) -> Vec<u8> {
        s.seal(keys.signing(), Lane::Data, &heartbeat(), now_ns)
            .to_vec()
    }

    #[test]
    fn a_sealed_message_verifies_and_decodes_as_the_plain_one() {
        let k = keys(&[(1, 0xaa)]);
        let mut s = Sealer::new(42, NOW);
        let plain = heartbeat();
        let sealed = s.seal(k.signing(), Lane::Data, &plain, NOW).to_vec();
        assert_eq!(sealed.len(), plain.len() + TRAILER_LEN);
        let mut v = Verifier::default();
        let p = v.verify(&k, Lane::Data, &sealed, NOW).unwrap();
        assert_eq!(p.origin, 42);
        assert_eq!(
            BackboneMessage::decode(p.body).unwrap(),
            BackboneMessage::decode(&plain).unwrap()
        );
    }

    /// The sender's wall clock steps back past the skew (NTP, a restored VM): what it
    /// seals then is heard by a receiver that has not heard it yet (its counters had
    /// stayed ahead of every clock, stale to such a receiver until the clock caught up),
    /// and still by one that has.
    #[test]
    fn a_sender_whose_clock_stepped_back_is_heard_by_a_receiver_new_to_it() {
        let k = keys(&[(1, 0xaa)]);
        let mut s = Sealer::new(42, NOW);
        let mut known = Verifier::default();
        let first = sealed_heartbeat(&mut s, &k, NOW);
        assert!(known.verify(&k, Lane::Data, &first, NOW).is_ok());
        let back = NOW - 5 * MAX_CLOCK_SKEW_NS;
        let later = sealed_heartbeat(&mut s, &k, back);
        let mut new = Verifier::default();
        assert!(new.verify(&k, Lane::Data, &later, back).is_ok());
        assert!(known.verify(&k, Lane::Data, &later, back).is_ok());
        // Replays are still refused.
        assert_eq!(
            new.verify(&k, Lane::Data, &later, back),
            Err(Rejected::Replayed)
        );
    }

    #[test]
    fn the_precheck_tells_unsealed_and_strangers_keys_without_hashing() {
        let k = keys(&[(7, 1)]);
        let sealed = sealed_heartbeat(&mut Sealer::new(42, NOW), &k, NOW);
        assert_eq!(precheck(&k, &sealed), Ok(()));
        assert_eq!(precheck(&k, &heartbeat()), Err(Rejected::Unsealed));
        assert_eq!(
            precheck(&keys(&[(8, 1)]), &sealed),
            Err(Rejected::UnknownKey)
        );
        // Key ids are not secret: a forgery with a known id passes the precheck only.
        let mut forged = sealed.clone();
        forged[5] ^= 1;
        assert_eq!(precheck(&k, &forged), Ok(()));
    }

    #[test]
    fn forged_replayed_unsealed_and_stale_messages_are_dropped_and_counted() {
        let k = keys(&[(1, 0xaa)]);
        let other = keys(&[(1, 0xbb)]);
        let mut v = Verifier::default();
        let mut s = Sealer::new(42, NOW);
        let first = sealed_heartbeat(&mut s, &k, NOW);
        assert!(v.verify(&k, Lane::Data, &first, NOW).is_ok());
        // The same bytes again.
        assert_eq!(
            v.verify(&k, Lane::Data, &first, NOW),
            Err(Rejected::Replayed)
        );
        // A plain message.
        assert_eq!(
            v.verify(&k, Lane::Data, &heartbeat(), NOW),
            Err(Rejected::Unsealed)
        );
        // Sealed with another key that has the same id.
        let mut forger = Sealer::new(43, NOW);
        let forged = sealed_heartbeat(&mut forger, &other, NOW);
        assert_eq!(
            v.verify(&k, Lane::Data, &forged, NOW),
            Err(Rejected::BadMac)
        );
        // One bit changed anywhere.
        let mut flipped = sealed_heartbeat(&mut s, &k, NOW);
        flipped[5] ^= 1;
        assert_eq!(
            v.verify(&k, Lane::Data, &flipped, NOW),
            Err(Rejected::BadMac)
        );
        // An unknown key id.
        let mut unknown = sealed_heartbeat(&mut s, &k, NOW);
        let at = unknown.len() - TRAILER_LEN;
        unknown[at] ^= 0xff;
        assert_eq!(
            v.verify(&k, Lane::Data, &unknown, NOW),
            Err(Rejected::UnknownKey)
        );
        // A recording of an origin this receiver has not heard: two minutes old.
        let mut old = Sealer::new(44, NOW - 120_000_000_000);
        let rec = sealed_heartbeat(&mut old, &k, NOW - 120_000_000_000);
        assert_eq!(v.verify(&k, Lane::Data, &rec, NOW), Err(Rejected::Stale));
        assert_eq!(v.rejected, [1, 1, 2, 1, 1]);
        assert_eq!(v.rejected_total(), 6);
        // The origin goes on: later counters pass.
        let next = sealed_heartbeat(&mut s, &k, NOW);
        assert!(v.verify(&k, Lane::Data, &next, NOW).is_ok());
        // A recording of a known origin, its first message fresh: what comes more than
        // a minute after it was sealed is stale, however new its counter.
        let mut recorded = Sealer::new(45, NOW);
        let take = sealed_heartbeat(&mut recorded, &k, NOW);
        let later = sealed_heartbeat(&mut recorded, &k, NOW + 1_000_000_000);
        assert!(v
            .verify(&k, Lane::Data, &take, NOW + 30_000_000_000)
            .is_ok());
        assert_eq!(
            v.verify(&k, Lane::Data, &later, NOW + 90_000_000_000),
            Err(Rejected::Stale)
        );
    }

    #[test]
    fn a_message_sealed_for_one_stream_fails_on_another() {
        for mac in [Mac::Blake3, Mac::HmacSha256] {
            let k = keys_with(mac, &[(1, 0xaa)]);
            for lane in ALL {
                let mut s = Sealer::new(42, NOW);
                let sealed = s.seal(k.signing(), lane, &heartbeat(), NOW).to_vec();
                // A copy put on another stream: that stream's verifier never heard the
                // origin, so only the lane can tell it from a first message.
                for other in ALL.into_iter().filter(|l| *l != lane) {
                    assert_eq!(
                        Verifier::default().verify(&k, other, &sealed, NOW),
                        Err(Rejected::BadMac),
                        "{mac:?}: sealed for {lane:?}, checked on {other:?}"
                    );
                }
                assert!(Verifier::default().verify(&k, lane, &sealed, NOW).is_ok());
            }
        }
    }

    #[test]
    fn a_key_seals_with_its_own_mac_only() {
        // The same id and bytes under the other MAC: a node whose line says another
        // MAC refuses what the key sealed, as a forgery.
        let blake = keys_with(Mac::Blake3, &[(1, 0xaa)]);
        let hmac = keys_with(Mac::HmacSha256, &[(1, 0xaa)]);
        for (sealing, checking) in [(&blake, &hmac), (&hmac, &blake)] {
            let sealed = sealed_heartbeat(&mut Sealer::new(42, NOW), sealing, NOW);
            assert!(Verifier::default()
                .verify(sealing, Lane::Data, &sealed, NOW)
                .is_ok());
            assert_eq!(
                Verifier::default().verify(checking, Lane::Data, &sealed, NOW),
                Err(Rejected::BadMac)
            );
        }
        // The tag is keyed BLAKE3 of everything before it, with the lane's key; and
        // HMAC-SHA256 of the lane's byte and the same.
        let sealed = Sealer::new(42, NOW)
            .seal(blake.signing(), Lane::FilesDown, &heartbeat(), NOW)
            .to_vec();
        let (signed, got) = sealed.split_at(sealed.len() - TAG_LEN);
        let mut material = [0xaa; KEY_LEN + 1];
        material[KEY_LEN] = Lane::FilesDown as u8;
        let lane_key = blake3::derive_key(BLAKE3_LANE_CONTEXT, &material);
        assert_eq!(
            &blake3::keyed_hash(&lane_key, signed).as_bytes()[..TAG_LEN],
            got
        );
        let sealed = Sealer::new(42, NOW)
            .seal(hmac.signing(), Lane::FilesDown, &heartbeat(), NOW)
            .to_vec();
        let (signed, got) = sealed.split_at(sealed.len() - TAG_LEN);
        let k = hmac::Key::new(hmac::HMAC_SHA256, &[0xaa; KEY_LEN]);
        let lane_and_signed = [&[Lane::FilesDown as u8][..], signed].concat();
        assert_eq!(&hmac::sign(&k, &lane_and_signed).as_ref()[..TAG_LEN], got);
    }

    #[test]
    fn a_rotation_moves_a_backbone_from_one_mac_to_the_other() {
        let old = keys_with(Mac::HmacSha256, &[(1, 0xaa)]);
        let both = Keys::parse(&format!(
            "{a} {b} hmac-sha256\n{c} {d} blake3\n",
            a = "00000001",
            b = "aa".repeat(32),
            c = "00000002",
            d = "cc".repeat(32)
        ))
        .unwrap();
        let new_first = Keys::parse(&format!(
            "00000002 {} blake3\n00000001 {}\n",
            "cc".repeat(32),
            "aa".repeat(32)
        ))
        .unwrap();
        assert_eq!(both.signing().mac(), Mac::HmacSha256);
        assert_eq!(new_first.signing().mac(), Mac::Blake3);
        let mut v = Verifier::default();
        let by_old = sealed_heartbeat(&mut Sealer::new(1, NOW), &old, NOW);
        let by_new = sealed_heartbeat(&mut Sealer::new(2, NOW), &new_first, NOW);
        assert!(v.verify(&both, Lane::Data, &by_old, NOW).is_ok());
        assert!(v.verify(&both, Lane::Data, &by_new, NOW).is_ok());
    }

    #[test]
    fn during_a_rotation_both_keys_are_accepted_and_the_first_signs() {
        let old = keys(&[(1, 0xaa)]);
        let both = keys(&[(2, 0xcc), (1, 0xaa)]);
        assert_eq!(both.signing().id, 2);
        let mut v = Verifier::default();
        let mut a = Sealer::new(1, NOW);
        let mut b = Sealer::new(2, NOW);
        let by_old = sealed_heartbeat(&mut a, &old, NOW);
        let by_new = sealed_heartbeat(&mut b, &both, NOW);
        assert!(v.verify(&both, Lane::Data, &by_old, NOW).is_ok());
        assert!(v.verify(&both, Lane::Data, &by_new, NOW).is_ok());
        // A node still on the old file does not hear the new key.
        let by_new = sealed_heartbeat(&mut b, &both, NOW);
        assert_eq!(
            v.verify(&old, Lane::Data, &by_new, NOW),
            Err(Rejected::UnknownKey)
        );
    }

    #[test]
    fn strangers_cannot_fill_the_origins_and_key_holders_push_out_the_stalest() {
        let k = keys(&[(1, 0xaa)]);
        let mut v = Verifier::default();
        for o in 0..MAX_ORIGINS as u64 + 10 {
            let mut s = Sealer::new(o, NOW + o);
            assert!(v
                .verify(
                    &k,
                    Lane::Data,
                    s.seal(k.signing(), Lane::Data, &heartbeat(), NOW + o),
                    NOW
                )
                .is_ok());
        }
        assert_eq!(v.seen.len(), MAX_ORIGINS);
        assert!(!v.seen.contains_key(&0), "the stalest origin was forgotten");
    }

    #[test]
    fn key_files_are_checked_line_by_line() {
        let gen = Keys::generate([7u8; 36], Mac::Blake3);
        let k = Keys::parse(&gen).unwrap();
        assert_eq!(k.ids(), vec![0x07070707]);
        // An HMAC-SHA256 key's line has two words, as builds before BLAKE3 read.
        let old = Keys::generate([7u8; 36], Mac::HmacSha256);
        assert_eq!(Keys::parse(&old).unwrap().signing().mac(), Mac::HmacSha256);
        let line = old.lines().find(|l| !l.starts_with('#')).unwrap();
        assert_eq!(line.split_whitespace().count(), 2, "{line}");
        assert_eq!(Keys::parse("# nothing\n"), Err(KeyFileError::Empty));
        let e = Keys::parse("0000000g 00\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let short = format!("00000001 {}\n", "ab".repeat(31));
        assert!(Keys::parse(&short)
            .unwrap_err()
            .to_string()
            .contains("64 hex"));
        let twice = format!("00000001 {k}\n00000001 {k}\n", k = "ab".repeat(32));
        assert!(Keys::parse(&twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        // What keygen writes seals with BLAKE3; a line without a MAC word, HMAC-SHA256.
        assert_eq!(k.signing().mac(), Mac::Blake3);
        let key = "ab".repeat(32);
        for (line, mac) in [
            (format!("00000001 {key}"), Mac::HmacSha256),
            (format!("00000001 {key} hmac-sha256"), Mac::HmacSha256),
            (format!("00000001 {key}   blake3  # new"), Mac::Blake3),
        ] {
            assert_eq!(Keys::parse(&line).unwrap().signing().mac(), mac, "{line}");
        }
        for (line, says) in [
            (format!("00000001 {key} sha1"), "not blake3 or hmac-sha256"),
            (
                format!("00000001 {key} BLAKE3"),
                "not blake3 or hmac-sha256",
            ),
            (format!("00000001 {key} blake3 extra"), "two or three words"),
            ("00000001".to_string(), "two or three words"),
        ] {
            let e = Keys::parse(&line).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("line 1"), "{line}: {e}");
        }
    }
}
