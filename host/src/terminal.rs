//! Untrusted text made safe to print on a terminal or in a text log.
//!
//! Node names, labels, addresses, plugin and resource names, and a remote node's error
//! text come from peers, manifests and configs that an operator's terminal must not
//! obey: an escape sequence could clear the screen, retitle the window or hide text,
//! and a CR or LF could forge a line of `tenure status` or of a log. [`escape`] shows
//! every control character as a visible escape instead (`\x1b`, `\n`, `\r`, `\t`,
//! `\u{202e}`), so the text is still there to read, but inert. The Unicode controls that
//! reorder text (bidirectional overrides and isolates) are escaped too.
//!
//! It is applied where text is rendered for people (the `status` table, admin command
//! errors and answers, text log lines), not where it is stored or sent: JSON output is
//! escaped by serde_json already, and plugin output has its own filter
//! (`runtime::output`). A backslash is not itself escaped, so `\n` in the output may be
//! either a newline or those two characters; the point is safety, not a reversible form.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character shown as a visible escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && needs_escape(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// C0 and C1 controls, DEL, and the bidirectional formatting characters.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escape_sequences_and_line_breaks_become_visible_text() {
        assert_eq!(escape("zone-a"), "zone-a");
        assert_eq!(escape("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("x\r\nforged line"), "x\\r\\nforged line");
        assert_eq!(escape("\u{9b}31m\u{7f}"), "\\u{9b}31m\\x7f");
        assert_eq!(escape("abc\u{202e}txt.exe"), "abc\\u{202e}txt.exe");
        assert_eq!(escape("zoné ✓"), "zoné ✓");
    }
}
