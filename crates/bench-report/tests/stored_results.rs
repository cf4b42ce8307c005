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

/// A stored run compared with itself: every figure it has is at index 100, and the
/// chart has a bar group for each.
#[test]
fn a_run_compared_with_itself_is_base_100() {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results/current/throughput/run-1");
    let run = tickwire_bench_report::compare::read_results(&dir).unwrap();
    let names = vec!["a".to_string(), "b".to_string()];
    let cmp = tickwire_bench_report::compare::render(&[run.clone(), run], &names).unwrap();
    let rows: Vec<&str> = cmp
        .markdown
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| metric"))
        .collect();
    let with_figures: Vec<&&str> = rows.iter().filter(|l| !l.contains(" - |")).collect();
    assert!(!with_figures.is_empty(), "{}", cmp.markdown);
    for row in with_figures {
        assert!(row.ends_with("| 100 |"), "{row}");
    }
    assert!(
        cmp.chart.to_svg().contains("throughput"),
        "{}",
        cmp.markdown
    );
    assert!(
        tickwire_bench_report::compare::render(&[], &[]).is_err(),
        "no runs: an error"
    );
}
