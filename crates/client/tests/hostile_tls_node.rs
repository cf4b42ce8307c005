//! A hostile node over TLS that welcomes a subscriber, then sends it records that carry
//! no plaintext (an empty record and a key update, over and over: rustls takes them
//! without end). A call with a time-out returns while the node still sends them: the
//! client reads such a node a share at a time, as the node reads its peers. Before, the
//! read went on until the socket was empty, and the caller's thread stayed in it for as
//! long as the node sent. Real sockets on 127.0.0.1.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, Subscriber};
use tickwire_proto::{FrameWriter, Message, Welcome};
use tickwire_tls::testing::{
    application_data_then_key_update, empty_records_and_key_updates, secret_logging_server,
};

/// Bytes of records without plaintext the node sends: far more than a client reads in
/// one call's time, on any machine.
const ATTACK_BYTES: usize = 16 << 20;

/// What the hostile node has done so far.
#[derive(Default)]
struct Progress {
    /// It has begun writing the records without plaintext.
    attacking: AtomicBool,
    /// It has written all of them (or the client went).
    written: AtomicBool,
}

/// Accepts one client, completes the handshake, reads its Login, welcomes it in a
/// record of its own making, then writes [`ATTACK_BYTES`] of records without plaintext.
fn hostile_node(
    listener: TcpListener,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    progress: Arc<Progress>,
) -> std::io::Result<()> {
    let (cfg, logged) = secret_logging_server(certs, key);
    let (mut tcp, _) = listener.accept()?;
    tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(120)))?;
    let mut tls = rustls::ServerConnection::new(Arc::new(cfg)).expect("a server session");
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    // The client's Login (its bytes are not looked at).
    let mut login = [0u8; 4096];
    while !tls.reader().read(&mut login).is_ok_and(|n| n > 0) {
        tls.read_tls(&mut tcp)?;
        tls.process_new_packets().map_err(std::io::Error::other)?;
    }
    let mut w = FrameWriter::new(1 << 20);
    w.push(&Message::Welcome(Welcome {
        version: 1,
        heartbeat_ms: 60_000,
        max_frame: 1 << 20,
        max_streams: 100,
        max_output_bytes: 1 << 24,
        node_name: "hostile",
    }))
    .expect("a welcome encodes");
    let (welcome, secret) = application_data_then_key_update(&logged.get(), w.sealed_bytes());
    tcp.write_all(&welcome)?;
    let pair = empty_records_and_key_updates(&secret, 1).0.len();
    let (attack, _) = empty_records_and_key_updates(&secret, ATTACK_BYTES.div_ceil(pair));
    progress.attacking.store(true, Ordering::SeqCst);
    let r = tcp.write_all(&attack);
    progress.written.store(true, Ordering::SeqCst);
    r
}

#[test]
fn a_call_returns_while_a_node_sends_records_without_plaintext() {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let certs = vec![ck.cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let progress = Arc::new(Progress::default());
    let node = {
        let progress = progress.clone();
        std::thread::spawn(move || hostile_node(listener, certs, key, progress))
    };

    let mut opts = ConnectOptions::new(addr.to_string());
    opts.tls =
        Some(tickwire_client::tls::client_config_from_ca_pem(ck.cert.pem().as_bytes()).unwrap());
    opts.connect_timeout = Duration::from_secs(20);
    let mut sub = match Subscriber::connect(opts) {
        Ok(sub) => sub,
        Err(e) => panic!("not welcomed: {e}; the node: {:?}", node.join()),
    };

    // Calls while the node makes its records, until it writes them.
    let start = Instant::now();
    while !progress.attacking.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the node never began"
        );
        let _ = sub.next_event(Duration::from_millis(50));
    }
    let _ = sub.next_event(Duration::from_millis(200));
    let still_sending = !progress.written.load(Ordering::SeqCst);
    drop(sub);
    let _ = node.join();
    assert!(
        still_sending,
        "a 200 ms call returned only once the node had written all {ATTACK_BYTES} bytes of records without plaintext"
    );
}
