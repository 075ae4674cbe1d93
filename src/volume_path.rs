//! The in-tree volume path (`[datastore] folder/file.vmdk`) and the names derived from it.
//!
//! Every spelling of one file maps to one canonical form (docs/design.md §1.1), and the
//! Kubernetes object name and the CNS volume name are pure functions of that form, so two
//! writers that see the same vmdk always agree on which object and which CNS volume they
//! mean.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest raw path accepted. vSphere limits a datastore path to 2 KiB of text; anything
/// longer is garbage, not a disk.
pub const MAX_PATH_LEN: usize = 2048;

/// Longest sanitized file stem kept in an object name (docs/design.md §2.6).
const MAX_STEM_LEN: usize = 54;

/// Prefix of the CNS volume names volmig creates; lets full sync recognise its own volumes.
pub const CNS_NAME_PREFIX: &str = "volmig-";

/// Why a string is not a volume path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The input is empty or only blanks.
    #[error("volume path is empty")]
    Empty,
    /// The input is longer than [`MAX_PATH_LEN`].
    #[error("volume path is {len} bytes long, longer than the {MAX_PATH_LEN} allowed")]
    TooLong {
        /// Length of the input in bytes.
        len: usize,
    },
    /// A control character (newline, tab, NUL, ...) appears in the input.
    #[error("volume path {path:?} contains a control character")]
    ControlCharacter {
        /// The offending input.
        path: String,
    },
    /// The input does not start with `[datastore]`.
    #[error("volume path {path:?} does not start with a [datastore] part")]
    MissingDatastore {
        /// The offending input.
        path: String,
    },
    /// A `[` without its `]`, a stray `]`, or nested brackets.
    #[error("volume path {path:?} has unbalanced brackets")]
    UnbalancedBrackets {
        /// The offending input.
        path: String,
    },
    /// `[]` or a datastore made only of slashes and blanks.
    #[error("volume path {path:?} names no datastore")]
    EmptyDatastore {
        /// The offending input.
        path: String,
    },
    /// Nothing after the datastore part.
    #[error("volume path {path:?} names no file after the datastore")]
    EmptyFilePath {
        /// The offending input.
        path: String,
    },
    /// A `..` segment in the file path.
    #[error("volume path {path:?} contains a '..' segment")]
    ParentSegment {
        /// The offending input.
        path: String,
    },
    /// The file does not end in `.vmdk`.
    #[error("volume path {path:?} does not name a .vmdk file")]
    NotVmdk {
        /// The offending input.
        path: String,
    },
}

/// A canonical in-tree volume path: `[<datastore name>] <file path>`.
///
/// Construct it with [`VolumePath::parse`] (or `str::parse`); it is always in canonical
/// form. Ordered by datastore, then file. Held as one string (one allocation): the PV
/// index keeps one per in-tree PV.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct VolumePath {
    /// `[datastore] file`. A datastore name never contains `]`, so this splits one way.
    canonical: Box<str>,
    /// Length in bytes of the datastore name (it starts after the `[`).
    datastore_len: usize,
}

