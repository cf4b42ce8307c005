use super::handshake::mod_pow;
use super::*;

/// A ConnectReq as the SDK's clients build one.
fn connect_req(conn_version: u32, key_exchange: bool, ping: u8) -> Vec<u8> {
    let version = Version::from_connection_version(conn_version).unwrap();
    let mut m = vec![0, 0, 0];
    m.extend_from_slice(&conn_version.to_be_bytes());
    m.push(if key_exchange { KEY_EXCHANGE } else { 0 });
    let header_len_at = m.len();
    m.push(0);
    m.push(0); // no compression bitmap
    m.push(ping);
    m.push(0); // session flags
    if version >= Version::V12 {
        m.push(PROTOCOL_RWF);
    }
    m.push(14);
    m.push(1);
    for text in ["host", "127.0.0.1"] {
        m.push(text.len() as u8);
        m.extend_from_slice(text.as_bytes());
    }
    m[header_len_at] = m.len() as u8;
    if version >= Version::V13 {
        let c = b"ETA Java Edition|3.7.2";
        m.push(c.len() as u8 + 1);
        m.push(c.len() as u8);
        m.extend_from_slice(c);
    }
    let len = m.len() as u16;
    m[..2].copy_from_slice(&len.to_be_bytes());
    m
}

fn data(flags: u8, body: &[u8]) -> Vec<u8> {
    let mut m = ((body.len() + 3) as u16).to_be_bytes().to_vec();
    m.push(flags);
    m.extend_from_slice(body);
    m
}

/// A channel past the handshake (RIPC 13, no key exchange).
fn active(settings: Settings, now: Instant) -> Channel {
    let mut c = Channel::new(settings, now);
    c.handle_bytes(&connect_req(0x16, false, 30), now);
    let mut msg = Vec::new();
    assert_eq!(c.poll(&mut msg), Ok(Some(Input::Connected)));
    let n = c.transmit().len();
    c.consume(n);
    c
}

/// Splits bytes into RIPC messages: (flags, body).
fn messages(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u16::from_be_bytes([bytes[0], bytes[1]]) as usize;
        out.push((bytes[2], bytes[3..len].to_vec()));
        bytes = &bytes[len..];
    }
    out
}

#[test]
fn every_version_from_14_to_11_gets_its_ack() {
    let now = Instant::now();
    for (conn, ripc) in [(0x17u32, 9u32), (0x16, 8), (0x15, 7), (0x14, 6)] {
        let mut c = Channel::new(Settings::default(), now);
        c.handle_bytes(&connect_req(conn, false, 60), now);
        let mut msg = Vec::new();
        assert_eq!(c.poll(&mut msg), Ok(Some(Input::Connected)), "{conn:#x}");
        let ack = c.transmit();
        assert_eq!(u16::from_be_bytes([ack[0], ack[1]]) as usize, ack.len());
        assert_eq!(&ack[2..4], &[FLAG_EXTENDED, EXT_CONNECT_ACK]);
        assert_eq!(u32::from_be_bytes(ack[6..10].try_into().unwrap()), ripc);
        assert_eq!(u16::from_be_bytes([ack[10], ack[11]]), 6144);
        assert_eq!(ack[13], 60, "ping timeout granted");
        assert_eq!(u16::from_be_bytes([ack[16], ack[17]]), 0, "no compression");
    }
}

#[test]
fn an_unknown_version_is_refused_so_the_client_tries_a_lower_one() {
    let now = Instant::now();
    let mut req = connect_req(0x17, false, 60);
    req[3..7].copy_from_slice(&0x18u32.to_be_bytes());
    let mut c = Channel::new(Settings::default(), now);
    c.handle_bytes(&req, now);
    assert_eq!(
        c.poll(&mut Vec::new()),
        Err(RipcError::UnsupportedVersion(0x18))
    );
}

#[test]
fn the_key_exchange_agrees_on_one_key() {
    let now = Instant::now();
    let mut c = Channel::new(Settings::default(), now);
    c.handle_bytes(&connect_req(0x17, true, 60), now);
    let mut msg = Vec::new();
    assert_eq!(c.poll(&mut msg), Ok(None), "waits for the client's key");
    let ack = c.transmit().to_vec();
    // After the compression level (offset 19): key exchange, type, length, P, G, key.
    assert_eq!(&ack[19..22], &[KEY_EXCHANGE, KEY_EXCHANGE_TR_SL1_64, 24]);
    let p = u64::from_be_bytes(ack[22..30].try_into().unwrap());
    let g = u64::from_be_bytes(ack[30..38].try_into().unwrap());
    let server_half = u64::from_be_bytes(ack[38..46].try_into().unwrap());
    let client_secret = 0x1234_5678_9abc_def0u64 & 0x7FFF_FFFF_FFFF_FFFF;
    let mut key = vec![0, 12, KEY_EXCHANGE, 8];
    key.extend_from_slice(&mod_pow(g, client_secret, p).to_be_bytes());
    c.handle_bytes(&key, now);
    assert_eq!(c.poll(&mut msg), Ok(Some(Input::Connected)));
    assert_eq!(c.shared_key(), mod_pow(server_half, client_secret, p));
}

