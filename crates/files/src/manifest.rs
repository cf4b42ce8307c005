//! A transfer's manifest: what a file is (name, size, SHA-256), how it is cut into
//! chunks, who sends it, to whom, and until when.

use crate::wire::{chunk_count, Offer};

/// Everything a site needs to know to receive one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Drawn by the sending node when the file is queued; the key everywhere.
    pub transfer: u64,
    /// The sending site.
    pub sender: String,
    /// The files service.
    pub service: String,
    /// Relative path in each site's inbox (`name::check_name`).
    pub name: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Bytes per chunk (the last may be shorter).
    pub chunk_size: u32,
    /// The file's SHA-256.
    pub sha256: [u8; 32],
    /// Milliseconds since 1970 after which the sender gives up on sites without it.
    pub expires_ms: u64,
    /// Every site that takes the service may receive it, not only `targets`.
    pub open: bool,
    /// The sites whose delivery is recorded and waited for.
    pub targets: Vec<String>,
}

impl Manifest {
    /// A file of `size` bytes named `name` from "src" in service FILES, to edge1 and
    /// edge2, for tests.
    #[cfg(test)]
    pub(crate) fn sample(transfer: u64, name: &str, size: u64) -> Manifest {
        Manifest {
            transfer,
            sender: "src".into(),
            service: "FILES".into(),
            name: name.into(),
            size,
            chunk_size: 65_536,
            sha256: [0xab; 32],
            expires_ms: 9_000_000,
            open: false,
            targets: vec!["edge1".into(), "edge2".into()],
        }
    }

    /// Chunks in the file (the sender refuses files with more than `u32::MAX`).
    pub fn chunks(&self) -> u32 {
        chunk_count(self.size, self.chunk_size).unwrap_or(0)
    }

    /// Byte offset of chunk `index`.
    pub fn offset(&self, index: u32) -> u64 {
        u64::from(index) * u64::from(self.chunk_size)
    }

    /// Length of chunk `index` (the last one may be short).
    pub fn chunk_len(&self, index: u32) -> usize {
        let start = self.offset(index);
        (self.size.saturating_sub(start)).min(u64::from(self.chunk_size)) as usize
    }

    /// The offer message for this manifest, first pass at `sent_through`.
    pub fn offer(&self, sent_through: u32) -> Offer<'_> {
        Offer {
            transfer: self.transfer,
            sender: &self.sender,
            service: &self.service,
            name: &self.name,
            size: self.size,
            chunk_size: self.chunk_size,
            sha256: self.sha256,
            sent_through,
            expires_ms: self.expires_ms,
            open: self.open,
            targets: self.targets.iter().map(String::as_str).collect(),
        }
    }

    /// The file an offer describes.
    pub fn from_offer(o: &Offer) -> Self {
        Manifest {
            transfer: o.transfer,
            sender: o.sender.to_owned(),
            service: o.service.to_owned(),
            name: o.name.to_owned(),
            size: o.size,
            chunk_size: o.chunk_size,
            sha256: o.sha256,
            expires_ms: o.expires_ms,
            open: o.open,
            targets: o.targets.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Whether `site` is meant to receive the file.
    pub fn is_for(&self, site: &str) -> bool {
        self.open || self.targets.iter().any(|t| t == site)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_file_exactly() {
        let mut m = Manifest {
            transfer: 1,
            sender: "a".into(),
            service: "FILES".into(),
            name: "x".into(),
            size: 100,
            chunk_size: 32,
            sha256: [0; 32],
            expires_ms: 0,
            open: false,
            targets: vec!["b".into()],
        };
        assert_eq!(m.chunks(), 4);
        let lens: Vec<usize> = (0..4).map(|i| m.chunk_len(i)).collect();
        assert_eq!(lens, vec![32, 32, 32, 4]);
        assert_eq!(m.offset(3), 96);
        m.size = 96;
        assert_eq!((m.chunks(), m.chunk_len(2)), (3, 32));
        m.size = 0;
        assert_eq!(m.chunks(), 0);
        assert!(m.is_for("b") && !m.is_for("c"));
        assert_eq!(Manifest::from_offer(&m.offer(0)), m);
    }
}
