//! Decoding a message's body (PROTOCOL.md section 6): every field checked as it is read,
//! an unknown flag or value refused with what it was.

use super::{
    Ack, DataState, Directory, FidList, Login, Message, MessageType, NakCode, Post, Refresh,
    Replay, ReplayFrom, Request, Role, ServiceEntry, ServiceState, SlowConsumerPolicy, State,
    Status, StreamState, Update, UpdateType, View, Welcome, MAX_VIEW_FIDS, POST_ACK, POST_IMAGE,
    POST_REDELIVERED, REF_CLEAR, REF_COMPLETE, REF_SOLICITED, REQ_NO_REFRESH, REQ_STREAMING,
    REQ_VIEW, UPD_DO_NOT_CONFLATE,
};
use crate::field::FieldList;
use crate::wire::Reader;
use crate::DecodeError;

impl<'a> Message<'a> {
    /// Decodes one message body of the given type; the body must be consumed exactly.
    pub fn decode_body(ty: u8, body: &'a [u8]) -> Result<Message<'a>, DecodeError> {
        Self::decode_body_as(ty, body, Validation::Full)
    }

    pub(super) fn decode_body_as(
        ty: u8,
        body: &'a [u8],
        validation: Validation,
    ) -> Result<Message<'a>, DecodeError> {
        let ty = MessageType::from_u8(ty).ok_or(DecodeError::UnknownMessageType(ty))?;
        let mut r = Reader::new(body, "message body");
        let msg = match ty {
            MessageType::Login => {
                let version_min = r.u16()?;
                let version_max = r.u16()?;
                let role = match r.u8()? {
                    1 => Role::Subscriber,
                    2 => Role::Publisher,
                    v => {
                        return Err(DecodeError::InvalidValue {
                            what: "role",
                            value: v as u64,
                        })
                    }
                };
                Message::Login(Login {
                    version_min,
                    version_max,
                    role,
                    application: r.str16("application name")?,
                    user: r.str16("user")?,
                    token: r.str16("token")?,
                    slow_consumer: match r.u8()? {
                        0 => None,
                        v => Some(SlowConsumerPolicy::from_u8(v).ok_or(
                            DecodeError::InvalidValue {
                                what: "slow-consumer policy",
                                value: v as u64,
                            },
                        )?),
                    },
                })
            }
            MessageType::Welcome => Message::Welcome(Welcome {
                version: r.u16()?,
                heartbeat_ms: r.u32()?,
                max_frame: r.u32()?,
                max_streams: r.u32()?,
                max_output_bytes: r.u32()?,
                node_name: r.str16("node name")?,
            }),
            MessageType::Directory => {
                let n = r.u16()?;
                let mut services = Vec::with_capacity((n as usize).min(r.remaining() / 8));
                for _ in 0..n {
                    let name = r.str16("service name")?;
                    let state = match r.u8()? {
                        0 => ServiceState::Down,
                        1 => ServiceState::Up,
                        2 => ServiceState::Removed,
                        v => {
                            return Err(DecodeError::InvalidValue {
                                what: "service state",
                                value: v as u64,
                            })
                        }
                    };
                    let flags = r.u8()?;
                    check_flags(flags, 1, "service flags")?;
                    services.push(ServiceEntry {
                        name,
                        state,
                        interactive: flags & 1 != 0,
                        item_count: r.u32()?,
                    });
                }
                Message::Directory(Directory { services })
            }
            MessageType::Request => {
                let stream_id = r.u32()?;
                let flags = r.u8()?;
                check_flags(
                    flags,
                    REQ_STREAMING | REQ_VIEW | REQ_NO_REFRESH,
                    "request flags",
                )?;
                let service = r.str16("service name")?;
                let name = r.str16("item name")?;
                let view = if flags & REQ_VIEW != 0 {
                    let n = r.u16()? as usize;
                    if n > MAX_VIEW_FIDS {
                        return Err(DecodeError::InvalidValue {
                            what: "view length",
                            value: n as u64,
                        });
                    }
                    Some(View::Encoded(FidList {
                        bytes: r.bytes(n * 2)?,
                    }))
                } else {
                    None
                };
                Message::Request(Request {
                    stream_id,
                    streaming: flags & REQ_STREAMING != 0,
                    service,
                    name,
                    view,
                    refresh: flags & REQ_NO_REFRESH == 0,
                })
            }
            MessageType::Refresh => {
                let stream_id = r.u32()?;
                let seq = r.u32()?;
                let flags = r.u8()?;
                check_flags(
                    flags,
                    REF_COMPLETE | REF_SOLICITED | REF_CLEAR,
                    "refresh flags",
                )?;
                let state = read_state(&mut r)?;
                let service = r.str16("service name")?;
                let name = r.str16("item name")?;
                let fields = field_list_last(&mut r, validation)?;
                Message::Refresh(Refresh {
                    stream_id,
                    seq,
                    complete: flags & REF_COMPLETE != 0,
                    solicited: flags & REF_SOLICITED != 0,
                    clear_cache: flags & REF_CLEAR != 0,
                    state,
                    service,
                    name,
                    fields,
                })
            }
            MessageType::Update => {
                let stream_id = r.u32()?;
                let seq = r.u32()?;
                let update_type = UpdateType::from_u8(r.u8()?);
                let flags = r.u8()?;
                check_flags(flags, UPD_DO_NOT_CONFLATE, "update flags")?;
                let conflation_count = r.u16()?;
                let fields = field_list_last(&mut r, validation)?;
                Message::Update(Update {
                    stream_id,
                    seq,
                    update_type,
                    do_not_conflate: flags & UPD_DO_NOT_CONFLATE != 0,
                    conflation_count,
                    fields,
                })
            }
            MessageType::Status => Message::Status(Status {
                stream_id: r.u32()?,
                state: read_state(&mut r)?,
            }),
            MessageType::Close => Message::Close {
                stream_id: r.u32()?,
            },
            MessageType::Ping => Message::Ping(r.u64()?),
            MessageType::Pong => Message::Pong(r.u64()?),
            MessageType::Post => {
                let stream_id = r.u32()?;
                let post_id = r.u32()?;
                let flags = r.u8()?;
                check_flags(
                    flags,
                    POST_ACK | POST_IMAGE | POST_REDELIVERED,
                    "post flags",
                )?;
                let service = r.str16("service name")?;
                let name = r.str16("item name")?;
                Message::Post(Post {
                    stream_id,
                    post_id,
                    ack: flags & POST_ACK != 0,
                    image: flags & POST_IMAGE != 0,
                    redelivered: flags & POST_REDELIVERED != 0,
                    service,
                    name,
                    // Posts are rare next to updates: always checked in full.
                    fields: FieldList::decode_prefix(&mut r)?,
                })
            }
            MessageType::Ack => {
                let stream_id = r.u32()?;
                let post_id = r.u32()?;
                let nak = NakCode::of_ack(r.u8()?);
                Message::Ack(Ack {
                    stream_id,
                    post_id,
                    nak,
                    text: r.str16("ack text")?,
                })
            }
            MessageType::Replay => {
                let stream_id = r.u32()?;
                let from = match r.u8()? {
                    1 => {
                        let v = r.u64()?;
                        ReplayFrom::Seq(u32::try_from(v).map_err(|_| {
                            DecodeError::InvalidValue {
                                what: "replay sequence number",
                                value: v,
                            }
                        })?)
                    }
                    2 => ReplayFrom::Time(r.u64()?),
                    v => {
                        return Err(DecodeError::InvalidValue {
                            what: "replay start kind",
                            value: v as u64,
                        })
                    }
                };
                Message::Replay(Replay {
                    stream_id,
                    from,
                    service: r.str16("service name")?,
                    name: r.str16("item name")?,
                })
            }
            MessageType::Files => Message::Files(r.bytes(r.remaining())?),
        };
        r.finish()?;
        Ok(msg)
    }
}