#[test]
fn the_ping_timeout_is_held_to_the_servers_bounds() {
    let now = Instant::now();
    let settings = Settings {
        max_ping_timeout_s: 15,
        ..Settings::default()
    };
    for (asked, granted) in [(60u8, 15u64), (10, 10), (1, 3)] {
        let mut c = Channel::new(settings.clone(), now);
        c.handle_bytes(&connect_req(0x17, false, asked), now);
        c.poll(&mut Vec::new()).unwrap();
        assert_eq!(c.ping_timeout(), Duration::from_secs(granted));
    }
}

#[test]
fn plain_packed_and_fragmented_messages_come_out_whole() {
    let now = Instant::now();
    let mut c = active(Settings::default(), now);
    let mut bytes = data(FLAG_DATA, b"one");
    bytes.extend(data(FLAG_DATA, b"")); // a ping
    let mut packed = Vec::new();
    for m in [&b"two"[..], b"", b"three"] {
        packed.extend_from_slice(&(m.len() as u16).to_be_bytes());
        packed.extend_from_slice(m);
    }
    bytes.extend(data(FLAG_DATA | FLAG_PACKING, &packed));
    // A fragmented message of 10 bytes in three fragments, id 7 (two bytes: RIPC 13).
    let mut first = vec![EXT_FRAGMENT_HEADER, 0, 0, 0, 10, 0, 7];
    first.extend_from_slice(b"0123");
    bytes.extend(data(FLAG_EXTENDED | FLAG_DATA, &first));
    bytes.extend(data(
        FLAG_EXTENDED | FLAG_DATA,
        &[EXT_FRAGMENT, 0, 7, b'4', b'5', b'6'],
    ));
    bytes.extend(data(
        FLAG_EXTENDED | FLAG_DATA,
        &[EXT_FRAGMENT, 0, 7, b'7', b'8', b'9'],
    ));
    // Byte by byte, to show no message depends on how the reads fall.
    let mut got = Vec::new();
    let mut msg = Vec::new();
    for b in bytes {
        c.handle_bytes(&[b], now);
        while let Some(Input::Message) = c.poll(&mut msg).unwrap() {
            got.push(String::from_utf8(msg.clone()).unwrap());
        }
    }
    assert_eq!(got, ["one", "two", "three", "0123456789"]);
}

#[test]
fn bytes_read_while_a_packed_message_is_handed_out_keep_its_entries() {
    let now = Instant::now();
    let mut c = active(Settings::default(), now);
    let mut packed = Vec::new();
    for m in [&b"two"[..], b"three"] {
        packed.extend_from_slice(&(m.len() as u16).to_be_bytes());
        packed.extend_from_slice(m);
    }
    c.handle_bytes(&data(FLAG_DATA | FLAG_PACKING, &packed), now);
    let mut msg = Vec::new();
    assert_eq!(c.poll(&mut msg), Ok(Some(Input::Message)));
    assert_eq!(msg, b"two");
    // The next read comes before the second entry is taken.
    c.handle_bytes(&data(FLAG_DATA, b"four"), now);
    let mut got = Vec::new();
    while let Some(Input::Message) = c.poll(&mut msg).unwrap() {
        got.push(String::from_utf8(msg.clone()).unwrap());
    }
    assert_eq!(got, ["three", "four"]);
}

#[test]
fn a_turns_messages_are_packed_and_a_long_one_fragmented() {
    let now = Instant::now();
    let settings = Settings {
        max_msg_size: 64,
        ..Settings::default()
    };
    let mut c = active(settings, now);
    c.send(b"alpha");
    c.send(b"beta");
    c.end_batch();
    c.send(b"solo");
    c.end_batch();
    let long: Vec<u8> = (0..150u8).collect();
    c.send(&long);
    c.end_batch();
    let out = messages(c.transmit());
    assert_eq!(
        out[0],
        (
            FLAG_DATA | FLAG_PACKING,
            b"\x00\x05alpha\x00\x04beta".to_vec()
        )
    );
    assert_eq!(out[1], (FLAG_DATA, b"solo".to_vec()));
    // Fragments: none longer than 64 bytes, reassembled by a channel of our own.
    assert!(out[2..].iter().all(|(_, b)| b.len() + 3 <= 64));
    assert_eq!(out[2].1[0], EXT_FRAGMENT_HEADER);
    let mut peer = active(Settings::default(), now);
    for (flags, body) in &out[2..] {
        peer.handle_bytes(&data(*flags, body), now);
    }
    let mut msg = Vec::new();
    assert_eq!(peer.poll(&mut msg), Ok(Some(Input::Message)));
    assert_eq!(msg, long);
}

