//! The registry's private key files (the signing key, the secrets key): read, created once
//! with mode 0600, and replaced atomically. Creation is exclusive, so replicas starting
//! together on a shared volume end up with the same key.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// The key in the file at `path`, parsed; when there is no file, a new key (`generate` gives
/// its text) written there first. `what` names the key in errors and the log.
pub(crate) fn read_or_create<T>(
    path: &Path,
    what: &str,
    parse: impl Fn(&str) -> anyhow::Result<T>,
    generate: impl Fn() -> anyhow::Result<String>,
) -> anyhow::Result<T> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            return parse(&text).with_context(|| format!("reading the {what} {}", path.display()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("reading the {what} {}", path.display()));
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory of {}", path.display()))?;
    }
    let text = generate()?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing the {what} {}", path.display()))?;
            tracing::info!(path = %path.display(), "created a {what}");
            parse(&text)
        }
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_or_create(path, what, parse, generate)
        }
        Err(e) => Err(e).with_context(|| format!("creating the {what} {}", path.display())),
    }
}

/// Replaces the file's text atomically: written beside it (0600), then renamed over it.
pub(crate) fn replace(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("new");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
