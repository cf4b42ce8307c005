//! What the `files_messages` fuzz target does with an input (and, in `hub.rs`, the
//! `files_hub` target), shared with the
//! stable-Rust corpus replay test: anything a peer sends goes through the decoder
//! (a decoded message must encode back to the same message), then to a receiving
//! site that was offered a file (so chunks for it are taken) and to a sender with a
//! file queued. A panic is a bug; ignoring the input is fine.

mod hub;
pub(crate) use hub::files_hub;

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use tickwire_files::wire::{FilesMessage, Offer};
use tickwire_files::{
    ChunkMap, ChunkSource, Manifest, NewFile, Receiver, ReceiverConfig, Sender, SenderConfig, Store,
};

/// Transfer 1: 3,000 bytes in 1,024-byte chunks, offered to every site of FILES.
pub(crate) const TRANSFER: u64 = 1;

#[derive(Default)]
struct MemStore(HashMap<u64, Vec<u8>>);

impl Store for MemStore {
    fn open(&mut self, m: &Manifest) -> io::Result<Option<ChunkMap>> {
        // The fuzzer may offer any size: only a small file is backed by memory.
        if m.size > 1 << 20 {
            return Err(io::Error::other("too large for the fuzz store"));
        }
        self.0
            .entry(m.transfer)
            .or_insert_with(|| vec![0; m.size as usize]);
        Ok(None)
    }
    fn write(&mut self, t: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = self
            .0
            .get_mut(&t)
            .ok_or_else(|| io::Error::other("not open"))?;
        f[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, t: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = self.0.get(&t).ok_or_else(|| io::Error::other("not open"))?;
        buf.copy_from_slice(&f[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn save_map(&mut self, _: &Manifest, _: &ChunkMap) -> io::Result<()> {
        Ok(())
    }
    fn commit(&mut self, m: &Manifest) -> io::Result<bool> {
        self.0.remove(&m.transfer);
        Ok(true)
    }
    fn discard(&mut self, t: u64) {
        self.0.remove(&t);
    }
}

struct Zeros;

impl ChunkSource for Zeros {
    fn read_chunk(&mut self, _: u64, _: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }
}

pub(crate) fn files_messages(data: &[u8]) {
    let Ok(msg) = FilesMessage::decode(data) else {
        return;
    };
    let mut again = Vec::new();
    msg.encode(&mut again).expect("a decoded message encodes");
    assert_eq!(FilesMessage::decode(&again).expect("round trip"), msg);

    let now = Instant::now();
    let mut store = MemStore::default();
    let mut rx = Receiver::new(ReceiverConfig::new("edge", vec!["FILES".into()]), now);
    let offer = Offer {
        transfer: TRANSFER,
        sender: "src",
        service: "FILES",
        name: "f.bin",
        size: 3000,
        chunk_size: 1024,
        sha256: [0; 32],
        sent_through: 3,
        expires_ms: 0,
        open: true,
        targets: vec![],
    };
    rx.handle(&FilesMessage::Offer(offer), now, &mut store);
    rx.handle(&msg, now, &mut store);
    rx.handle_timeout(now + Duration::from_secs(1), &mut store);
    let mut out = Vec::new();
    let mut sent = 0;
    while rx.poll_transmit(now, &mut out) {
        FilesMessage::decode(&out).expect("a site's own message decodes");
        sent += 1;
        assert!(sent < 100, "a receiver keeps sending");
    }

    let mut tx = Sender::new(SenderConfig::new("src"), now);
    tx.enqueue(
        NewFile {
            transfer: TRANSFER,
            service: "FILES".into(),
            name: "f.bin".into(),
            size: 3000,
            sha256: [0; 32],
            to: Some(vec!["edge".into()]),
            expires_ms: 0,
        },
        now,
    )
    .expect("queued");
    tx.handle_present("edge", "FILES", now);
    tx.handle_timeout(now);
    match &msg {
        FilesMessage::Status(s) => tx.handle_status(s, now),
        FilesMessage::Present { site, service } => tx.handle_present(site, service, now),
        _ => {}
    }
    tx.handle_timeout(now + Duration::from_millis(200));
    let mut sent = 0;
    while tx.poll_transmit(now + Duration::from_millis(200), &mut Zeros, &mut out) {
        FilesMessage::decode(&out).expect("a sender's own message decodes");
        sent += 1;
        assert!(sent < 100, "a sender keeps sending");
    }
    while tx.poll_event().is_some() {}
}