#[test]
fn pings_go_out_and_silence_ends_the_channel() {
    let now = Instant::now();
    let mut c = active(Settings::default(), now);
    assert_eq!(c.ping_timeout(), Duration::from_secs(30));
    let at = c.poll_timeout().unwrap();
    assert_eq!(at, now + Duration::from_secs(10));
    c.handle_timeout(at).unwrap();
    assert_eq!(c.transmit(), &[0, 3, FLAG_DATA]);
    assert_eq!(
        c.handle_timeout(now + Duration::from_secs(30)),
        Err(RipcError::TimedOut(30))
    );
}

#[test]
fn hostile_input_is_refused_with_a_reason() {
    let now = Instant::now();
    let settings = Settings {
        max_message: 100,
        ..Settings::default()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0, 2, 0], "shorter than the header"),
        (data(FLAG_DATA | FLAG_COMPRESSED, b"x"), "compressed"),
        (data(FLAG_DATA | FLAG_PACKING, &[0, 9, b'a']), "runs past"),
        (
            data(
                FLAG_EXTENDED | FLAG_DATA,
                &[EXT_FRAGMENT_HEADER, 0, 0, 1, 0, 0, 1],
            ),
            "exceeds the maximum",
        ),
        (
            data(FLAG_EXTENDED | FLAG_DATA, &[EXT_FRAGMENT, 0, 3, b'x']),
            "never started",
        ),
    ];
    for (bytes, why) in cases {
        let mut c = active(settings.clone(), now);
        c.handle_bytes(&bytes, now);
        let e = c.poll(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains(why), "{e} should say {why}");
        assert!(!c.is_active());
    }
}

#[test]
fn a_connect_req_is_told_from_a_native_login() {
    assert_eq!(
        looks_like_connect_req(&connect_req(0x17, true, 60)),
        Some(true)
    );
    assert_eq!(looks_like_connect_req(&[0, 0, 0, 40, 1]), Some(false));
    assert_eq!(looks_like_connect_req(&[0]), None);
    assert_eq!(looks_like_connect_req(b"GET / HTTP/1.1"), Some(false));
}

#[test]
fn a_nak_says_why() {
    let now = Instant::now();
    let mut c = Channel::new(Settings::default(), now);
    c.nak("connection limit reached");
    let nak = c.transmit();
    assert_eq!(&nak[2..4], &[FLAG_EXTENDED, EXT_CONNECT_NAK]);
    let n = u16::from_be_bytes([nak[6], nak[7]]) as usize;
    assert_eq!(&nak[8..8 + n - 1], b"connection limit reached");
}

#[test]
fn a_client_connects_to_a_server_of_our_own() {
    let now = Instant::now();
    let mut client = Channel::connect(Settings::default(), "node", now);
    let mut server = Channel::new(
        Settings {
            max_msg_size: 4000,
            max_ping_timeout_s: 20,
            ..Settings::default()
        },
        now,
    );
    server.handle_bytes(client.transmit(), now);
    let n = client.transmit().len();
    client.consume(n);
    let mut msg = Vec::new();
    assert_eq!(server.poll(&mut msg), Ok(Some(Input::Connected)));
    client.handle_bytes(server.transmit(), now);
    assert_eq!(client.poll(&mut msg), Ok(Some(Input::Connected)));
    assert_eq!(client.version(), Some(Version::V14));
    assert_eq!(client.ping_timeout(), Duration::from_secs(20));
    // A message too long for the server's 4,000 bytes goes fragmented, and arrives.
    let long = vec![7u8; 9000];
    client.send(&long);
    client.end_batch();
    server.handle_bytes(client.transmit(), now);
    assert_eq!(server.poll(&mut msg), Ok(Some(Input::Message)));
    assert_eq!(msg, long);
    // A refusal says why.
    let mut refused = Channel::connect(Settings::default(), "node", now);
    let mut nak = Channel::new(Settings::default(), now);
    nak.nak("not today");
    refused.handle_bytes(nak.transmit(), now);
    assert_eq!(
        refused.poll(&mut msg),
        Err(RipcError::Refused("not today".into()))
    );
}