impl VolumePath {
    /// Parses any accepted spelling and returns the canonical path.
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong { len: raw.len() });
        }
        let owned = || raw.to_owned();
        if raw.chars().any(char::is_control) {
            return Err(PathError::ControlCharacter { path: owned() });
        }
        let text = raw.trim();
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        let Some(rest) = text.strip_prefix('[') else {
            return Err(if text.contains('[') || text.contains(']') {
                PathError::UnbalancedBrackets { path: owned() }
            } else {
                PathError::MissingDatastore { path: owned() }
            });
        };
        let Some(close) = rest.find(']') else {
            return Err(PathError::UnbalancedBrackets { path: owned() });
        };
        let (datastore_part, file_part) = (&rest[..close], &rest[close + 1..]);
        if datastore_part.contains('[') || file_part.contains('[') || file_part.contains(']') {
            return Err(PathError::UnbalancedBrackets { path: owned() });
        }
        let datastore = datastore_part
            .split('/')
            .map(str::trim)
            .rfind(|segment| !segment.is_empty())
            .ok_or_else(|| PathError::EmptyDatastore { path: owned() })?
            .to_owned();

        let mut segments = Vec::new();
        for segment in file_part.trim().split('/') {
            // Blanks at the start of the file path cannot survive the canonical
            // `] ` separator, so they are dropped here to keep parsing idempotent.
            let segment = if segments.is_empty() {
                segment.trim_start()
            } else {
                segment
            };
            match segment {
                "" | "." => {}
                ".." => return Err(PathError::ParentSegment { path: owned() }),
                blank if blank.trim().is_empty() => {}
                other => segments.push(other),
            }
        }
        if segments.is_empty() {
            return Err(PathError::EmptyFilePath { path: owned() });
        }
        let file = segments.join("/");
        if !has_vmdk_suffix(&file) || file.rsplit('/').next().is_some_and(|f| f.len() <= 5) {
            return Err(PathError::NotVmdk { path: owned() });
        }
        Ok(Self {
            canonical: format!("[{datastore}] {file}").into_boxed_str(),
            datastore_len: datastore.len(),
        })
    }

    /// The datastore name (the last segment of an inventory path).
    pub fn datastore(&self) -> &str {
        &self.canonical[1..1 + self.datastore_len]
    }

    /// The file path inside the datastore, without leading slash.
    pub fn file_path(&self) -> &str {
        &self.canonical[self.datastore_len + "[] ".len()..]
    }

    /// The file name without directories and without the `.vmdk` suffix.
    pub fn file_stem(&self) -> &str {
        let file = self.file_path();
        let name = file.rsplit('/').next().unwrap_or(file);
        &name[..name.len() - ".vmdk".len()]
    }

    /// The canonical spelling, `[datastore] file`.
    pub fn canonical(&self) -> String {
        self.as_str().to_owned()
    }

    /// The canonical spelling, borrowed.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.canonical.as_bytes()).into()
    }

    /// The `VolumeMigration` object name: sanitized stem + `-` + 16 hex chars (64 bits) of the digest.
    pub fn object_name(&self) -> String {
        let mut name = sanitize_stem(self.file_stem());
        name.push('-');
        name.push_str(&hex::encode(&self.digest()[..8]));
        name
    }

    /// The deterministic CNS volume name, the idempotency key of a registration.
    pub fn cns_volume_name(&self) -> String {
        let mut name = String::with_capacity(CNS_NAME_PREFIX.len() + 64);
        name.push_str(CNS_NAME_PREFIX);
        name.push_str(&hex::encode(self.digest()));
        name
    }
}

fn has_vmdk_suffix(file: &str) -> bool {
    file.len() >= 5
        && file.is_char_boundary(file.len() - 5)
        && file[file.len() - 5..].eq_ignore_ascii_case(".vmdk")
}

/// Lower-case DNS-1123 label text from an arbitrary file stem, at most [`MAX_STEM_LEN`]
/// characters, never empty.
fn sanitize_stem(stem: &str) -> String {
    let mut out = String::with_capacity(stem.len().min(MAX_STEM_LEN));
    for c in stem.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
        if out.len() == MAX_STEM_LEN {
            break;
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("volume");
    }
    out
}

impl fmt::Display for VolumePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

impl fmt::Debug for VolumePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VolumePath")
            .field("datastore", &self.datastore())
            .field("file", &self.file_path())
            .finish()
    }
}

impl Ord for VolumePath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.datastore(), self.file_path()).cmp(&(other.datastore(), other.file_path()))
    }
}

impl PartialOrd for VolumePath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for VolumePath {
    type Err = PathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for VolumePath {
    type Error = PathError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<VolumePath> for String {
    fn from(value: VolumePath) -> Self {
        value.canonical()
    }
}

/// True when `name` is a valid DNS-1123 label (what object names derived here must be).
pub fn is_dns1123_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
#[path = "volume_path_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "volume_path_proptests.rs"]
mod proptests;
