//! `tenure plugin new`: a plugin project per language, from templates in the binary.
//!
//! Each template is a few files under `host/templates/<lang>/`, embedded with
//! `include_str!` so the binary needs nothing beside it (named so that no tool takes them
//! for a project of their own: the Rust manifest is `cargo-manifest.toml`, the dotfiles
//! lose their dot), and filled in by plain
//! substitution of three placeholders: `{{name}}` (the plugin, its resource and its
//! `.wasm`), `{{crate}}` (the name as Rust spells a crate's file) and `{{tenure}}` (the
//! Tenure checkout whose SDK the project uses). The SDKs are not published yet, so a
//! project refers to the checkout by path: the Rust crate as a path dependency, and the
//! Python and JavaScript builds through the checkout's `sdk/<lang>/build.sh`, which are the
//! repository's own pinned builds (the same tool installs the tests and CI use).
//!
//! Every project builds with one command (`./build.sh`, which writes `<name>.wasm` beside
//! `<name>.toml`), so `tenure plugin check <name>.wasm` finds the manifest, and the two
//! files install into a plugins folder as they are.
//!
//! The project is written into a temporary directory beside the destination and renamed
//! into place, so a refused or failed `new` leaves nothing behind, and an existing
//! non-empty directory is never written into.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The languages a project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// One file of a template: where it goes in the project, its text, and whether it is a
/// script to run.
struct File {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        executable: false,
    }
}

const fn script(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        executable: true,
    }
}

/// The manifest's path in every template: `{{name}}` is filled in like the text.
const MANIFEST: &str = "{{name}}.toml";

/// The `tenure plugin test` script of every template: the three start loops log the same
/// lines.
pub const TEST_SCRIPT: &str = include_str!("../templates/test.toml");

/// The manifest the test script's `change-manifest` step installs (`INTERVAL_MS` halved,
/// with the Python and JavaScript templates' limits).
const FASTER_MANIFEST: &str = include_str!("../templates/faster.toml");

const RUST: &[File] = &[
    file(
        "Cargo.toml",
        include_str!("../templates/rust/cargo-manifest.toml"),
    ),
    file(
        ".cargo/config.toml",
        include_str!("../templates/rust/cargo-config.toml"),
    ),
    // The toolchain this checkout pins (with the wasm32-wasip2 target), so the project
    // builds with the compiler the SDK is built and tested with.
    file(
        "rust-toolchain.toml",
        include_str!("../../rust-toolchain.toml"),
    ),
    file("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
    file(MANIFEST, include_str!("../templates/rust/task.toml")),
    script("build.sh", include_str!("../templates/rust/build.sh")),
    file("README.md", include_str!("../templates/rust/README.md")),
    file("test.toml", TEST_SCRIPT),
    file("faster.toml", FASTER_MANIFEST),
    file(".gitignore", include_str!("../templates/rust/gitignore")),
];

const PYTHON: &[File] = &[
    file("app.py", include_str!("../templates/python/app.py")),
    file(MANIFEST, include_str!("../templates/python/task.toml")),
    script("build.sh", include_str!("../templates/python/build.sh")),
    file("README.md", include_str!("../templates/python/README.md")),
    file("test.toml", TEST_SCRIPT),
    file("faster.toml", FASTER_MANIFEST),
    file(".gitignore", include_str!("../templates/python/gitignore")),
];

const JS: &[File] = &[
    file("app.js", include_str!("../templates/js/app.js")),
    file("package.json", include_str!("../templates/js/package.json")),
    file(MANIFEST, include_str!("../templates/js/task.toml")),
    script("build.sh", include_str!("../templates/js/build.sh")),
    file("README.md", include_str!("../templates/js/README.md")),
    file("test.toml", TEST_SCRIPT),
    file("faster.toml", FASTER_MANIFEST),
    file(".gitignore", include_str!("../templates/js/gitignore")),
];

impl Lang {
    fn files(self) -> &'static [File] {
        match self {
            Lang::Rust => RUST,
            Lang::Python => PYTHON,
            Lang::Js => JS,
        }
    }

    /// The name `--lang` takes.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }

    /// The command that builds a project of this language, as its README says.
    pub fn build_command(self) -> &'static str {
        match self {
            Lang::Rust | Lang::Python => "./build.sh",
            Lang::Js => "npm run build",
        }
    }
}

/// What a project needs of a Tenure checkout: the SDKs and their builds.
const CHECKOUT_FILES: [&str; 5] = [
    "sdk/rust/Cargo.toml",
    "sdk/python/build.sh",
    "sdk/python/tenure.py",
    "sdk/js/build.sh",
    "sdk/js/tenure.js",
];

/// The checkout this binary was built from, if it is still where it was built.
pub fn default_checkout() -> Option<PathBuf> {
    let built_from = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    CHECKOUT_FILES
        .iter()
        .all(|f| built_from.join(f).is_file())
        .then(|| built_from.canonicalize().ok())
        .flatten()
}

