//! TLS 1.3 records made by hand, as a hostile peer sends them, for tests (the crate's,
//! the node's and the client's): no TLS library sends empty application records on
//! purpose.

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::sync::{Arc, Mutex};

/// One side's first application traffic secret, as rustls logs it.
#[derive(Debug)]
pub struct TrafficSecret {
    /// The key log's label of the secret kept.
    label: &'static str,
    secret: Mutex<Vec<u8>>,
}

impl TrafficSecret {
    fn new(label: &'static str) -> Arc<Self> {
        Arc::new(TrafficSecret {
            label,
            secret: Mutex::default(),
        })
    }

    /// The secret (empty before the handshake).
    pub fn get(&self) -> Vec<u8> {
        self.secret
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl rustls::KeyLog for TrafficSecret {
    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        if label == self.label {
            *self.secret.lock().unwrap_or_else(|p| p.into_inner()) = secret.to_vec();
        }
    }
}

/// TLS 1.3 with AES-128-GCM only: what [`seal_record`] writes.
fn aes_128_gcm_only() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
        ..rustls::crypto::ring::default_provider()
    })
}

/// A client of TLS 1.3 and AES-128-GCM only trusting `roots`, whose traffic secret is
/// logged into the second.
pub fn secret_logging_client(roots: RootCertStore) -> (ClientConfig, Arc<TrafficSecret>) {
    let mut cfg = ClientConfig::builder_with_provider(aes_128_gcm_only())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let secret = TrafficSecret::new("CLIENT_TRAFFIC_SECRET_0");
    cfg.key_log = secret.clone();
    (cfg, secret)
}

/// A server of TLS 1.3 and AES-128-GCM only with `certs` and `key`, whose traffic
/// secret is logged into the second. It sends no session tickets: its first records
/// after the handshake are the test's own, from sequence number 0.
pub fn secret_logging_server(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> (ServerConfig, Arc<TrafficSecret>) {
    let mut cfg = ServerConfig::builder_with_provider(aes_128_gcm_only())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with ring")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a certificate and its key");
    cfg.send_tls13_tickets = 0;
    let secret = TrafficSecret::new("SERVER_TRAFFIC_SECRET_0");
    cfg.key_log = secret.clone();
    (cfg, secret)
}

/// HKDF-Expand-Label of TLS 1.3 (RFC 8446, 7.1) with SHA-256 and no context.
fn expand_label(secret: &[u8], label: &str, len: usize) -> Vec<u8> {
    struct Len(usize);
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let label = format!("tls13 {label}");
    let info = [
        &(len as u16).to_be_bytes()[..],
        &[label.len() as u8],
        label.as_bytes(),
        &[0],
    ];
    let prk = ring::hkdf::Prk::new_less_safe(ring::hkdf::HKDF_SHA256, secret);
    let mut out = vec![0; len];
    prk.expand(&info, Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .expect("a length HKDF-SHA256 can expand to");
    out
}

/// Record `seq` of TLS 1.3 traffic secret `secret` (AES-128-GCM), holding `inner`
/// (the content, then its type).
pub fn seal_record(secret: &[u8], seq: u64, inner: &[u8]) -> Vec<u8> {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
    let key = UnboundKey::new(&AES_128_GCM, &expand_label(secret, "key", 16)).expect("16 bytes");
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&expand_label(secret, "iv", 12));
    for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    let len = inner.len() + 16;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let mut record = inner.to_vec();
    LessSafeKey::new(key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(header),
            &mut record,
        )
        .expect("a record's worth");
    [&header[..], &record].concat()
}

/// One side's records that carry no plaintext and that rustls takes without end: an
/// empty application data record then a key update, `n` times, from its traffic
/// secret `secret` (none of its records sent yet). Also the secret they end on.
pub fn empty_records_and_key_updates(secret: &[u8], n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut secret = secret.to_vec();
    let mut records = Vec::new();
    for _ in 0..n {
        let (pair, next) = application_data_then_key_update(&secret, &[]);
        records.extend(pair);
        secret = next;
    }
    (records, secret)
}

/// One side's application data `plaintext` (at most 16 KiB) as record 0 of its traffic
/// secret `secret`, then a key update: the records, and the secret they end on (from
/// which [`empty_records_and_key_updates`] may go on).
pub fn application_data_then_key_update(secret: &[u8], plaintext: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut inner = plaintext.to_vec();
    inner.push(23);
    let mut records = seal_record(secret, 0, &inner);
    // KeyUpdate, update_not_requested; of type handshake.
    records.extend(seal_record(secret, 1, &[24, 0, 0, 1, 0, 22]));
    (records, expand_label(secret, "traffic upd", 32))
}
