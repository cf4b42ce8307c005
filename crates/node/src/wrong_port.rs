//! A connection to the node's own port that speaks HTTP (curl, a browser, a WebSocket
//! client pointed at the wrong port) gets a plain HTTP answer saying where HTTP is
//! served, rather than a binary refusal it shows as garbage.

/// HTTP request methods, each with the space that follows it on the request line.
const METHODS: [&[u8]; 8] = [
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
];

/// Whether a connection's first bytes are an HTTP request line: `None` while they are
/// still the beginning of one. A native frame cannot start so: its 4-byte length would
/// be over a gigabyte.
pub(crate) fn looks_like_http(first: &[u8]) -> Option<bool> {
    let mut undecided = false;
    for m in METHODS {
        if first.starts_with(m) {
            return Some(true);
        }
        undecided |= m.starts_with(first);
    }
    if undecided {
        None
    } else {
        Some(false)
    }
}

/// The answer to HTTP on the node's port for publishers and subscribers (and RSSL
/// consumers and providers where `rssl` shares it): where this node serves HTTP and
/// WebSocket (`ws`), if it does.
pub(crate) fn http_answer(ws: Option<std::net::SocketAddr>, rssl: bool) -> Vec<u8> {
    let where_http = match ws {
        Some(a) => format!(
            "This node serves HTTP and WebSocket (the JSON API, the dashboard, /metrics) at \
             http://{a}/."
        ),
        None => "This node serves no HTTP: start it with --ws ADDR for the WebSocket JSON \
                 API, the dashboard and /metrics."
            .to_string(),
    };
    let body = format!(
        "This is a Tickwire node's port for publishers and subscribers: the Tickwire \
         protocol{}, not HTTP. {where_http}\n",
        if rssl { " and RSSL" } else { "" }
    );
    tickwire_gateway::ws::http_response(
        "400 Bad Request",
        "text/plain; charset=utf-8",
        body.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_request_lines_are_told_from_frames_and_ripc() {
        assert_eq!(looks_like_http(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(looks_like_http(b"OPTIONS * HTTP/1.1"), Some(true));
        assert_eq!(looks_like_http(b"GE"), None);
        assert_eq!(looks_like_http(b""), None);
        assert_eq!(looks_like_http(b"GETX"), Some(false));
        // A native login frame, a RIPC ConnectReq.
        assert_eq!(looks_like_http(&[0, 0, 0, 40, 1]), Some(false));
        assert_eq!(looks_like_http(&[0, 64, 0, 0, 0, 0, 0x14]), Some(false));
        let answer = String::from_utf8(http_answer(None, false)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
        assert!(answer.contains("--ws ADDR"), "{answer}");
    }
}
