//! The NATS client protocol, as much of it as the peer scenario's load tools need:
//! connect, publish, subscribe, and read messages (answering the server's pings).
//!
//! Why not a crate: the maintained Rust client (`async-nats`) runs on tokio, so every
//! message would cross a channel to a runtime task; the lab's own tools are one thread
//! each over a plain socket, and the peer must be driven the same way for the figures to
//! compare the servers rather than the clients. The synchronous `nats` crate is
//! deprecated. The protocol's text framing is small (docs.nats.io, "Client Protocol"),
//! and the parser below is a pure function, tested on junk like every other decoder.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Longest control line accepted (`MSG subject sid [reply] len`, `INFO {...}`, `-ERR`).
const MAX_LINE: usize = 64 * 1024;
/// Largest payload accepted (the server's own default `max_payload` is 1 MiB).
const MAX_PAYLOAD: usize = 8 * 1024 * 1024;

/// One frame from the server.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `MSG`: a message on a subscription (a reply subject, if any, is dropped).
    Msg {
        /// The subject it was published to.
        subject: &'a [u8],
        /// The subscription id given in `SUB`.
        sid: u64,
        /// The message's bytes.
        payload: &'a [u8],
    },
    /// `PING`: the server asks for a `PONG`.
    Ping,
    /// `PONG`: the answer to our `PING`.
    Pong,
    /// `+OK` (only sent in verbose mode).
    Ok,
    /// `-ERR` and the rest of its line (the server's error text).
    Err(&'a [u8]),
    /// `INFO` and the rest of its line (the server's JSON description).
    Info(&'a [u8]),
}

/// Parses the first frame of `buf`: `Ok(None)` when it is not complete yet, else the
/// frame and the bytes it took. Junk is an error naming what was wrong.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>> {
    let Some(eol) = find_crlf(&buf[..buf.len().min(MAX_LINE + 2)]) else {
        if buf.len() > MAX_LINE {
            bail!("NATS: a control line longer than {MAX_LINE} bytes");
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let after = eol + 2;
    let (op, rest) = match line.iter().position(|&b| b == b' ' || b == b'\t') {
        Some(i) => (&line[..i], trim(&line[i + 1..])),
        None => (line, &line[line.len()..]),
    };
    let frame = match op.to_ascii_uppercase().as_slice() {
        b"MSG" => {
            let args: Vec<&[u8]> = rest
                .split(|&b| b == b' ' || b == b'\t')
                .filter(|a| !a.is_empty())
                .collect();
            if !(3..=4).contains(&args.len()) {
                bail!("NATS: MSG with {} arguments, expected 3 or 4", args.len());
            }
            let sid = number(args[1]).ok_or_else(|| anyhow!("NATS: MSG with a bad sid"))?;
            let len = number(args[args.len() - 1])
                .ok_or_else(|| anyhow!("NATS: MSG with a bad length"))?
                as usize;
            if len > MAX_PAYLOAD {
                bail!("NATS: MSG of {len} bytes, more than {MAX_PAYLOAD}");
            }
            if buf.len() < after + len + 2 {
                return Ok(None);
            }
            if &buf[after + len..after + len + 2] != b"\r\n" {
                bail!("NATS: MSG payload not followed by CRLF");
            }
            return Ok(Some((
                Frame::Msg {
                    subject: args[0],
                    sid,
                    payload: &buf[after..after + len],
                },
                after + len + 2,
            )));
        }
        b"PING" => Frame::Ping,
        b"PONG" => Frame::Pong,
        b"+OK" => Frame::Ok,
        b"-ERR" => Frame::Err(rest),
        b"INFO" => Frame::Info(rest),
        _ => bail!(
            "NATS: unknown operation {:?}",
            String::from_utf8_lossy(&op[..op.len().min(32)])
        ),
    };
    Ok(Some((frame, after)))
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn trim(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    b.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
    })
}

/// One client connection (blocking socket, one thread).
pub struct Connection {
    sock: TcpStream,
    rbuf: Vec<u8>,
    /// Parsed up to here in `rbuf`.
    rpos: usize,
    wbuf: Vec<u8>,
}

impl Connection {
    /// Connects, reads the server's INFO, introduces itself and waits for the PONG that
    /// confirms the server took it.
    pub fn connect(addr: &str, name: &str, timeout: Duration) -> Result<Connection> {
        let sa = addr
            .to_socket_addrs()
            .with_context(|| format!("NATS address {addr:?}"))?
            .next()
            .ok_or_else(|| anyhow!("NATS address {addr:?} resolves to nothing"))?;
        let sock = TcpStream::connect_timeout(&sa, timeout)
            .with_context(|| format!("cannot connect to the NATS server at {addr}"))?;
        sock.set_nodelay(true)?;
        let mut c = Connection {
            sock,
            rbuf: Vec::with_capacity(1 << 20),
            rpos: 0,
            wbuf: Vec::with_capacity(1 << 16),
        };
        let connect = serde_json::json!({
            "verbose": false, "pedantic": false, "name": name, "lang": "rust",
            "version": env!("CARGO_PKG_VERSION"), "protocol": 1, "headers": false,
        });
        c.wbuf
            .extend_from_slice(format!("CONNECT {connect}\r\n").as_bytes());
        c.ping(timeout)
            .with_context(|| format!("NATS server at {addr} did not accept the connection"))?;
        Ok(c)
    }

    /// Queues `PUB subject len` with the payload made of `parts` (sent by `flush`).
    pub fn publish(&mut self, subject: &[u8], parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let w = &mut self.wbuf;
        w.extend_from_slice(b"PUB ");
        w.extend_from_slice(subject);
        w.push(b' ');
        push_decimal(w, len as u64);
        w.extend_from_slice(b"\r\n");
        for p in parts {
            w.extend_from_slice(p);
        }
        w.extend_from_slice(b"\r\n");
    }

    /// Queues `SUB subject sid` (sent by `flush`); `subject` may hold wildcards.
    pub fn subscribe(&mut self, subject: &str, sid: u64) {
        self.wbuf
            .extend_from_slice(format!("SUB {subject} {sid}\r\n").as_bytes());
    }

    /// Writes everything queued (blocking: TCP back pressure reaches the caller).
    pub fn flush(&mut self) -> Result<()> {
        if !self.wbuf.is_empty() {
            self.sock
                .write_all(&self.wbuf)
                .context("NATS: writing to the server")?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// A PING and the server's PONG: everything sent before it has been processed.
    pub fn ping(&mut self, timeout: Duration) -> Result<()> {
        self.wbuf.extend_from_slice(b"PING\r\n");
        self.flush()?;
        let deadline = Instant::now() + timeout;
        let mut pong = false;
        while !pong {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("NATS: no PONG within {timeout:?}");
            }
            self.read(left, |f| {
                if f == Frame::Pong {
                    pong = true;
                }
            })?;
        }
        Ok(())
    }

    /// Waits up to `timeout` for data, reads what is there and hands every complete
    /// frame to `on_frame` (PINGs are answered here too). Returns the bytes read; an
    /// error when the server closed the connection or sent junk or `-ERR`.
    pub fn read(
        &mut self,
        timeout: Duration,
        mut on_frame: impl FnMut(Frame<'_>),
    ) -> Result<usize> {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready <= 0 {
            return Ok(0);
        }
        if self.rpos > 0 {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
        let have = self.rbuf.len();
        self.rbuf.resize(have + (256 << 10), 0);
        let n = match self.sock.read(&mut self.rbuf[have..]) {
            Ok(0) => {
                self.rbuf.truncate(have);
                bail!("NATS: the server closed the connection")
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
            Err(e) => {
                self.rbuf.truncate(have);
                return Err(e).context("NATS: reading from the server");
            }
        };
        self.rbuf.truncate(have + n);
        let mut pings = 0;
        while let Some((frame, used)) = parse(&self.rbuf[self.rpos..])? {
            self.rpos += used;
            match frame {
                Frame::Ping => pings += 1,
                Frame::Err(text) => bail!("NATS: -ERR {}", String::from_utf8_lossy(text)),
                f => on_frame(f),
            }
        }
        if pings > 0 {
            for _ in 0..pings {
                self.wbuf.extend_from_slice(b"PONG\r\n");
            }
            self.flush()?;
        }
        Ok(n)
    }
}

fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_parsed_and_incomplete_ones_wait() {
        let buf = b"MSG FEED.SYM1 7 5\r\nhello\r\nPING\r\nMSG a.b 1 reply.to 0\r\n\r\n+OK\r\n";
        let (f, n) = parse(buf).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Msg {
                subject: b"FEED.SYM1",
                sid: 7,
                payload: b"hello"
            }
        );
        let (f, m) = parse(&buf[n..]).unwrap().unwrap();
        assert_eq!(f, Frame::Ping);
        let (f, k) = parse(&buf[n + m..]).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Msg {
                subject: b"a.b",
                sid: 1,
                payload: b""
            }
        );
        assert_eq!(parse(&buf[n + m + k..]).unwrap().unwrap().0, Frame::Ok);
        for cut in 0..n {
            assert!(parse(&buf[..cut]).unwrap().is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn junk_is_an_error_never_a_panic() {
        for bad in [
            &b"BOGUS\r\n"[..],
            b"MSG a\r\n",
            b"MSG a x 3\r\nabc\r\n",
            b"MSG a 1 99999999999\r\n",
            b"MSG a 1 3\r\nabcde",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse(&vec![b'x'; MAX_LINE + 10]).is_err());
        // Random bytes: whatever comes back, no panic and progress is within the input.
        let alphabet = b"MSG PING\r\n 0123 abc";
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let b: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if let Ok(Some((_, used))) = parse(&b) {
                assert!(used <= b.len());
            }
        }
    }

    #[test]
    fn decimals() {
        for v in [0u64, 7, 10, 74, 12345, u64::MAX] {
            let mut o = Vec::new();
            push_decimal(&mut o, v);
            assert_eq!(o, v.to_string().as_bytes());
        }
    }
}
