//! vCenter credentials: a file with `username` and `password` lines (a mounted Secret), a
//! directory with files `username` and `password` (a mounted `kubernetes.io/basic-auth`
//! Secret), the vSphere CSI driver's `csi-vsphere.conf` (`user` and `password` of its
//! VirtualCenter section; a mounted file or its Secret read through the API,
//! docs/design.md §8.5), or the `VOLMIG_VC_USERNAME` / `VOLMIG_VC_PASSWORD` environment
//! variables.
//! Files are read again at every login ([`CredentialSource::load`]), and
//! [`CredentialSource::version`] tells cheaply whether they changed, so a rotated Secret
//! needs no restart. The password is never logged or printed ([`Password`]).
//!
//! The driver's configuration lives here because the credentials read it: [`csi`] parses
//! `csi-vsphere.conf` and [`secret`] keeps its Secret as last seen; `vcenter_config` takes
//! the rest of its settings from them (docs/design.md §3.4).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub mod csi;
mod password;
pub mod secret;

pub use password::Password;

use csi::CsiConfig;
use secret::SecretConf;

/// Why credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read vCenter credentials file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A required key is missing.
    #[error("vCenter credentials {origin} have no {key}")]
    Missing {
        /// File path or "environment".
        origin: String,
        /// `username` or `password`.
        key: &'static str,
    },
    /// The CSI driver's configuration file cannot be used.
    #[error("{0}")]
    CsiConfig(String),
}

/// A vCenter user and password.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The user.
    pub username: String,
    /// The password (prints as `***`).
    pub password: Password,
}

/// Where the credentials come from; read again at every login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `--vc-credentials-file`: `username:` / `password:` lines, or a directory with files
    /// `username` and `password`.
    File(PathBuf),
    /// `--csi-config`: `user` / `password` of the driver's `csi-vsphere.conf`.
    CsiConfig(PathBuf),
    /// `--csi-config-secret`: `user` / `password` of the driver's `csi-vsphere.conf` as last
    /// seen in its Secret.
    CsiConfigSecret(SecretConf),
    /// `VOLMIG_VC_USERNAME` / `VOLMIG_VC_PASSWORD`.
    Environment,
}

/// An opaque fingerprint of the credentials' source (a SHA-256 of the file's bytes; the
/// same value for every read of the environment). Equal versions mean "not changed".
/// It is never logged and does not reveal the password.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Version(Option<[u8; 32]>);

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(hash) => write!(f, "Version({})", hex::encode(&hash[..4])),
            None => f.write_str("Version(unreadable)"),
        }
    }
}

impl Version {
    /// The version of some bytes (for tests and custom sources).
    pub fn of(bytes: &[u8]) -> Self {
        Self(Some(Sha256::digest(bytes).into()))
    }
}

impl CredentialSource {
    /// Reads the current credentials.
    pub fn load(&self) -> Result<Credentials, Error> {
        match self {
            CredentialSource::File(path) if path.is_dir() => from_dir(path),
            CredentialSource::File(path) => {
                let text = read(path)?;
                parse(&text, &format!("file {}", path.display()))
            }
            CredentialSource::CsiConfig(path) => {
                from_csi_config(&read(path)?, &format!("CSI config {}", path.display()))
            }
            CredentialSource::CsiConfigSecret(conf) => {
                let text = conf.text().ok_or_else(|| {
                    Error::CsiConfig(format!("{} is missing or empty", conf.describe()))
                })?;
                from_csi_config(&text, &conf.describe())
            }
            CredentialSource::Environment => from_env(),
        }
    }

    /// A cheap fingerprint of the source: changes whenever the file's content does.
    pub fn version(&self) -> Version {
        match self {
            CredentialSource::File(path) if path.is_dir() => {
                match (
                    read_bytes(&path.join("username")),
                    read_bytes(&path.join("password")),
                ) {
                    (Some(mut user), Some(password)) => {
                        // The length keeps ("ab", "c") and ("a", "bc") apart.
                        user.extend_from_slice(&(user.len() as u64).to_le_bytes());
                        user.extend_from_slice(&password);
                        Version::of(&user)
                    }
                    _ => Version(None),
                }
            }
            CredentialSource::File(path) | CredentialSource::CsiConfig(path) => {
                read_bytes(path).map_or(Version(None), |bytes| Version::of(&bytes))
            }
            CredentialSource::CsiConfigSecret(conf) => conf
                .text()
                .map_or(Version(None), |text| Version::of(text.as_bytes())),
            CredentialSource::Environment => Version::of(b"environment"),
        }
    }

    /// Where the credentials come from, for messages.
    pub fn describe(&self) -> String {
        match self {
            CredentialSource::File(path) => format!("credentials file {}", path.display()),
            CredentialSource::CsiConfig(path) => format!("CSI config {}", path.display()),
            CredentialSource::CsiConfigSecret(conf) => format!("CSI config {}", conf.describe()),
            CredentialSource::Environment => {
                "environment (VOLMIG_VC_USERNAME / VOLMIG_VC_PASSWORD)".to_owned()
            }
        }
    }
}

