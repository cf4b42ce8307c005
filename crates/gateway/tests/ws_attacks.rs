//! The attacks found against the node's WebSocket port, as inputs to the `ws_frames`
//! fuzz target's logic (`fuzz_logic/mod.rs`, which checks their invariants): floods of
//! tiny frames (the decoder must move each byte at most once) and request heads over
//! the limit (refused whether or not they are complete). Seeds for a fuzzing run, too.

mod fuzz_logic;

/// A masked client frame.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [9u8, 8, 7, 6];
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[test]
fn floods_of_tiny_frames_decode_in_linear_time() {
    let pieces: [Vec<u8>; 4] = [
        client_frame(0x9, b""),
        client_frame(0x1, b"{}"),
        // Fragments of one message, then its end.
        [
            {
                let mut c = client_frame(0x1, b"[");
                c[0] = 0x01; // not final
                c
            },
            client_frame(0x0, b"1]"),
        ]
        .concat(),
        // An oversized message (skipped) between tiny ones.
        [client_frame(0x2, &[0u8; 2000]), client_frame(0xA, b"x")].concat(),
    ];
    for piece in &pieces {
        // Flood mode (top bit), batches of 1 to 64 KiB.
        for first in [0x80u8, 0x80 | 7, 0x80 | 63] {
            let mut input = vec![first];
            input.extend_from_slice(piece);
            assert_eq!(fuzz_logic::ws_frames(&input), Ok(()), "{piece:?}");
        }
        // The same flood spelt out, fed 1 to 64 bytes at a time.
        for first in [0u8, 5, 63] {
            let mut input = vec![first];
            input.extend(piece.repeat(20_000 / piece.len() + 1));
            assert_eq!(fuzz_logic::ws_frames(&input), Ok(()));
        }
    }
}

#[test]
fn heads_over_the_limit_are_refused_whole_or_in_pieces() {
    for filler in [16 * 1024, 100_000] {
        let head = format!(
            "GET /WebSocket HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
            "a".repeat(filler)
        );
        // Its invariants: a head accepted fits the limit; none over it is waited on.
        let _ = fuzz_logic::ws_frames(head.as_bytes());
        let _ = fuzz_logic::ws_frames(&head.as_bytes()[..filler / 2]);
    }
    let many_lines = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(200));
    let _ = fuzz_logic::ws_frames(many_lines.as_bytes());
}
