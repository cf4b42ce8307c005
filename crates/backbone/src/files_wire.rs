//! File-transfer messages as they travel on the backbone, framed, sealed and checked by
//! the node's files thread rather than its event loop: a seal of a 62 KiB chunk costs
//! about 30 µs of HMAC-SHA256, and at 200 MB/s that was a tenth of a CPU taken from the
//! loop that carries the market data. The event loop only offers what [`FilesWire::frame`]
//! made and hands what came on the files stream over unopened ([`FilesIn`]).

use crate::auth::{self, Keys, Lane, Rejected, Sealer, Verifier};
use crate::wire::{BackboneMessage, HEADER_LEN};
use tickwire_core::chunk_buffers;

/// Which way a file-transfer message leaves this node on the backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FilesRoute {
    /// From a source to every edge, on its files publication.
    Down,
    /// From an edge to the sources, on its files publication.
    UpFiles,
    /// From an edge to the sources, on its requests publication.
    UpRequests,
}

/// Which of the node's publications a framed files message is offered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesStream {
    /// The node's files publication.
    Files,
    /// Its requests publication (an edge's statuses and presences to the sources).
    Requests,
}

/// How this node puts file-transfer messages on the backbone now: the ids of its roles
/// (a source's changes when its link is rebuilt). From [`crate::Backbone::files_framing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesFraming {
    pub(crate) source: Option<u64>,
    pub(crate) edge: Option<u64>,
}

impl FilesFraming {
    /// A sender's message (`senders`: offers, chunks, cancels) goes down from a source
    /// on its files stream and up from an edge that is not one on its own files stream;
    /// a site's (statuses, presences) goes up from an edge on the requests stream, and
    /// down from a source that is not one.
    pub(crate) fn route(&self, senders: bool) -> Option<FilesRoute> {
        match (self.source.is_some(), self.edge.is_some(), senders) {
            (true, _, true) | (true, false, false) => Some(FilesRoute::Down),
            (false, true, true) => Some(FilesRoute::UpFiles),
            (_, true, false) => Some(FilesRoute::UpRequests),
            (false, false, _) => None,
        }
    }
}

/// Whether `body` is a sender's file-transfer message (offer, chunk, cancel).
pub(crate) fn is_senders(body: &[u8]) -> bool {
    matches!(body.get(2), Some(1 | 2 | 5))
}

/// A file-transfer message the backbone brought, for the files thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesIn {
    /// With `seal_to_check`: the whole backbone message, for [`FilesWire::open`];
    /// otherwise the file-transfer body, already checked.
    pub bytes: Vec<u8>,
    /// Whether the seal is still to be checked (a message of the files stream at a node
    /// with a key file).
    pub seal_to_check: bool,
}

/// The seals of what the files thread sends and the checks of what it opens, with
/// origins of their own: each publication's counters then grow in the order its
/// messages are offered.
struct Seals {
    keys: Keys,
    files_out: Sealer,
    requests_out: Sealer,
    files_in: Verifier,
}

/// What the files thread frames for the backbone and opens from it.
pub struct FilesWire {
    framing: Option<FilesFraming>,
    seals: Option<Seals>,
    /// Messages to check that came before the keys did.
    before_keys: u64,
}

impl Default for FilesWire {
    fn default() -> Self {
        FilesWire::new()
    }
}

impl FilesWire {
    /// No way on the backbone and no keys, until [`FilesWire::set_framing`] and
    /// [`FilesWire::set_keys`] say otherwise.
    pub fn new() -> FilesWire {
        FilesWire {
            framing: None,
            seals: None,
            before_keys: 0,
        }
    }

    /// How messages are framed from now on; None: the node has no way on the backbone
    /// now (what is framed then is dropped, as the transfers expect of a lost message).
    pub fn set_framing(&mut self, framing: Option<FilesFraming>) {
        self.framing = framing;
    }

    /// The backbone's keys (at start, and when the key file changed): messages are
    /// sealed with its signing key and checked against all of them.
    pub fn set_keys(&mut self, keys: Keys) {
        match self.seals.as_mut() {
            Some(s) => s.keys = keys,
            None => {
                let now = auth::wall_clock_ns();
                self.seals = Some(Seals {
                    keys,
                    files_out: Sealer::new(crate::random_id(), now),
                    requests_out: Sealer::new(crate::random_id(), now),
                    files_in: Verifier::default(),
                });
            }
        }
    }

