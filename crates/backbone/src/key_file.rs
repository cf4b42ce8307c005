//! `[backbone] key_file` on disk: read at start (a bad file stops the node), then
//! looked at once a second and read again when it changed, so that keys rotate
//! without a restart (a file that no longer reads keeps the keys in use).

use crate::auth::Keys;
use log::{info, warn};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the file is looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Longest key file read (16 keys with comments fit in far less).
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// What identifies one version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified_ns: i64,
}

/// `[backbone] key_file`: the keys, read again when the file changes.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    stamp: Option<Stamp>,
    /// The keys it holds now.
    pub keys: Keys,
    next_check: Instant,
}

fn stamp(path: &Path) -> std::io::Result<(Stamp, u32)> {
    let m = std::fs::metadata(path)?;
    Ok((
        Stamp {
            inode: m.ino(),
            len: m.len(),
            modified_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        },
        m.permissions().mode(),
    ))
}

fn read(path: &Path) -> Result<(Keys, Stamp), String> {
    let (stamp, mode) = stamp(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if stamp.len > MAX_FILE_BYTES {
        return Err(format!(
            "{}: {} bytes, more than a key file's {MAX_FILE_BYTES}",
            path.display(),
            stamp.len
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let keys = Keys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if mode & 0o077 != 0 {
        warn!(
            "backbone: the key file {} can be read by other users (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    Ok((keys, stamp))
}

impl KeyFile {
    /// Reads the file; why not, with its path, if it cannot be used.
    pub fn load(path: &Path, now: Instant) -> Result<KeyFile, String> {
        let (keys, stamp) = read(path)?;
        Ok(KeyFile {
            path: path.to_path_buf(),
            stamp: Some(stamp),
            keys,
            next_check: now + CHECK_EVERY,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again if it changed (at most once a second); whether the keys
    /// changed.
    pub fn refresh(&mut self, now: Instant) -> bool {
        if now < self.next_check {
            return false;
        }
        self.next_check = now + CHECK_EVERY;
        let current = stamp(&self.path).ok().map(|(s, _)| s);
        if current == self.stamp {
            return false;
        }
        self.stamp = current;
        match read(&self.path) {
            Ok((keys, _)) if keys == self.keys => false,
            Ok((keys, _)) => {
                info!(
                    "backbone: key file {} read again: signing with key {:08x} ({}), accepting {}",
                    self.path.display(),
                    keys.signing().id,
                    keys.signing().mac().name(),
                    keys.ids()
                        .iter()
                        .map(|id| format!("{id:08x}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                self.keys = keys;
                true
            }
            Err(e) => {
                warn!("backbone: the key file changed but cannot be used ({e}); the keys in use are kept");
                false
            }
        }
    }

    /// When [`KeyFile::refresh`] next looks.
    pub fn next_check(&self) -> Instant {
        self.next_check
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Mac;

    #[test]
    fn a_key_whose_line_names_another_mac_is_a_change() {
        let dir = std::env::temp_dir().join(format!("tw-key-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("backbone.keys");
        let line = format!("00000001 {}", "ab".repeat(32));
        std::fs::write(&path, format!("{line} hmac-sha256\n")).unwrap();
        let t0 = Instant::now();
        let mut f = KeyFile::load(&path, t0).unwrap();
        assert_eq!(f.keys.signing().mac(), Mac::HmacSha256);
        // The same id and bytes, the other MAC: what the node seals with changes.
        std::fs::write(&path, format!("{line} blake3\n")).unwrap();
        assert!(f.refresh(t0 + CHECK_EVERY));
        assert_eq!(f.keys.signing().mac(), Mac::Blake3);
        // No MAC word is HMAC-SHA256 again.
        std::fs::write(&path, format!("{line}\n")).unwrap();
        assert!(f.refresh(t0 + 2 * CHECK_EVERY));
        assert_eq!(f.keys.signing().mac(), Mac::HmacSha256);
        // The same key written another way (its MAC named) is no change.
        std::fs::write(&path, format!("# a comment\n{line}   hmac-sha256\n")).unwrap();
        assert!(!f.refresh(t0 + 3 * CHECK_EVERY));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
