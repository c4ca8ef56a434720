//! The line patterns of a test script: plain text that a plugin's log line must contain,
//! with two placeholders: `{token}`, the fencing token of the start being read (so a
//! script can say the plugin logs under its own lease), and `{n}`, any decimal number,
//! which the state check compares across owners. No regular expressions: a script reads
//! like the log lines it waits for.

use std::fmt;

use anyhow::bail;

/// A parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// `{n}`: one or more ASCII digits.
    Number,
    /// `{token}`: the start's token.
    Token,
}

impl Pattern {
    /// Parses `text`; an unknown `{...}` is refused (a `{` not followed by a placeholder
    /// is plain text).
    pub fn parse(text: &str) -> anyhow::Result<Pattern> {
        if text.is_empty() {
            bail!("an empty line pattern matches every line: give part of the line");
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            literal.push_str(&rest[..at]);
            rest = &rest[at..];
            let part = if rest.starts_with("{n}") {
                Part::Number
            } else if rest.starts_with("{token}") {
                Part::Token
            } else {
                if let Some(end) = rest.find('}') {
                    let name = &rest[..=end];
                    if name[1..end].chars().all(|c| c.is_ascii_alphanumeric()) {
                        bail!("{name} in {text:?}: the placeholders are {{n}} and {{token}}");
                    }
                }
                literal.push('{');
                rest = &rest[1..];
                continue;
            };
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            rest = &rest[if part == Part::Number { 3 } else { 7 }..];
            parts.push(part);
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Pattern {
            text: text.to_string(),
            parts,
        })
    }

    /// Whether the pattern has a `{n}`.
    pub fn captures(&self) -> bool {
        self.parts.contains(&Part::Number)
    }

    /// If `line` contains the pattern (with `{token}` = `token`), the first `{n}`'s value
    /// (or 0 without one) at the leftmost place it matches.
    pub fn find(&self, line: &str, token: u64) -> Option<u64> {
        let token = token.to_string();
        line.char_indices()
            .map(|(i, _)| i)
            .chain([line.len()])
            .find_map(|at| self.match_at(&line[at..], &token))
    }

    fn match_at(&self, mut rest: &str, token: &str) -> Option<u64> {
        let mut number = None;
        for part in &self.parts {
            match part {
                Part::Text(text) => rest = rest.strip_prefix(text.as_str())?,
                Part::Token => rest = rest.strip_prefix(token)?,
                Part::Number => {
                    let digits =
                        rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    if digits == 0 {
                        return None;
                    }
                    // Digits beyond u64 are still a number the plugin logged; they
                    // compare as the largest.
                    let value = rest[..digits].parse().unwrap_or(u64::MAX);
                    number.get_or_insert(value);
                    rest = &rest[digits..];
                }
            }
        }
        Some(number.unwrap_or(0))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_finds_its_text_token_and_number_anywhere_in_a_line() {
        let p = Pattern::parse("tick {n} token={token}").unwrap();
        assert!(p.captures());
        assert_eq!(p.find("tick 12 token=7", 7), Some(12));
        assert_eq!(p.find("[x] tick 3 token=7 more", 7), Some(3));
        assert_eq!(p.find("tick 12 token=8", 7), None, "another start's token");
        assert_eq!(p.find("tick token=7", 7), None, "no number");
        let plain = Pattern::parse("cleanup reason=moved").unwrap();
        assert!(!plain.captures());
        assert_eq!(plain.find("cleanup reason=moved", 1), Some(0));
        assert_eq!(plain.find("cleanup reason=shutdown", 1), None);
        let braces = Pattern::parse("json {\"a\": {n}}").unwrap();
        assert_eq!(braces.find("json {\"a\": 5}", 0), Some(5));
        assert_eq!(p.to_string(), "\"tick {n} token={token}\"");
    }

    #[test]
    fn an_unknown_placeholder_or_an_empty_pattern_is_refused() {
        let err = Pattern::parse("tick {count}").unwrap_err().to_string();
        assert!(
            err.contains("{count}") && err.contains("{n} and {token}"),
            "{err}"
        );
        assert!(Pattern::parse("").is_err());
    }
}
