//! Every run stored under docs/results still reads: a key added to the schema later
//! must come with a default.

use std::path::{Path, PathBuf};
use tickwire_bench_report::schema::Results;

fn results_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            results_files(&path, out);
        } else if path.file_name().is_some_and(|n| n == "results.json") {
            out.push(path);
        }
    }
}

#[test]
fn stored_results_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    let mut files = Vec::new();
    results_files(&root, &mut files);
    assert!(
        !files.is_empty(),
        "no results.json under {}",
        root.display()
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = serde_json::from_str::<Results>(&text) {
            panic!("{}: {e}", path.display());
        }
    }
}
