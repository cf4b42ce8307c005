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

/// `written`, with a reader gone taken as success.
pub(crate) fn quiet_if_gone(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if reader_gone(&e) => Ok(()),
        other => other,
    }
}

/// Whether `e` says the reader stopped reading.
pub(crate) fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}