/// [`CredentialSource::version`] without reading the file on every call: the on-demand
/// backend asks before every vCenter call (five per registration), and opening, reading and
/// hashing the file each time is the most expensive thing it does. The file is read again
/// when its metadata changes (a Secret update swaps the file: another inode; an edit moves
/// its modification time or size) and at least once per `every` (an edit within one
/// timestamp tick that keeps the size), so changed credentials are still used at once.
pub struct VersionProbe {
    source: CredentialSource,
    every: Duration,
    last: Mutex<Option<Seen>>,
}

/// What the probe saw last.
#[derive(Clone, Copy)]
struct Seen {
    at: Instant,
    stamp: Option<Stamp>,
    version: Version,
}

/// Device, inode, modification time (s, ns) and size of a file.
type Stamp = (u64, u64, i64, i64, u64);

impl VersionProbe {
    /// A probe of `source` that reads it again at least once per `every`.
    pub fn new(source: CredentialSource, every: Duration) -> Self {
        Self {
            source,
            every,
            last: Mutex::new(None),
        }
    }

    /// The version of the source now.
    pub fn current(&self) -> Version {
        let stamp = self.stamp();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match *last {
            Some(seen)
                if seen.stamp == stamp && stamp.is_some() && seen.at.elapsed() < self.every =>
            {
                seen.version
            }
            _ => {
                let version = self.source.version();
                *last = Some(Seen {
                    at: Instant::now(),
                    stamp,
                    version,
                });
                version
            }
        }
    }

    fn stamp(&self) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        match &self.source {
            CredentialSource::File(path) | CredentialSource::CsiConfig(path) => {
                // A mounted Secret directory: kubelet swaps both files at once, so the
                // password file's stamp follows every update.
                let file = if path.is_dir() {
                    path.join("password")
                } else {
                    path.clone()
                };
                let m = std::fs::metadata(file).ok()?;
                Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
            }
            // In memory: hashing it at every call is cheap.
            CredentialSource::CsiConfigSecret(_) | CredentialSource::Environment => None,
        }
    }
}

fn read_bytes(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// `user` and `password` of a `csi-vsphere.conf`'s VirtualCenter section; `origin` names
/// the file or Secret in messages.
fn from_csi_config(text: &str, origin: &str) -> Result<Credentials, Error> {
    let config = CsiConfig::parse(text).map_err(|e| Error::CsiConfig(format!("{origin}: {e}")))?;
    let origin = format!("in {origin} [VirtualCenter {:?}]", config.host);
    let username = config.user.ok_or_else(|| Error::Missing {
        origin: origin.clone(),
        key: "user",
    })?;
    let password = config.password.ok_or(Error::Missing {
        origin,
        key: "password",
    })?;
    Ok(Credentials { username, password })
}

/// A directory with files `username` and `password` (a mounted `kubernetes.io/basic-auth`
/// Secret). The values are taken as written, except one trailing line break (`\n` or
/// `\r\n`, as editors and `echo` add) and, for the user, surrounding blanks.
fn from_dir(dir: &Path) -> Result<Credentials, Error> {
    let origin = format!("directory {}", dir.display());
    let missing = |key| Error::Missing {
        origin: origin.clone(),
        key,
    };
    let value = |key: &'static str| -> Result<String, Error> {
        let path = dir.join(key);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(strip_line_break(&text).to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing(key)),
            Err(source) => Err(Error::Read { path, source }),
        }
    };
    let username = value("username")?.trim().to_owned();
    if username.is_empty() {
        return Err(missing("username"));
    }
    Ok(Credentials {
        username,
        password: Password::from(value("password")?),
    })
}

/// Removes one trailing `\n` or `\r\n`.
fn strip_line_break(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses `username: X` / `password: Y` lines (`=` also accepted, blank lines and `#`
/// comments ignored). Blanks around a value are trimmed; a value wrapped in one pair of
/// matching quotes (`"..."` or `'...'`) loses that pair and nothing else, so
/// `password: "p@ss"` is `p@ss`, `password: "p@ss` is `"p@ss`, and a password that itself
/// starts and ends with the same quote is written with one more pair (`""p@ss""`).
pub fn parse(text: &str, origin: &str) -> Result<Credentials, Error> {
    let mut username = None;
    let mut password = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once([':', '=']) else {
            continue;
        };
        let value = unquote(value.trim()).to_owned();
        match key.trim() {
            "username" | "user" => username = Some(value),
            "password" => password = Some(value),
            _ => {}
        }
    }
    let missing = |key| Error::Missing {
        origin: origin.to_owned(),
        key,
    };
    Ok(Credentials {
        username: username
            .filter(|u| !u.is_empty())
            .ok_or_else(|| missing("username"))?,
        password: Password::from(password.ok_or_else(|| missing("password"))?),
    })
}

/// Removes one pair of matching outer quotes, nothing else.
fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// The environment variables, taken exactly as set.
fn from_env() -> Result<Credentials, Error> {
    let origin = "environment (VOLMIG_VC_USERNAME / VOLMIG_VC_PASSWORD)";
    let missing = |key| Error::Missing {
        origin: origin.to_owned(),
        key,
    };
    let username = std::env::var("VOLMIG_VC_USERNAME")
        .ok()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| missing("username"))?;
    let password = std::env::var("VOLMIG_VC_PASSWORD").map_err(|_| missing("password"))?;
    Ok(Credentials {
        username,
        password: Password::from(password),
    })
}

