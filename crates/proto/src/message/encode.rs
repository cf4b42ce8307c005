//! Encoding a message (PROTOCOL.md section 6): its type byte, length and body.

use super::{
    Message, NakCode, ReplayFrom, State, MAX_MESSAGE_BODY, MAX_VIEW_FIDS, MESSAGE_HEADER_LEN,
    POST_ACK, POST_IMAGE, POST_REDELIVERED, REF_CLEAR, REF_COMPLETE, REF_SOLICITED, REQ_NO_REFRESH,
    REQ_STREAMING, REQ_VIEW, UPD_DO_NOT_CONFLATE,
};
use crate::wire::{put_str16, put_u16, put_u32, put_u64};
use crate::EncodeError;

pub(super) fn write_state(out: &mut Vec<u8>, s: &State<'_>) -> Result<(), EncodeError> {
    out.push(s.stream as u8);
    out.push(s.data as u8);
    put_u16(out, s.code);
    put_str16(out, s.text, "status text")
}

impl Message<'_> {
    /// Appends the encoded message (header included) to `out`. On error `out` is left as
    /// it was.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let start = out.len();
        out.push(self.message_type() as u8);
        out.extend_from_slice(&[0, 0]);
        let res = self.encode_body(out);
        let body_len = out.len() - start - MESSAGE_HEADER_LEN;
        let res = match res {
            Ok(()) if body_len > MAX_MESSAGE_BODY => Err(EncodeError::TooLong {
                what: "message body",
                len: body_len,
                max: MAX_MESSAGE_BODY,
            }),
            other => other,
        };
        match res {
            Ok(()) => {
                out[start + 1..start + 3].copy_from_slice(&(body_len as u16).to_be_bytes());
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    pub(super) fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Message::Login(m) => {
                put_u16(out, m.version_min);
                put_u16(out, m.version_max);
                out.push(m.role as u8);
                put_str16(out, m.application, "application name")?;
                put_str16(out, m.user, "user")?;
                put_str16(out, m.token, "token")?;
                out.push(m.slow_consumer.map_or(0, |p| p as u8));
            }
            Message::Welcome(m) => {
                put_u16(out, m.version);
                put_u32(out, m.heartbeat_ms);
                put_u32(out, m.max_frame);
                put_u32(out, m.max_streams);
                put_u32(out, m.max_output_bytes);
                put_str16(out, m.node_name, "node name")?;
            }
            Message::Directory(d) => {
                if d.services.len() > u16::MAX as usize {
                    return Err(EncodeError::TooLong {
                        what: "service list",
                        len: d.services.len(),
                        max: u16::MAX as usize,
                    });
                }
                put_u16(out, d.services.len() as u16);
                for s in &d.services {
                    put_str16(out, s.name, "service name")?;
                    out.push(s.state as u8);
                    out.push(s.interactive as u8);
                    put_u32(out, s.item_count);
                }
            }
            Message::Request(m) => {
                put_u32(out, m.stream_id);
                let mut flags = 0;
                if m.streaming {
                    flags |= REQ_STREAMING;
                }
                if m.view.is_some() {
                    flags |= REQ_VIEW;
                }
                if !m.refresh {
                    flags |= REQ_NO_REFRESH;
                }
                out.push(flags);
                put_str16(out, m.service, "service name")?;
                put_str16(out, m.name, "item name")?;
                if let Some(view) = &m.view {
                    let fids = view.fids();
                    if fids.len() > MAX_VIEW_FIDS {
                        return Err(EncodeError::TooLong {
                            what: "view",
                            len: fids.len(),
                            max: MAX_VIEW_FIDS,
                        });
                    }
                    put_u16(out, fids.len() as u16);
                    for f in fids {
                        out.extend_from_slice(&f.to_be_bytes());
                    }
                }
            }
            Message::Refresh(m) => {
                put_u32(out, m.stream_id);
                put_u32(out, m.seq);
                let mut flags = 0;
                if m.complete {
                    flags |= REF_COMPLETE;
                }
                if m.solicited {
                    flags |= REF_SOLICITED;
                }
                if m.clear_cache {
                    flags |= REF_CLEAR;
                }
                out.push(flags);
                write_state(out, &m.state)?;
                put_str16(out, m.service, "service name")?;
                put_str16(out, m.name, "item name")?;
                out.extend_from_slice(m.fields.as_bytes());
            }
            Message::Update(m) => {
                put_u32(out, m.stream_id);
                put_u32(out, m.seq);
                out.push(m.update_type.to_u8());
                out.push(if m.do_not_conflate {
                    UPD_DO_NOT_CONFLATE
                } else {
                    0
                });
                put_u16(out, m.conflation_count);
                out.extend_from_slice(m.fields.as_bytes());
            }
            Message::Status(m) => {
                put_u32(out, m.stream_id);
                write_state(out, &m.state)?;
            }
            Message::Close { stream_id } => put_u32(out, *stream_id),
            Message::Ping(v) | Message::Pong(v) => put_u64(out, *v),
            Message::Post(m) => {
                put_u32(out, m.stream_id);
                put_u32(out, m.post_id);
                let mut flags = 0;
                if m.ack {
                    flags |= POST_ACK;
                }
                if m.image {
                    flags |= POST_IMAGE;
                }
                if m.redelivered {
                    flags |= POST_REDELIVERED;
                }
                out.push(flags);
                put_str16(out, m.service, "service name")?;
                put_str16(out, m.name, "item name")?;
                out.extend_from_slice(m.fields.as_bytes());
            }
            Message::Ack(m) => {
                put_u32(out, m.stream_id);
                put_u32(out, m.post_id);
                out.push(m.nak.map_or(0, NakCode::to_u8));
                put_str16(out, m.text, "ack text")?;
            }
            Message::Replay(m) => {
                put_u32(out, m.stream_id);
                match m.from {
                    ReplayFrom::Seq(s) => {
                        out.push(1);
                        put_u64(out, s as u64);
                    }
                    ReplayFrom::Time(t) => {
                        out.push(2);
                        put_u64(out, t);
                    }
                }
                put_str16(out, m.service, "service name")?;
                put_str16(out, m.name, "item name")?;
            }
            Message::Files(body) => out.extend_from_slice(body),
        }
        Ok(())
    }
}