#[test]
fn a_client_speaks_each_ripc_version_down_to_11_and_refuses_an_ack_of_another() {
    let now = Instant::now();
    let mut msg = Vec::new();
    let mut version = Some(Version::V14);
    while let Some(v) = version {
        let mut client = Channel::connect_at(Settings::default(), "node", v, now);
        let mut server = Channel::new(
            Settings {
                max_msg_size: 1000,
                ..Settings::default()
            },
            now,
        );
        assert!(client.awaits_connect_ack());
        server.handle_bytes(client.transmit(), now);
        let n = client.transmit().len();
        client.consume(n);
        assert_eq!(server.poll(&mut msg), Ok(Some(Input::Connected)), "{v:?}");
        assert_eq!(server.version(), Some(v));
        client.handle_bytes(server.transmit(), now);
        let n = server.transmit().len();
        server.consume(n);
        assert_eq!(client.poll(&mut msg), Ok(Some(Input::Connected)), "{v:?}");
        assert!(!client.awaits_connect_ack());
        assert_eq!(client.version(), Some(v));
        // Fragmented both ways with the version's fragment ids.
        let long: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        client.send(&long);
        client.end_batch();
        server.handle_bytes(client.transmit(), now);
        assert_eq!(server.poll(&mut msg), Ok(Some(Input::Message)), "{v:?}");
        assert_eq!(msg, long, "{v:?}");
        server.send(&long);
        server.end_batch();
        let n = client.transmit().len();
        client.consume(n);
        client.handle_bytes(server.transmit(), now);
        assert_eq!(client.poll(&mut msg), Ok(Some(Input::Message)), "{v:?}");
        assert_eq!(msg, long, "{v:?}");
        version = v.lower();
    }
    // A client that asked for 13 does not take an ack of 14.
    let v14 = Channel::connect(Settings::default(), "node", now);
    let mut server = Channel::new(Settings::default(), now);
    server.handle_bytes(v14.transmit(), now);
    assert_eq!(server.poll(&mut msg), Ok(Some(Input::Connected)));
    let mut v13 = Channel::connect_at(Settings::default(), "node", Version::V13, now);
    v13.handle_bytes(server.transmit(), now);
    assert!(matches!(
        v13.poll(&mut msg),
        Err(RipcError::UnsupportedVersion(_))
    ));
}

/// Handshakes, packed messages and fragments corrupted at random, read in random
/// chunks by either side of a channel: refused or taken, never a panic.
#[test]
fn corrupted_bytes_never_make_a_channel_panic() {
    let now = Instant::now();
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // A sender's bytes: packed and fragmented messages, pings.
    let small = Settings {
        max_msg_size: 512,
        ..Settings::default()
    };
    let mut sender = active(small.clone(), now);
    for n in [10usize, 40, 700, 3000, 0, 5] {
        sender.send(&vec![0xAB; n]);
    }
    sender.end_batch();
    let stream = sender.transmit().to_vec();
    // A server's ConnectAck, with its key exchange.
    let mut server_ack = Channel::new(Settings::default(), now);
    server_ack.handle_bytes(&connect_req(0x17, true, 30), now);
    let _ = server_ack.poll(&mut Vec::new());
    let ack = server_ack.transmit().to_vec();
    // Each round corrupts one of these in up to four places.
    let seeds: Vec<Vec<u8>> = vec![
        connect_req(0x14, false, 30),
        connect_req(0x16, false, 30),
        connect_req(0x17, true, 30),
        stream,
        ack,
    ];
    for round in 0..50_000 {
        let mut m = seeds[(rnd() % seeds.len() as u64) as usize].clone();
        for _ in 0..(1 + rnd() % 4) {
            if m.is_empty() {
                break;
            }
            let i = (rnd() % m.len() as u64) as usize;
            match rnd() % 4 {
                0 => m[i] = rnd() as u8,
                1 => m[i] ^= 1 << (rnd() % 8),
                2 => m.truncate(i),
                _ => m.insert(i, rnd() as u8),
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut msg = Vec::new();
            for mut c in [
                Channel::new(small.clone(), now),
                active(small.clone(), now),
                Channel::connect_at(small.clone(), "h", Version::V11, now),
                Channel::connect(small.clone(), "h", now),
            ] {
                let mut at = 0;
                while at < m.len() {
                    let n = 1 + (rnd() % 300) as usize;
                    let end = (at + n).min(m.len());
                    c.handle_bytes(&m[at..end], now);
                    at = end;
                    for _ in 0..64 {
                        match c.poll(&mut msg) {
                            Ok(Some(_)) => c.send(&msg),
                            _ => break,
                        }
                    }
                }
                c.end_batch();
                let _ = c.handle_timeout(now + std::time::Duration::from_secs(20));
            }
        }));
        assert!(r.is_ok(), "round {round}: panicked on {m:02x?}");
    }
}

