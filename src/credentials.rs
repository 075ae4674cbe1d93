//! vCenter credentials: a file with `username` and `password` lines (a mounted Secret), or
//! the `VOLMIG_VC_USERNAME` / `VOLMIG_VC_PASSWORD` environment variables. The password is
//! never logged or printed.

use std::path::{Path, PathBuf};

use crate::backend::cns::Password;

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
}

/// A vCenter user and password.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The user.
    pub username: String,
    /// The password (prints as `***`).
    pub password: Password,
}

/// Parses `username: X` / `password: Y` lines (`=` also accepted, blank lines and `#`
/// comments ignored, surrounding quotes removed).
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
        let value = value
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .to_owned();
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

/// Reads credentials from `file`, or from the environment when `file` is `None`.
pub fn load(file: Option<&Path>) -> Result<Credentials, Error> {
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.to_owned(),
                source,
            })?;
            parse(&text, &format!("file {}", path.display()))
        }
        None => {
            let origin = "environment (VOLMIG_VC_USERNAME / VOLMIG_VC_PASSWORD)";
            let username = std::env::var("VOLMIG_VC_USERNAME").unwrap_or_default();
            let password = std::env::var("VOLMIG_VC_PASSWORD").ok();
            parse(
                &format!(
                    "username: {username}\n{}",
                    password
                        .map(|p| format!("password: {p}"))
                        .unwrap_or_default()
                ),
                origin,
            )
        }
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
}