pub(super) fn stream_state(v: u8) -> Result<StreamState, DecodeError> {
    Ok(match v {
        1 => StreamState::Open,
        2 => StreamState::Closed,
        3 => StreamState::ClosedRecover,
        4 => StreamState::NonStreaming,
        _ => {
            return Err(DecodeError::InvalidValue {
                what: "stream state",
                value: v as u64,
            })
        }
    })
}

pub(super) fn data_state(v: u8) -> Result<DataState, DecodeError> {
    Ok(match v {
        1 => DataState::Ok,
        2 => DataState::Suspect,
        _ => {
            return Err(DecodeError::InvalidValue {
                what: "data state",
                value: v as u64,
            })
        }
    })
}

pub(super) fn read_state<'a>(r: &mut Reader<'a>) -> Result<State<'a>, DecodeError> {
    Ok(State {
        stream: stream_state(r.u8()?)?,
        data: data_state(r.u8()?)?,
        code: r.u16()?,
        text: r.str16("status text")?,
    })
}

pub(super) fn check_flags(flags: u8, known: u8, what: &'static str) -> Result<(), DecodeError> {
    if flags & !known != 0 {
        return Err(DecodeError::InvalidValue {
            what,
            value: flags as u64,
        });
    }
    Ok(())
}

/// How much of a message is checked while decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Validation {
    /// Everything (bytes from a peer).
    Full,
    /// Not the values of the field lists of refreshes and updates (the bulk of a
    /// frame): for bytes this crate has decoded in full before.
    FieldListsChecked,
}

/// The field list that ends a message body.
pub(super) fn field_list_last<'a>(
    r: &mut Reader<'a>,
    validation: Validation,
) -> Result<FieldList<'a>, DecodeError> {
    match validation {
        Validation::Full => FieldList::decode_prefix(r),
        Validation::FieldListsChecked => {
            let all = r.rest();
            r.u16()?; // the count, at least
            r.bytes(r.remaining())?;
            Ok(FieldList::from_trusted(all))
        }
    }
}
