//! What a channel reads: whole RIPC messages from the byte stream, packed messages one
//! entry at a time, and fragmented ones reassembled (within bounds).

use super::{
    Channel, Input, Reassembly, RipcError, State, EXT_FRAGMENT, EXT_FRAGMENT_HEADER,
    FLAG_COMPRESSED, FLAG_COMP_FRAGMENT, FLAG_DATA, FLAG_EXTENDED, FLAG_PACKING, HEADER_LEN,
    KEEP_BUFFER, MAX_REASSEMBLIES, PACKED_LEN,
};

impl Channel {
    /// The next thing the bytes received hold: the handshake's end, or one RWF message
    /// (copied into `msg`). `Ok(None)`: more bytes are needed. After an error the
    /// channel is closed (a ConnectNak may be waiting in [`Channel::transmit`]).
    pub fn poll(&mut self, msg: &mut Vec<u8>) -> Result<Option<Input>, RipcError> {
        let r = self.poll_inner(msg);
        if r.is_err() {
            self.state = State::Closed;
            self.input = Vec::new();
            self.pos = 0;
            self.packed = None;
        } else if matches!(r, Ok(None)) && self.pos == self.input.len() && self.packed.is_none() {
            // All of it handled.
            self.input.clear();
            self.pos = 0;
            self.input.shrink_to(KEEP_BUFFER);
        }
        r
    }

    pub(super) fn poll_inner(&mut self, msg: &mut Vec<u8>) -> Result<Option<Input>, RipcError> {
        loop {
            match self.state {
                State::Closed => return Ok(None),
                State::Established => {
                    self.state = State::Active;
                    return Ok(Some(Input::Connected));
                }
                State::AwaitConnectAck => {
                    let Some(ack) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_connect_ack(&ack)?;
                    self.state = State::Established;
                }
                State::AwaitConnectReq => {
                    // A TLS record of type handshake (a ClientHello) would read as a
                    // ConnectReq of 5,635 bytes or more, waited for while the client
                    // waits for the server's answer.
                    if self.input[self.pos..].starts_with(&[0x16, 0x03]) {
                        return Err(RipcError::NotRipc(
                            "a TLS handshake, on a port without TLS (the node has no \
                             [tls]): connect without encryption"
                                .into(),
                        ));
                    }
                    let Some(req) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_connect_req(&req)?;
                }
                State::AwaitClientKey { p, secret } => {
                    let Some(key) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_client_key(&key, p, secret)?;
                    self.state = State::Established;
                }
                State::Active => {
                    if self.packed_entry(msg)? {
                        return Ok(Some(Input::Message));
                    }
                    let Some(len) = self.whole_message()? else {
                        return Ok(None);
                    };
                    let start = self.pos;
                    self.pos += len;
                    if self.on_data(start, len, msg)? {
                        return Ok(Some(Input::Message));
                    }
                }
            }
        }
    }

    /// The length of the RIPC message at the front of `input`, once all of it is there.
    pub(super) fn whole_message(&self) -> Result<Option<usize>, RipcError> {
        let input = &self.input[self.pos..];
        if input.len() < 2 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([input[0], input[1]]) as usize;
        if len < HEADER_LEN {
            return Err(RipcError::Malformed(format!(
                "a message length of {len} is shorter than the header"
            )));
        }
        Ok((input.len() >= len).then_some(len))
    }

