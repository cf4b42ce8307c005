//! Standard output for the commands' reports. A reader that stopped reading (`| head`)
//! is no failure of the command: the line goes nowhere and the command goes on to its
//! end and its own exit status (`println!` panicked, status 101).

use std::io::Write;

/// Writes `text` and a newline; a reader gone is not an error.
pub(crate) fn line(text: impl std::fmt::Display) -> std::io::Result<()> {
    quiet_if_gone(writeln!(std::io::stdout().lock(), "{text}"))
}

/// Writes `text` as it is; a reader gone is not an error.
pub(crate) fn text(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    quiet_if_gone(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

fn quiet_if_gone(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
