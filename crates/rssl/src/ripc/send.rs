//! What a channel writes: RWF messages packed into batches, larger ones fragmented, and
//! the bytes the socket has yet to take.

use super::{
    Channel, EXT_FRAGMENT, EXT_FRAGMENT_HEADER, FLAG_DATA, FLAG_EXTENDED, FLAG_PACKING, HEADER_LEN,
    KEEP_BUFFER, PACKED_LEN,
};

impl Channel {
    /// Queues one RWF message. Messages sent in one turn share RIPC messages (packed)
    /// until [`Channel::end_batch`]; a message longer than a RIPC message is fragmented.
    pub fn send(&mut self, rwf: &[u8]) {
        if !self.is_active() {
            return;
        }
        self.sent_since = true;
        let max = self.settings.max_msg_size as usize;
        if let Some((start, entries)) = self.open {
            if self.out.len() - start + PACKED_LEN + rwf.len() <= max {
                self.out
                    .extend_from_slice(&(rwf.len() as u16).to_be_bytes());
                self.out.extend_from_slice(rwf);
                self.open = Some((start, entries + 1));
                return;
            }
            self.end_batch();
        }
        if HEADER_LEN + PACKED_LEN + rwf.len() <= max {
            let start = self.out.len();
            self.out
                .extend_from_slice(&[0, 0, FLAG_DATA | FLAG_PACKING]);
            self.out
                .extend_from_slice(&(rwf.len() as u16).to_be_bytes());
            self.out.extend_from_slice(rwf);
            self.open = Some((start, 1));
            return;
        }
        self.fragment(rwf);
    }

    pub(super) fn fragment(&mut self, rwf: &[u8]) {
        let version = self.version.expect("active");
        let id_len = version.frag_id_len();
        let id = self.next_frag_id;
        self.next_frag_id = self.next_frag_id.wrapping_add(1);
        if self.next_frag_id == 0 || (id_len == 1 && self.next_frag_id > 255) {
            self.next_frag_id = 1;
        }
        let max = self.settings.max_msg_size as usize;
        let put_id = |out: &mut Vec<u8>| {
            if id_len == 2 {
                out.extend_from_slice(&id.to_be_bytes());
            } else {
                out.push(id as u8);
            }
        };
        let mut at = 0;
        let mut first = true;
        while at < rwf.len() || first {
            let start = self.out.len();
            self.out
                .extend_from_slice(&[0, 0, FLAG_EXTENDED | FLAG_DATA]);
            if first {
                self.out.push(EXT_FRAGMENT_HEADER);
                self.out
                    .extend_from_slice(&(rwf.len() as u32).to_be_bytes());
            } else {
                self.out.push(EXT_FRAGMENT);
            }
            put_id(&mut self.out);
            let room = max - (self.out.len() - start);
            let n = room.min(rwf.len() - at);
            self.out.extend_from_slice(&rwf[at..at + n]);
            at += n;
            let len = (self.out.len() - start) as u16;
            self.out[start..start + 2].copy_from_slice(&len.to_be_bytes());
            first = false;
        }
    }

    /// Closes the packed message being filled: call once per turn before writing. A
    /// packed message of one entry becomes a plain one.
    pub fn end_batch(&mut self) {
        let Some((start, entries)) = self.open.take() else {
            return;
        };
        if entries == 1 {
            // Plain: drop the entry's length.
            self.out
                .drain(start + HEADER_LEN..start + HEADER_LEN + PACKED_LEN);
            self.out[start + 2] = FLAG_DATA;
        }
        let len = (self.out.len() - start) as u16;
        self.out[start..start + 2].copy_from_slice(&len.to_be_bytes());
    }

    /// Bytes for the socket (call [`Channel::end_batch`] first).
    pub fn transmit(&self) -> &[u8] {
        let end = self.open.map_or(self.out.len(), |(start, _)| start);
        &self.out[self.sent..end]
    }

    /// `n` bytes of [`Channel::transmit`] were written.
    pub fn consume(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            self.out.shrink_to(KEEP_BUFFER);
        } else if self.sent > 64 * 1024 && self.open.is_none() {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
    }
}
