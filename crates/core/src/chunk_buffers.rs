//! Buffers of file-transfer messages, used again rather than freed.
//!
//! A file chunk's message (about 62 KiB) is filled on one thread and dropped on the
//! other: at a site the event loop copies it out of Aeron and the files thread writes it;
//! at a source the event loop takes an upload's bytes from the client and the files
//! thread spools them, then the files thread frames chunks and the event loop offers
//! them. Freed that way, at 200 MB/s, glibc kept giving the top of its heap back to the
//! kernel and the next chunk faulted in fresh zeroed pages: about a tenth of each
//! node's CPU on a large file (`scripts/files_to_sites.sh` with `perf record`). A few
//! spare buffers, shared by the threads, end that.

use std::sync::Mutex;

/// Spare buffers kept at most: more than the messages a file's window keeps in flight
/// between the two threads.
const KEEP: usize = 64;

/// A buffer larger than this is freed, not kept (a chunk's message is about 62 KiB), so
/// the spares hold at most `KEEP` times this.
const LARGEST_KEPT: usize = 128 * 1024;

/// Spare buffers.
pub struct ChunkBuffers {
    spare: Mutex<Vec<Vec<u8>>>,
}

/// The buffers the node's threads share.
pub static SHARED: ChunkBuffers = ChunkBuffers::new();

impl ChunkBuffers {
    const fn new() -> Self {
        ChunkBuffers {
            spare: Mutex::new(Vec::new()),
        }
    }

    /// An empty buffer with room for `capacity` bytes: a spare one if there is one.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        let spare = self.spare.lock().map(|mut s| s.pop()).unwrap_or(None);
        let mut buf = spare.unwrap_or_default();
        buf.clear();
        buf.reserve(capacity);
        buf
    }

    /// `bytes` with room for `extra` more after them, in a buffer from [`Self::take`].
    pub fn copy_of(&self, bytes: &[u8], extra: usize) -> Vec<u8> {
        let mut buf = self.take(bytes.len() + extra);
        buf.extend_from_slice(bytes);
        buf
    }

    /// Gives a buffer back for the next [`Self::take`] (freed if enough are spare, or
    /// if it is larger than a chunk's message).
    pub fn give_back(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > LARGEST_KEPT {
            return;
        }
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < KEEP {
                spare.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_empty_with_the_room_asked_for() {
        let buffers = ChunkBuffers::new();
        let mut b = buffers.take(1000);
        b.extend_from_slice(&[7; 1000]);
        let at = b.as_ptr();
        buffers.give_back(b);
        let again = buffers.take(500);
        assert_eq!(again.as_ptr(), at, "the spare was not used again");
        assert!(again.is_empty() && again.capacity() >= 1000);
        let copy = buffers.copy_of(b"abc", 10);
        assert_eq!(copy, b"abc");
        assert!(copy.capacity() >= 13);
    }

    #[test]
    fn large_buffers_are_freed_and_the_spares_are_bounded() {
        let buffers = ChunkBuffers::new();
        buffers.give_back(Vec::with_capacity(LARGEST_KEPT + 1));
        assert_eq!(buffers.spare.lock().unwrap().len(), 0);
        for _ in 0..KEEP * 2 {
            buffers.give_back(Vec::with_capacity(100));
        }
        assert_eq!(buffers.spare.lock().unwrap().len(), KEEP);
    }
}