/// The Tenure checkout a project will use, as an absolute path, or why it cannot be used.
pub fn checkout(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let Some(dir) = given.map(Path::to_path_buf).or_else(default_checkout) else {
        bail!(
            "cannot find a Tenure checkout for the SDKs (this binary was built elsewhere): \
             pass --sdk PATH (or set TENURE_SDK) with the path of a Tenure source checkout; \
             the projects use its sdk/ by path until the SDKs are published"
        );
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--sdk {}", dir.display()))?;
    if let Some(missing) = CHECKOUT_FILES.iter().find(|f| !dir.join(f).is_file()) {
        bail!(
            "--sdk {}: not a Tenure checkout with the SDKs (no {missing}); give the top \
             directory of a Tenure source checkout",
            dir.display()
        );
    }
    Ok(dir)
}

/// Checks a plugin name: it names the project's directory, the resource, the `.wasm` and
/// `.toml` files, the Rust crate and the npm package, so it keeps to what all of them take.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let starts_with_letter = name.starts_with(|c: char| c.is_ascii_lowercase());
    let allowed = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !starts_with_letter || !allowed || name.len() > 64 {
        bail!(
            "plugin name {name:?}: use lowercase letters, digits, - and _, starting with a \
             letter, at most 64 characters (it names the resource, the .wasm and .toml \
             files, the directory and the Rust crate or npm package)"
        );
    }
    Ok(())
}

/// Fills in a template's text.
fn fill(text: &str, name: &str, checkout: &Path) -> String {
    text.replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
        .replace("{{tenure}}", &checkout.display().to_string())
}

/// Writes a new project for plugin `name` in `lang` at `dest` (which must not exist, or be
/// an empty directory), using the SDKs of `checkout`. Returns the files written, relative
/// to `dest`.
pub fn write_project(
    dest: &Path,
    name: &str,
    lang: Lang,
    checkout: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if let Ok(mut entries) = fs::read_dir(dest) {
        if entries.next().is_some() {
            bail!(
                "{}: the directory exists and is not empty; choose another name or path",
                dest.display()
            );
        }
    } else if dest.exists() {
        bail!("{}: exists and is not a directory", dest.display());
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        bail!(
            "{}: no such directory to make the project {name} in; create it first",
            parent.display()
        );
    }
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(&parent)
        .map_err(|e| anyhow::anyhow!("cannot create a directory in {}: {e}", parent.display()))?;
    let mut written = Vec::new();
    for f in lang.files() {
        let relative = PathBuf::from(fill(f.path, name, checkout));
        let path = staging.path().join(&relative);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut out =
            fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        out.write_all(fill(f.text, name, checkout).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        if f.executable {
            out.set_permissions(fs::Permissions::from_mode(0o755))
                .with_context(|| format!("cannot make {} executable", path.display()))?;
        }
        written.push(relative);
    }
    // The temporary directory was made with mode 0700; the project is an ordinary one.
    fs::set_permissions(staging.path(), fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot set the mode of {}", staging.path().display()))?;
    // rename(2) replaces an empty directory, and refuses a non-empty one made meanwhile.
    let staged = staging.keep();
    if let Err(e) = fs::rename(&staged, dest) {
        let _ = fs::remove_dir_all(&staged);
        return Err(e).with_context(|| format!("cannot create {}", dest.display()));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGS: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];

    #[test]
    fn every_placeholder_is_filled_in() {
        let checkout = Path::new("/src/tenure");
        for lang in LANGS {
            for f in lang.files() {
                let text = fill(f.text, "my-task", checkout);
                assert!(!text.contains("{{"), "{lang:?} {}: {text}", f.path);
                assert!(!fill(f.path, "my-task", checkout).contains("{{"));
            }
        }
    }

    #[test]
    fn every_manifest_names_the_resource_and_parses() {
        for lang in LANGS {
            let manifest = lang
                .files()
                .iter()
                .find(|f| f.path == MANIFEST)
                .expect("a manifest");
            let text = fill(manifest.text, "my-task", Path::new("/src/tenure"));
            let parsed = crate::catalog::Manifest::parse("my-task", &text)
                .unwrap_or_else(|e| panic!("{lang:?}: {e}"));
            assert_eq!(parsed.resource, "my-task", "{lang:?}");
        }
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "my-task", "billing_sync2"] {
            check_name(good).unwrap();
        }
        for bad in ["", "1abc", "My-Task", "a.b", "a/b", "-x", &"a".repeat(65)] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.contains("lowercase letters"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_project_is_written_and_an_existing_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let checkout = Path::new("/src/tenure");
        let dest = dir.path().join("my-task");
        let files = write_project(&dest, "my-task", Lang::Rust, checkout).unwrap();
        assert!(files.contains(&PathBuf::from("my-task.toml")));
        let cargo = fs::read_to_string(dest.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("path = \"/src/tenure/sdk/rust\""), "{cargo}");
        let build = fs::read_to_string(dest.join("build.sh")).unwrap();
        assert!(build.contains("release/my_task.wasm"), "{build}");
        let mode = fs::metadata(dest.join("build.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let before = fs::read_to_string(dest.join("src/lib.rs")).unwrap();

        let err = write_project(&dest, "my-task", Lang::Js, checkout).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        assert_eq!(fs::read_to_string(dest.join("src/lib.rs")).unwrap(), before);
        assert!(!dest.join("app.js").exists());
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no staging directory is left: {left:?}");

        let nowhere = dir.path().join("missing/my-task");
        let err = write_project(&nowhere, "my-task", Lang::Js, checkout).unwrap_err();
        assert!(err.to_string().contains("no such directory"), "{err}");
        assert!(!dir.path().join("missing").exists());
    }
}
