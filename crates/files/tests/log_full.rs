//! A queue log whose disk fills in the middle of a line: the line is cut back, so the
//! next one is written whole and read back after a restart. A test binary of its own,
//! because it lowers this process's file-size limit (RLIMIT_FSIZE) for a moment.

use std::fs;
use std::path::Path;

use tickwire_files::spool::Spool;
use tickwire_files::Manifest;

fn manifest(transfer: u64, size: u64, sha256: [u8; 32]) -> Manifest {
    Manifest {
        transfer,
        sender: "src".into(),
        service: "FILES".into(),
        name: format!("f{transfer}.csv"),
        size,
        chunk_size: 4096,
        sha256,
        expires_ms: 1,
        open: false,
        targets: vec!["site-0".into()],
    }
}

/// Files this process writes may grow to `bytes` (`None`: no limit); a write past it
/// fails with EFBIG (the signal the kernel would send instead is ignored).
fn limit_file_size(bytes: Option<u64>) {
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a struct of this stack frame.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut now), 0);
        now.rlim_cur = bytes.unwrap_or(now.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &now), 0);
    }
}

fn queue(spool: &mut Spool, dir: &Path, transfer: u64) -> Manifest {
    let src = dir.join(format!("{transfer}.src"));
    fs::write(&src, vec![transfer as u8; 10_000]).unwrap();
    let (size, sha256) = spool.copy_in(transfer, &src).unwrap();
    manifest(transfer, size, sha256)
}

#[test]
fn a_line_the_disk_took_in_part_is_cut_back_and_the_next_one_is_read_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("spool");
    let mut spool = Spool::new(&dir).unwrap();
    let first = queue(&mut spool, root.path(), 7);
    spool.save(&first).unwrap();
    let second = queue(&mut spool, root.path(), 8);
    let log_len = fs::metadata(dir.join("queue.log")).unwrap().len();
    limit_file_size(Some(log_len + 20));
    let refused = spool.save(&second);
    limit_file_size(None);
    assert!(refused.is_err(), "the line does not fit");
    assert_eq!(
        fs::metadata(dir.join("queue.log")).unwrap().len(),
        log_len,
        "the part written is cut back"
    );
    let third = queue(&mut spool, root.path(), 9);
    spool.save(&third).unwrap();
    drop(spool);

    let mut spool = Spool::new(&dir).unwrap();
    let loaded: Vec<Manifest> = spool
        .load()
        .unwrap()
        .into_iter()
        .map(|s| s.manifest)
        .collect();
    assert_eq!(loaded, vec![first, third]);
}