    /// `body` as the backbone message that carries it (sealed with a key file), and the
    /// publication to offer it on; None when the node has no way for it.
    pub fn frame(&mut self, body: &[u8]) -> Option<(FilesStream, Vec<u8>)> {
        let framing = self.framing?;
        let route = framing.route(is_senders(body))?;
        let m = match route {
            FilesRoute::Down => BackboneMessage::Files {
                source: framing.source?,
                body,
            },
            FilesRoute::UpFiles | FilesRoute::UpRequests => BackboneMessage::EdgeFiles {
                edge: framing.edge?,
                body,
            },
        };
        // Built once, sealed where it is: a chunk is copied only into this message.
        let mut msg = chunk_buffers::SHARED.take(HEADER_LEN + 8 + body.len() + auth::TRAILER_LEN);
        m.encode(&mut msg).ok()?;
        let stream = match route {
            FilesRoute::Down | FilesRoute::UpFiles => FilesStream::Files,
            FilesRoute::UpRequests => FilesStream::Requests,
        };
        if let Some(s) = self.seals.as_mut() {
            let (sealer, lane) = match route {
                FilesRoute::Down => (&mut s.files_out, Lane::FilesDown),
                FilesRoute::UpFiles => (&mut s.files_out, Lane::FilesUp),
                FilesRoute::UpRequests => (&mut s.requests_out, Lane::Requests),
            };
            sealer.seal_in_place(s.keys.signing(), lane, &mut msg, auth::wall_clock_ns());
        }
        Some((stream, msg))
    }

