//! The end of a `creek serve` process's log, for the message that says it
//! died. Shared by every launcher of server processes (the benchmarks',
//! `creek chaos`' and `creek dev`'s); not a log reader or parser.

use std::path::Path;

/// The last lines of a server's log, for the message that it died (the
/// log goes with the cluster's directory when the bench ends).
pub fn log_tail(path: &Path) -> String {
    const LINES: usize = 5;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "it logged nothing".to_string();
    }
    format!(
        "the end of its log:\n{}",
        strip_ansi(&lines[lines.len().saturating_sub(LINES)..].join("\n"))
    )
}

/// `text` without the terminal colour codes (`ESC [ … letter`) the server's
/// log carries.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_stripped_from_log_lines() {
        let line = "\u{1b}[2m2026-11-24\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m slow";
        assert_eq!(strip_ansi(line), "2026-11-24  WARN slow");
    }
}
