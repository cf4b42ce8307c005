//! Files kept open by transfer id, at most a fixed number at once (the least recently
//! used is closed first): a site's partial files, a spool's files of their own.

use std::collections::HashMap;
use std::fs::File;
use std::io;

pub(crate) struct OpenFiles {
    files: HashMap<u64, (File, u64)>,
    clock: u64,
    limit: usize,
}

impl OpenFiles {
    pub(crate) fn new(limit: usize) -> Self {
        OpenFiles {
            files: HashMap::new(),
            clock: 0,
            limit: limit.max(1),
        }
    }

    /// Keeps `f` open as `id`'s file.
    pub(crate) fn insert(&mut self, id: u64, f: File) {
        if !self.files.contains_key(&id) && self.files.len() >= self.limit {
            if let Some(lru) = self
                .files
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(t, _)| *t)
            {
                self.files.remove(&lru);
            }
        }
        self.clock += 1;
        self.files.insert(id, (f, self.clock));
    }

    /// `id`'s file, opened with `open` if it is not open.
    pub(crate) fn get(
        &mut self,
        id: u64,
        open: impl FnOnce() -> io::Result<File>,
    ) -> io::Result<&File> {
        if !self.files.contains_key(&id) {
            self.insert(id, open()?);
        }
        self.clock += 1;
        let entry = self.files.get_mut(&id).expect("opened above");
        entry.1 = self.clock;
        Ok(&entry.0)
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.files.remove(&id);
    }
}