    /// The next entry of the packed message being handed out, if one is.
    pub(super) fn packed_entry(&mut self, msg: &mut Vec<u8>) -> Result<bool, RipcError> {
        while let Some((at, end)) = self.packed {
            if end - at < PACKED_LEN {
                return Err(RipcError::Malformed(
                    "a packed entry's length is cut".into(),
                ));
            }
            let n = u16::from_be_bytes([self.input[at], self.input[at + 1]]) as usize;
            let from = at + PACKED_LEN;
            if n > end - from {
                return Err(RipcError::Malformed(format!(
                    "a packed entry of {n} bytes runs past its message"
                )));
            }
            self.packed = (from + n < end).then_some((from + n, end));
            if n > 0 {
                msg.clear();
                msg.extend_from_slice(&self.input[from..from + n]);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One RIPC data message at `start` in `input`: true if it completed an RWF
    /// message (in `msg`).
    pub(super) fn on_data(
        &mut self,
        start: usize,
        len: usize,
        msg: &mut Vec<u8>,
    ) -> Result<bool, RipcError> {
        let flags = self.input[start + 2];
        if len == HEADER_LEN {
            return Ok(false); // a ping: it has done its work by arriving
        }
        if flags & (FLAG_COMPRESSED | FLAG_COMP_FRAGMENT) != 0 {
            return Err(RipcError::Compressed);
        }
        if flags & FLAG_PACKING != 0 {
            self.packed = Some((start + HEADER_LEN, start + len));
            return self.packed_entry(msg);
        }
        if flags & FLAG_EXTENDED != 0 {
            return self.on_fragment(start, len, msg);
        }
        if flags & FLAG_DATA == 0 {
            return Err(RipcError::Malformed(format!(
                "flags {flags:#04x} name no data"
            )));
        }
        let body = &self.input[start + HEADER_LEN..start + len];
        if body.len() > self.settings.max_message {
            return Err(RipcError::TooLarge {
                len: body.len(),
                max: self.settings.max_message,
            });
        }
        msg.clear();
        msg.extend_from_slice(body);
        Ok(true)
    }

    pub(super) fn on_fragment(
        &mut self,
        start: usize,
        len: usize,
        msg: &mut Vec<u8>,
    ) -> Result<bool, RipcError> {
        let version = self.version.expect("active");
        let id_len = version.frag_id_len();
        let m = &self.input[start..start + len];
        if m.len() < HEADER_LEN + 1 {
            return Err(RipcError::Malformed("a fragment without its flags".into()));
        }
        let ext = m[3];
        let read_id = |at: usize| -> Result<u16, RipcError> {
            if m.len() < at + id_len {
                return Err(RipcError::Malformed("a fragment's id is cut".into()));
            }
            Ok(if id_len == 2 {
                u16::from_be_bytes([m[at], m[at + 1]])
            } else {
                m[at] as u16
            })
        };
        if ext & EXT_FRAGMENT_HEADER != 0 {
            if m.len() < 8 {
                return Err(RipcError::Malformed("a first fragment is cut".into()));
            }
            let total = u32::from_be_bytes([m[4], m[5], m[6], m[7]]) as usize;
            let id = read_id(8)?;
            let data = &m[8 + id_len..];
            if total > self.settings.max_message {
                return Err(RipcError::TooLarge {
                    len: total,
                    max: self.settings.max_message,
                });
            }
            if data.len() > total {
                return Err(RipcError::Malformed(
                    "a first fragment longer than its message".into(),
                ));
            }
            self.reassembly.retain(|r| r.id != id);
            if self.reassembly.len() >= MAX_REASSEMBLIES {
                return Err(RipcError::Malformed(format!(
                    "more than {MAX_REASSEMBLIES} fragmented messages at once"
                )));
            }
            // What all messages in progress will hold is bounded like one message.
            let held: usize = self.reassembly.iter().map(|r| r.total).sum();
            if held + total > self.settings.max_message {
                return Err(RipcError::TooLarge {
                    len: held + total,
                    max: self.settings.max_message,
                });
            }
            // Room for what came, not for what is announced: a peer that announces
            // a large message and sends no more holds no memory for it.
            let mut buf = Vec::with_capacity(total.min(KEEP_BUFFER).max(data.len()));
            buf.extend_from_slice(data);
            self.reassembly.push(Reassembly {
                id,
                total,
                data: buf,
            });
            return Ok(self.complete(id, msg));
        }
        if ext & EXT_FRAGMENT != 0 {
            let id = read_id(4)?;
            let data = &m[4 + id_len..];
            let Some(r) = self.reassembly.iter_mut().find(|r| r.id == id) else {
                return Err(RipcError::Malformed(format!(
                    "a fragment of message {id}, which never started"
                )));
            };
            if data.len() > r.total - r.data.len() {
                return Err(RipcError::Malformed(format!(
                    "fragments of message {id} run past its length of {}",
                    r.total
                )));
            }
            r.data.extend_from_slice(data);
            return Ok(self.complete(id, msg));
        }
        Err(RipcError::Malformed(format!(
            "extended flags {ext:#04x} are not a fragment"
        )))
    }

    /// Hands out a reassembled message once all of it is there.
    pub(super) fn complete(&mut self, id: u16, msg: &mut Vec<u8>) -> bool {
        let Some(i) = self
            .reassembly
            .iter()
            .position(|r| r.id == id && r.data.len() == r.total)
        else {
            return false;
        };
        let r = self.reassembly.swap_remove(i);
        *msg = r.data;
        true
    }
}
