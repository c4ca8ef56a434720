//! The read-only web page at `/`: one static HTML file (`page.html`) with its style and
//! script inline, embedded in the binary. It polls `/status` once a second and draws
//! nodes, resources, slots, pending slots and the recent ownership history, inserting
//! every value from the cluster as text, never as markup.
//!
//! Its Content-Security-Policy allows nothing but that one inline script and style
//! (named by their SHA-256, so an injected script or style would not run) and fetches
//! from the page's own origin; no frame, form, plugin or outside resource.

use std::sync::LazyLock;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The page.
pub const HTML: &str = include_str!("page.html");

/// The `Content-Security-Policy` header served with [`HTML`].
pub static CONTENT_SECURITY_POLICY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; \
         img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash_of(inline("script")),
        hash_of(inline("style")),
    )
});

/// The text of the one `<tag>` element of the page.
fn inline(tag: &str) -> &'static str {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    HTML.split_once(open.as_str())
        .and_then(|(_, rest)| rest.split_once(close.as_str()))
        .map(|(text, _)| text)
        .unwrap_or_else(|| panic!("page.html has no <{tag}> element"))
}

/// The CSP source naming `text` by its digest.
fn hash_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_inline_script_and_style_and_nothing_from_outside() {
        let policy = CONTENT_SECURITY_POLICY.as_str();
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        assert_eq!(policy.matches("'sha256-").count(), 2, "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        // One script and one style, inline; nothing loaded from elsewhere, no markup
        // built from strings.
        assert_eq!(HTML.matches("<script").count(), 1);
        assert_eq!(HTML.matches("<style").count(), 1);
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "http://",
            "https://",
            "src=",
        ] {
            assert!(!HTML.contains(banned), "page.html contains {banned:?}");
        }
    }
}