/// Reads credentials from `file`, or from the environment when `file` is `None`.
pub fn load(file: Option<&Path>) -> Result<Credentials, Error> {
    match file {
        Some(path) => CredentialSource::File(path.to_owned()).load(),
        None => CredentialSource::Environment.load(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_separators_and_hides_the_password() {
        let c = parse(
            "# vc\nusername: admin@vsphere.local\npassword = \"s3cr:t\"\n",
            "f",
        )
        .unwrap();
        assert_eq!(c.username, "admin@vsphere.local");
        assert_eq!(c.password.expose(), "s3cr:t");
        assert!(!format!("{c:?}").contains("s3cr"));
    }

    #[test]
    fn missing_keys_are_named() {
        let e = parse("username: a", "file x").unwrap_err();
        assert_eq!(e.to_string(), "vCenter credentials file x have no password");
        let e = parse("password: p", "file x").unwrap_err();
        assert!(e.to_string().contains("username"));
    }

    #[test]
    fn quotes_at_one_end_of_a_password_are_kept() {
        for (written, meant) in [
            ("\"starts", "\"starts"),
            ("ends'", "ends'"),
            ("'both\"", "'both\""),
            ("\"\"quoted\"\"", "\"quoted\""),
            ("\"in \"the\" middle\"", "in \"the\" middle"),
            ("'single'", "single"),
            ("\" padded \"", " padded "),
            ("\"", "\""),
            ("\"\"", ""),
        ] {
            let c = parse(&format!("username: u\npassword: {written}\n"), "f").unwrap();
            assert_eq!(c.password.expose(), meant, "written as {written:?}");
        }
    }

    #[test]
    fn sources_are_read_again_and_their_version_follows_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(&file, "username: a\npassword: one\n").unwrap();
        let source = CredentialSource::File(file.clone());
        let v1 = source.version();
        assert_eq!(source.load().unwrap().password.expose(), "one");
        assert_eq!(source.version(), v1, "unchanged file, same version");
        std::fs::write(&file, "username: a\npassword: two\n").unwrap();
        assert_ne!(source.version(), v1);
        assert_eq!(source.load().unwrap().password.expose(), "two");
        std::fs::remove_file(&file).unwrap();
        assert!(matches!(source.load(), Err(Error::Read { .. })));
        assert_ne!(source.version(), v1);
        assert!(!format!("{v1:?}").contains("two"));
    }

    #[test]
    fn a_probe_reads_the_file_again_when_it_changes_or_the_period_is_over() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        let swap = |content: &str| {
            // As kubelet updates a Secret: a new file put in place.
            let next = dir.path().join("next");
            std::fs::write(&next, content).unwrap();
            std::fs::rename(&next, &file).unwrap();
        };
        swap("username: a\npassword: one\n");
        let source = CredentialSource::File(file.clone());
        let v1 = source.version();
        let hourly = VersionProbe::new(source.clone(), Duration::from_secs(3600));
        assert_eq!(hourly.current(), v1);
        swap("username: a\npassword: two\n");
        let v2 = hourly.current();
        assert_ne!(v2, v1, "a swapped file is read at once");
        assert_eq!(v2, source.version());
        // Same inode, same size, same modification time: only the period tells.
        let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, "username: a\npassword: 333\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        assert_eq!(hourly.current(), v2, "an unseen edit waits for the period");
        let always = VersionProbe::new(source, Duration::ZERO);
        assert_ne!(always.current(), v2, "after the period: read again");
    }

    #[test]
    fn the_csi_config_supplies_user_and_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("csi-vsphere.conf");
        std::fs::write(
            &file,
            "[VirtualCenter \"vc\"]\nuser = \"admin\"\npassword = \"'q\\\"\"\n",
        )
        .unwrap();
        let c = CredentialSource::CsiConfig(file.clone()).load().unwrap();
        assert_eq!(c.username, "admin");
        assert_eq!(c.password.expose(), "'q\"");
        std::fs::write(&file, "[VirtualCenter \"vc\"]\npassword = p\n").unwrap();
        let e = CredentialSource::CsiConfig(file).load().unwrap_err();
        assert!(e.to_string().contains("have no user"), "{e}");
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod sources_tests;
