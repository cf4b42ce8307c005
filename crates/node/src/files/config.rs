//! `[files]` in the node's TOML: the section, its defaults and its checks.

use crate::config_error::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tickwire_files::inbox::Fsync;

/// `[files]` in the node's TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesSection {
    /// The node's file services (at most 64); empty: the node moves no files.
    pub services: Vec<String>,
    /// Directory where files this node sends wait until every site has them (its
    /// queue, kept through a restart); "": the node sends no files.
    pub spool: String,
    /// Directory where files sent to this node appear, whole and checked; "": the
    /// node receives none.
    pub inbox: String,
    /// Directory this node watches: a file that appears in it (and has not changed for
    /// a second) is moved into the spool and sent to every site of the first service.
    /// Names starting with "." are left alone (write under such a name, then rename);
    /// "": none. Needs files.spool.
    pub outbox: String,
    /// When a received file is on the disk before the site says done, and a sent file
    /// in the spool before the client is told it is queued: "always" (each file and its
    /// directory synced as soon as it is whole; files whole at once share a
    /// directory's sync), "batch" (the same, for the files whole within 10 ms),
    /// "never" (left to the kernel).
    pub fsync: FsyncSetting,
    /// The files' share of the network, MB a second (market data keeps the rest).
    pub rate_mb_per_s: u64,
    /// Chunk size in KiB (1 to 62).
    pub chunk_kib: u32,
    /// Files queued at most; a new one beyond is refused at once.
    pub max_files: usize,
    /// Bytes queued at most, in MB.
    pub max_queue_mb: u64,
    /// Largest file this node receives, in MB.
    pub max_file_mb: u64,
    /// Hours a file waits for its sites before they fail "expired".
    pub expire_h: u64,
    /// The audit log (one JSON object per line: queued, each site's state, arrived,
    /// failed); "": beside the inbox (`INBOX.audit.jsonl`), else beside the spool.
    pub audit: String,
}

/// `[files] fsync`: when received files are synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncSetting {
    /// Every file before it is announced.
    Always,
    /// In batches.
    Batch,
    /// Never (the operating system decides).
    Never,
}

impl FsyncSetting {
    pub(super) fn policy(self) -> Fsync {
        match self {
            FsyncSetting::Always => Fsync::Always,
            FsyncSetting::Batch => Fsync::Batch,
            FsyncSetting::Never => Fsync::Never,
        }
    }
}

impl Default for FilesSection {
    fn default() -> Self {
        FilesSection {
            services: Vec::new(),
            spool: String::new(),
            inbox: String::new(),
            outbox: String::new(),
            fsync: FsyncSetting::Batch,
            rate_mb_per_s: 50,
            chunk_kib: 16,
            max_files: 10_000,
            max_queue_mb: 16_384,
            max_file_mb: 65_536,
            expire_h: 24,
            audit: String::new(),
        }
    }
}

impl FilesSection {
    /// The node moves files.
    pub fn enabled(&self) -> bool {
        !self.services.is_empty()
    }

    /// Checks the section; the error names the key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.services.len() > tickwire_files::hub::MAX_SERVICES {
            return Err(invalid(
                "files.services",
                format!("{:?}", self.services),
                "at most 64 services",
            ));
        }
        if let Some(bad) = self.services.iter().find(|s| s.is_empty() || s.len() > 256) {
            return Err(invalid(
                "files.services",
                bad,
                "a service name has 1 to 256 bytes",
            ));
        }
        if self.enabled() && self.spool.is_empty() && self.inbox.is_empty() {
            return Err(invalid(
                "files.services",
                format!("{:?}", self.services),
                "needs files.spool (to send files) or files.inbox (to receive them), or both",
            ));
        }
        let has_dir = !self.spool.is_empty() || !self.inbox.is_empty();
        if !self.enabled() && has_dir {
            return Err(invalid(
                "files.services",
                "[]",
                "name the file services (e.g. [\"FILES\"]) when files.spool or files.inbox is set",
            ));
        }
        if !self.inbox.is_empty() {
            // Each service's files arrive in a directory of its own, named after it.
            for service in &self.services {
                if let Err(e) = tickwire_files::inbox::check_service_dir(service) {
                    return Err(invalid("files.services", service, &e.to_string()));
                }
            }
        }
        if !self.outbox.is_empty() && self.spool.is_empty() {
            return Err(invalid(
                "files.outbox",
                &self.outbox,
                "needs files.spool, where its files wait until every site has them",
            ));
        }
        if !(1..=62).contains(&self.chunk_kib) {
            return Err(invalid(
                "files.chunk_kib",
                self.chunk_kib,
                "allowed: 1 to 62",
            ));
        }
        if self.rate_mb_per_s == 0 {
            return Err(invalid("files.rate_mb_per_s", 0, "allowed: 1 or more"));
        }
        if self.max_files == 0
            || self.max_queue_mb == 0
            || self.max_file_mb == 0
            || self.expire_h == 0
        {
            return Err(invalid(
                "files.max_files / max_queue_mb / max_file_mb / expire_h",
                0,
                "allowed: 1 or more",
            ));
        }
        // MB are multiplied into bytes, hours into milliseconds: past these the
        // products overflowed (a panic of the files thread, or a limit wrapped round).
        for (key, value, most) in [
            ("files.rate_mb_per_s", self.rate_mb_per_s, 1_000_000),
            ("files.max_queue_mb", self.max_queue_mb, 1_000_000_000),
            ("files.max_file_mb", self.max_file_mb, 1_000_000_000),
            ("files.expire_h", self.expire_h, 87_600),
        ] {
            if value > most {
                return Err(invalid(key, value, &format!("allowed: 1 to {most}")));
            }
        }
        Ok(())
    }

    pub(super) fn audit_path(&self) -> PathBuf {
        if !self.audit.is_empty() {
            return PathBuf::from(&self.audit);
        }
        let dir = if self.inbox.is_empty() {
            &self.spool
        } else {
            &self.inbox
        };
        let dir = Path::new(dir.trim_end_matches('/'));
        let mut name = dir
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(".audit.jsonl");
        dir.with_file_name(name)
    }
}