    /// The file-transfer body of a message the files stream brought
    /// ([`FilesIn::seal_to_check`]), its seal checked; why not if it fails (counted in
    /// [`FilesWire::rejected`]). Without keys, nothing sealed is accepted.
    pub fn open<'a>(&mut self, msg: &'a [u8]) -> Result<&'a [u8], Rejected> {
        let Some(s) = self.seals.as_mut() else {
            self.before_keys += 1;
            return Err(Rejected::UnknownKey);
        };
        // Only file transfer comes on the files streams: a source's down, an edge's up.
        // A message of the requests stream put on one fails its lane's check.
        let lane = match BackboneMessage::decode_files(msg) {
            Some((true, _)) => Lane::FilesDown,
            _ => Lane::FilesUp,
        };
        let plain = s
            .files_in
            .verify(&s.keys, lane, msg, auth::wall_clock_ns())?;
        // The event loop routed it by its header: a body follows. A key holder's
        // message too short for one is junk the transfer refuses.
        Ok(BackboneMessage::decode_files(plain.body).map_or(&[][..], |(_, body)| body))
    }

    /// Messages [`FilesWire::open`] refused, by [`Rejected`] in its order.
    pub fn rejected(&self) -> [u64; 5] {
        let mut r = self.seals.as_ref().map_or([0; 5], |s| s.files_in.rejected);
        r[Rejected::UnknownKey as usize] += self.before_keys;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::tests::keys;

    fn source() -> FilesFraming {
        FilesFraming {
            source: Some(7),
            edge: None,
        }
    }

    fn edge() -> FilesFraming {
        FilesFraming {
            source: None,
            edge: Some(9),
        }
    }

    const CHUNK: &[u8] = &[0x54, 1, 2, 0, 0, 0, 1, 2, 3, 4];
    const STATUS: &[u8] = &[0x54, 1, 3, 0, 0, 0, 9, 9];

    #[test]
    fn a_sealed_chunk_opens_at_a_node_with_the_key_and_nowhere_else() {
        let mut at_source = FilesWire::new();
        at_source.set_framing(Some(source()));
        at_source.set_keys(keys(&[(1, 1)]));
        let (stream, sent) = at_source.frame(CHUNK).unwrap();
        assert_eq!(stream, FilesStream::Files);
        assert!(BackboneMessage::decode_files(&sent).is_some_and(|(senders, _)| senders));

        let mut at_edge = FilesWire::new();
        at_edge.set_framing(Some(edge()));
        at_edge.set_keys(keys(&[(1, 1)]));
        assert_eq!(at_edge.open(&sent), Ok(CHUNK));
        assert_eq!(at_edge.open(&sent), Err(Rejected::Replayed));
        let mut forged = sent.clone();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        assert_eq!(at_edge.open(&forged), Err(Rejected::BadMac));

        let mut other_key = FilesWire::new();
        other_key.set_keys(keys(&[(1, 2)]));
        assert_eq!(other_key.open(&sent), Err(Rejected::BadMac));
        assert_eq!(FilesWire::new().open(&sent), Err(Rejected::UnknownKey));
        assert_eq!(at_edge.rejected(), [0, 0, 1, 1, 0]);
    }

    #[test]
    fn an_edge_sends_chunks_on_its_files_stream_and_statuses_on_its_requests() {
        let mut w = FilesWire::new();
        assert!(w.frame(CHUNK).is_none(), "no way on the backbone yet");
        w.set_framing(Some(edge()));
        assert_eq!(w.frame(CHUNK).unwrap().0, FilesStream::Files);
        let (stream, status) = w.frame(STATUS).unwrap();
        assert_eq!(stream, FilesStream::Requests);
        assert_eq!(
            BackboneMessage::decode_files(&status),
            Some((false, STATUS)),
            "unsealed without keys"
        );
        w.set_framing(Some(source()));
        assert_eq!(w.frame(STATUS).unwrap().0, FilesStream::Files);
        w.set_framing(None);
        assert!(w.frame(STATUS).is_none());
    }

    #[test]
    fn an_edges_status_put_on_the_files_up_stream_is_refused_there() {
        let mut at_edge = FilesWire::new();
        at_edge.set_framing(Some(edge()));
        at_edge.set_keys(keys(&[(1, 1)]));
        let (stream, status) = at_edge.frame(STATUS).unwrap();
        assert_eq!(stream, FilesStream::Requests);
        let (stream, chunk) = at_edge.frame(CHUNK).unwrap();
        assert_eq!(stream, FilesStream::Files);
        // A source opens what its files streams bring: the edge's chunk, not a copy of
        // its status taken from the requests stream (whose origin the files thread
        // never heard, so only the seal's lane tells it from a first message).
        let mut at_source = FilesWire::new();
        at_source.set_framing(Some(source()));
        at_source.set_keys(keys(&[(1, 1)]));
        assert_eq!(at_source.open(&status), Err(Rejected::BadMac));
        assert_eq!(at_source.open(&chunk), Ok(CHUNK));
    }

    #[test]
    fn rotated_keys_seal_with_the_new_key_and_keep_the_counters() {
        let mut tx = FilesWire::new();
        tx.set_framing(Some(source()));
        tx.set_keys(keys(&[(1, 1)]));
        let mut rx = FilesWire::new();
        rx.set_keys(keys(&[(1, 1)]));
        let first = tx.frame(CHUNK).unwrap().1;
        assert_eq!(rx.open(&first), Ok(CHUNK));
        // The documented rotation: every node accepts the new key, then signs with it.
        rx.set_keys(keys(&[(1, 1), (2, 2)]));
        tx.set_keys(keys(&[(2, 2), (1, 1)]));
        let second = tx.frame(CHUNK).unwrap().1;
        assert_eq!(rx.open(&second), Ok(CHUNK));
        // The counters survive the new keys: the first message is still a replay.
        assert_eq!(rx.open(&first), Err(Rejected::Replayed));
        let mut old_only = FilesWire::new();
        old_only.set_keys(keys(&[(1, 1)]));
        assert_eq!(old_only.open(&second), Err(Rejected::UnknownKey));
    }

    #[test]
    fn a_message_before_the_keys_is_refused_and_counted() {
        let mut tx = FilesWire::new();
        tx.set_framing(Some(source()));
        tx.set_keys(keys(&[(1, 1)]));
        let sent = tx.frame(CHUNK).unwrap().1;
        let mut rx = FilesWire::new();
        assert_eq!(rx.open(&sent), Err(Rejected::UnknownKey));
        assert_eq!(rx.rejected(), [0, 1, 0, 0, 0]);
    }
}