/// A burst (megabytes for a consumer that did not read for a while, a dictionary
/// download) does not leave its memory with the connection once written, nor does a
/// large read once handled: the buffers go back to at most [`KEEP_BUFFER`], as a
/// native connection's do.
#[test]
fn a_bursts_buffers_are_released_once_it_is_written_or_read() {
    let now = Instant::now();
    let mut c = active(Settings::default(), now);
    let rwf = [7u8; 1000];
    for _ in 0..4000 {
        c.send(&rwf);
    }
    c.end_batch();
    assert!(c.pending() > 4_000_000);
    while !c.transmit().is_empty() {
        let n = c.transmit().len().min(100_000);
        c.consume(n);
    }
    assert!(c.out.capacity() <= KEEP_BUFFER, "{}", c.out.capacity());
    // The same as read: 4,000 messages in one read, all handed out.
    let mut read = Vec::new();
    for _ in 0..4000 {
        read.extend_from_slice(&data(FLAG_DATA, &rwf));
    }
    c.handle_bytes(&read, now);
    let mut msg = Vec::new();
    let mut n = 0;
    while let Ok(Some(Input::Message)) = c.poll(&mut msg) {
        n += 1;
    }
    assert_eq!(n, 4000);
    assert!(c.input.capacity() <= KEEP_BUFFER, "{}", c.input.capacity());
    // Still a channel: the next message comes whole.
    c.handle_bytes(&data(FLAG_DATA, b"next"), now);
    assert_eq!(c.poll(&mut msg), Ok(Some(Input::Message)));
    assert_eq!(msg, b"next");
}

/// A first fragment announcing a large message: the channel holds room for what came
/// (at most [`KEEP_BUFFER`]), not for what was announced, and the message still comes
/// whole once its fragments do.
#[test]
fn an_announced_message_holds_no_room_before_its_fragments_come() {
    let now = Instant::now();
    let mut c = active(Settings::default(), now);
    let total: u32 = 200_000;
    let mut first = vec![EXT_FRAGMENT_HEADER];
    first.extend_from_slice(&total.to_be_bytes());
    first.extend_from_slice(&[0, 9]);
    first.extend_from_slice(b"head");
    c.handle_bytes(&data(FLAG_EXTENDED | FLAG_DATA, &first), now);
    let mut msg = Vec::new();
    assert_eq!(c.poll(&mut msg), Ok(None));
    let held: usize = c.reassembly.iter().map(|r| r.data.capacity()).sum();
    assert!(held <= KEEP_BUFFER, "{held} bytes held for 4 received");
    // The rest, in fragments of 6,000 bytes: the message comes whole.
    let mut sent = 4usize;
    let mut got = None;
    while sent < total as usize {
        let n = (total as usize - sent).min(6000);
        let mut frag = vec![EXT_FRAGMENT, 0, 9];
        frag.extend(std::iter::repeat_n(b'x', n));
        c.handle_bytes(&data(FLAG_EXTENDED | FLAG_DATA, &frag), now);
        sent += n;
        if let Ok(Some(Input::Message)) = c.poll(&mut msg) {
            got = Some(msg.clone());
        }
    }
    let got = got.expect("the whole message");
    assert_eq!(got.len(), total as usize);
    assert_eq!(&got[..4], b"head");
}

/// A TLS client on a port without TLS (the SDK's encrypted connection type to a node
/// without `[tls]`): its ClientHello is refused at once. Read as a RIPC length (5,635
/// bytes and more) it was waited for, and the client waited for the server's answer.
#[test]
fn a_tls_client_hello_is_refused_at_once() {
    let now = Instant::now();
    let mut c = Channel::new(Settings::default(), now);
    // A TLS 1.2 record of type handshake, 300 bytes: a ClientHello.
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x01, 0x27, 0x01, 0x00, 0x01, 0x23, 0x03, 0x03,
    ];
    hello.resize(300, 0x5a);
    c.handle_bytes(&hello, now);
    let mut msg = Vec::new();
    let r = c.poll(&mut msg);
    assert!(
        matches!(&r, Err(RipcError::NotRipc(why)) if why.contains("TLS")),
        "{r:?}"
    );
}
