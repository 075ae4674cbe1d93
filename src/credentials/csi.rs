//! The vSphere CSI driver's `csi-vsphere.conf`, read as the driver reads it (gcfg, an INI
//! dialect): `[Global]` and one `[VirtualCenter "<host>"]` section; section and key names
//! are case-insensitive (the host is not); values may be double-quoted with `\"`, `\\`,
//! `\n`, `\t` escapes; `;` and `#` start a comment outside quotes; a key without `=` is a
//! boolean `true`; a line ending in `\` continues on the next one. Unknown sections and
//! keys (the driver has many) are ignored.
//!
//! The file holds the vCenter password, so errors name the line, the section and the key,
//! never any part of a value (nor of a line that does not start with a key name).

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

use super::Password;

/// Why a `csi-vsphere.conf` cannot be used. No message repeats a value of the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiConfigError {
    /// The INI text is malformed.
    #[error("line {line}: {message}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong, after the section and key it is in (never their value).
        message: String,
    },
    /// The text parses but does not describe exactly one usable vCenter.
    #[error("{0}")]
    Invalid(String),
}

/// One `name = value` of a section; `value` is `None` for a bare `name` (boolean true).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: String,
    value: Option<String>,
    line: usize,
    /// The section as errors show it ([`section_label`]).
    section: String,
}

impl Entry {
    /// An error about this entry's value, which it does not show.
    fn error(&self, message: &str) -> CsiConfigError {
        CsiConfigError::Syntax {
            line: self.line,
            message: locate(Some(&self.section), Some(&self.key), message),
        }
    }
}

/// The keys volmig reads. A line that starts with one of them but has no `=` names it in
/// the error; any other name there could be the start of a misplaced value (a password on
/// a line of its own), so it is not shown.
const KNOWN_KEYS: &[&str] = &[
    "cluster-id",
    "cluster-distribution",
    "user",
    "password",
    "port",
    "datacenters",
    "insecure-flag",
    "ca-file",
    "thumbprint",
];

/// A section as errors show it: its name, never the quoted subsection (the host, which
/// could hold a `user:password@`).
fn section_label(name: &str) -> String {
    match name {
        "global" => "[Global]".to_owned(),
        "virtualcenter" => "[VirtualCenter]".to_owned(),
        other => format!("[{other}]"),
    }
}

/// `[Section] key: message`, leaving out what is not known.
fn locate(section: Option<&str>, key: Option<&str>, message: &str) -> String {
    match (section, key) {
        (Some(section), Some(key)) => format!("{section} {key}: {message}"),
        (Some(section), None) => format!("{section}: {message}"),
        (None, Some(key)) => format!("{key}: {message}"),
        (None, None) => message.to_owned(),
    }
}

/// How errors show a host: as written, unless it holds a `user@` (then not at all).
fn shown_host(host: &str) -> &str {
    if host.contains('@') {
        "<a host with a user@, not shown>"
    } else {
        host
    }
}

/// The refusal of a `[VirtualCenter "user:password@host"]`; it shows neither.
const CREDENTIALS_IN_HOST: &str = "[VirtualCenter \"<host>\"] must name the vCenter host only, without credentials (user:password@, not shown here); put them in the user and password keys";

/// One section: lower-case name, the quoted subsection as written, its entries in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    name: String,
    subsection: Option<String>,
    entries: Vec<Entry>,
}

impl Section {
    /// The last value of `key` (later lines win, as in gcfg for single-valued keys).
    fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| e.key == key)
    }
}

/// What volmig takes from `csi-vsphere.conf`.
#[derive(Clone, PartialEq, Eq)]
pub struct CsiConfig {
    /// `[Global] cluster-id`.
    pub cluster_id: Option<String>,
    /// `[Global] cluster-distribution`.
    pub cluster_distribution: Option<String>,
    /// The vCenter host: the subsection of `[VirtualCenter "<host>"]`.
    pub host: String,
    /// `port` (VirtualCenter, else Global), default 443.
    pub port: u16,
    /// `user` (VirtualCenter, else Global).
    pub user: Option<String>,
    /// `password` (VirtualCenter, else Global).
    pub password: Option<Password>,
    /// `datacenters` (VirtualCenter, else Global), comma-separated, blanks dropped.
    pub datacenters: Vec<String>,
    /// `insecure-flag` (VirtualCenter, else Global), default false.
    pub insecure: bool,
    /// `ca-file` (VirtualCenter, else Global).
    pub ca_file: Option<PathBuf>,
    /// `thumbprint` (VirtualCenter, else Global): SHA-1 of vCenter's certificate, `AA:BB:..`.
    pub thumbprint: Option<String>,
}

impl fmt::Debug for CsiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CsiConfig")
            .field("cluster_id", &self.cluster_id)
            .field("cluster_distribution", &self.cluster_distribution)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("datacenters", &self.datacenters)
            .field("insecure", &self.insecure)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl CsiConfig {
    /// Parses the text of a `csi-vsphere.conf`.
    pub fn parse(text: &str) -> Result<Self, CsiConfigError> {
        let sections = parse_ini(text)?;
        let invalid = |m: String| CsiConfigError::Invalid(m);
        let global: Vec<&Section> = sections.iter().filter(|s| s.name == "global").collect();
        let vc: Vec<&Section> = sections
            .iter()
            .filter(|s| s.name == "virtualcenter")
            .collect();
        if let Some(bare) = vc.iter().find(|s| s.subsection.is_none()) {
            let line = bare.entries.first().map_or(0, |e| e.line);
            return Err(invalid(format!(
                "[VirtualCenter] needs the vCenter host: [VirtualCenter \"vc.example.com\"] (near line {line})"
            )));
        }
        let mut hosts: Vec<&str> = vc.iter().filter_map(|s| s.subsection.as_deref()).collect();
        hosts.dedup();
        let host = match hosts.as_slice() {
            [] => {
                return Err(invalid(
                    "no [VirtualCenter \"<host>\"] section: volmig needs the vCenter to talk to"
                        .to_owned(),
                ));
            }
            [one] => (*one).to_owned(),
            many => {
                return Err(invalid(format!(
                    "{} [VirtualCenter] sections ({}): volmig supports exactly one vCenter",
                    many.len(),
                    many.iter()
                        .map(|h| shown_host(h))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        if host.trim().is_empty() {
            return Err(invalid("[VirtualCenter \"\"] has an empty host".to_owned()));
        }
        // The VirtualCenter section wins over Global; within each, the last line wins.
        let lookup = |key: &str| -> Option<&Entry> {
            vc.iter()
                .rev()
                .find_map(|s| s.get(key))
                .or_else(|| global.iter().rev().find_map(|s| s.get(key)))
        };
        let global_value = |key: &str| -> Option<String> {
            global
                .iter()
                .rev()
                .find_map(|s| s.get(key))
                .and_then(|e| e.value.clone())
                .filter(|v| !v.is_empty())
        };
        let text_value = |key: &str| {
            lookup(key)
                .and_then(|e| e.value.clone())
                .filter(|v| !v.is_empty())
        };
        let port = match lookup("port") {
            None => 443,
            Some(entry @ Entry { value: Some(v), .. }) if !v.trim().is_empty() => v
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| entry.error("not a TCP port (a number from 1 to 65535)"))?,
            Some(_) => 443,
        };
        let insecure = match lookup("insecure-flag") {
            None => false,
            Some(entry) => parse_bool(entry)?,
        };
        Ok(Self {
            cluster_id: global_value("cluster-id"),
            cluster_distribution: global_value("cluster-distribution"),
            host,
            port,
            user: text_value("user"),
            password: lookup("password")
                .and_then(|e| e.value.clone())
                .map(Password::from),
            datacenters: text_value("datacenters")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|d| !d.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            insecure,
            ca_file: text_value("ca-file").map(PathBuf::from),
            thumbprint: text_value("thumbprint"),
        })
    }

    /// Reads and parses `path`; errors name the file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read CSI config {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("CSI config {}: {e}", path.display()))
    }

    /// `https://<host>:<port>/sdk` (IPv6 hosts in brackets). A host with a `user@` or
    /// `user:password@` is refused without being shown.
    pub fn url(&self) -> Result<Url, CsiConfigError> {
        let host = self.host.trim();
        // Only an `@` makes a user part of a URL.
        if host.contains('@') {
            return Err(CsiConfigError::Invalid(CREDENTIALS_IN_HOST.to_owned()));
        }
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let text = format!("https://{host}:{}/sdk", self.port);
        Url::parse(&text).map_err(|e| {
            CsiConfigError::Invalid(format!(
                "[VirtualCenter {:?}] does not make a URL ({text}): {e}",
                self.host
            ))
        })
    }
}

fn parse_bool(entry: &Entry) -> Result<bool, CsiConfigError> {
    let Some(value) = &entry.value else {
        return Ok(true);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" | "" => Ok(false),
        _ => Err(entry.error("not a boolean (true or false)")),
    }
}

/// Splits the text into sections. Entries before the first section are an error, as in gcfg.
fn parse_ini(text: &str) -> Result<Vec<Section>, CsiConfigError> {
    let mut sections: Vec<Section> = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let number = i + 1;
        // Join continuation lines (a trailing unescaped backslash).
        let mut logical = lines[i].strip_suffix('\r').unwrap_or(lines[i]).to_owned();
        while ends_with_continuation(&logical) && i + 1 < lines.len() {
            logical.pop();
            i += 1;
            logical.push_str(lines[i].strip_suffix('\r').unwrap_or(lines[i]));
        }
        i += 1;
        let line = logical.trim_start();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let header = parse_header(rest).map_err(|message| CsiConfigError::Syntax {
                line: number,
                message,
            })?;
            sections.push(header);
            continue;
        }
        let label = sections.last().map(|s| section_label(&s.name));
        let syntax = |key: Option<&str>, message: &str| CsiConfigError::Syntax {
            line: number,
            message: locate(label.as_deref(), key, message),
        };
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
            .unwrap_or(line.len());
        let key = &line[..name_end];
        let rest = line[name_end..].trim_start();
        let is_name = key.starts_with(|c: char| c.is_ascii_alphabetic());
        let known = KNOWN_KEYS.contains(&key.to_ascii_lowercase().as_str());
        // The first word is shown only where it certainly is a key, not part of a value.
        let shown_key = (is_name && (known || rest.starts_with('='))).then_some(key);
        let Some(section) = sections.last_mut() else {
            return Err(syntax(shown_key, "a key before the first [section]"));
        };
        if !is_name {
            return Err(syntax(
                None,
                "expected `name = value`; the line does not start with a key name (not shown: it could be a value)",
            ));
        }
        let value = if rest.is_empty() || rest.starts_with(';') || rest.starts_with('#') {
            None
        } else if let Some(value) = rest.strip_prefix('=') {
            Some(parse_value(value).map_err(|message| syntax(shown_key, message))?)
        } else if known {
            return Err(syntax(shown_key, "expected `=` after the key"));
        } else {
            return Err(syntax(
                None,
                "expected `=` after the name that starts the line (not shown: it is not a key volmig reads and could be part of a value)",
            ));
        };
        section.entries.push(Entry {
            key: key.to_ascii_lowercase(),
            value,
            line: number,
            section: section_label(&section.name),
        });
    }
    Ok(sections)
}

/// True when the line ends in a backslash that is not itself escaped.
fn ends_with_continuation(line: &str) -> bool {
    let trailing = line.chars().rev().take_while(|c| *c == '\\').count();
    trailing % 2 == 1
}

/// `name]` or `name "sub"]` (after the `[`), with an optional comment after `]`.
fn parse_header(rest: &str) -> Result<Section, String> {
    let rest = rest.trim_start();
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
        .unwrap_or(rest.len());
    let name = &rest[..name_end];
    if name.is_empty() {
        return Err("a section header without a name".to_owned());
    }
    let mut rest = rest[name_end..].trim_start();
    let mut subsection = None;
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut sub = String::new();
        let mut chars = quoted.char_indices();
        let mut end = None;
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(at + 1);
                    break;
                }
                '\\' => match chars.next() {
                    Some((_, e)) => sub.push(e),
                    None => break,
                },
                other => sub.push(other),
            }
        }
        let Some(end) = end else {
            return Err(format!("[{name}]: unterminated quoted subsection"));
        };
        subsection = Some(sub);
        rest = quoted[end..].trim_start();
    }
    let Some(after) = rest.strip_prefix(']') else {
        return Err(format!("[{name}]: expected `]`"));
    };
    let after = after.trim_start();
    if !(after.is_empty() || after.starts_with(';') || after.starts_with('#')) {
        return Err(format!("[{name}]: unexpected text after `]`"));
    }
    Ok(Section {
        name: name.to_ascii_lowercase(),
        subsection,
        entries: Vec::new(),
    })
}

/// The value after `=`: quoted and unquoted parts, escapes, comment cut-off, outer blanks
/// (unquoted) trimmed. Errors say what is wrong, never where in the value or with what.
fn parse_value(raw: &str) -> Result<String, &'static str> {
    let mut out = String::new();
    // Length of `out` up to the last character that must be kept (quoted or non-blank).
    let mut keep = 0;
    let mut quoted = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                keep = out.len();
            }
            '\\' => {
                let escaped = match chars.next() {
                    Some('\\') => '\\',
                    Some('"') => '"',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    Some(_) => {
                        return Err(
                            "unknown escape in the value (only \\\\, \\\", \\n, \\t and \\b are allowed)",
                        );
                    }
                    None => return Err("the value ends in a lone backslash"),
                };
                out.push(escaped);
                keep = out.len();
            }
            ';' | '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if !out.is_empty() || keep > 0 {
                    out.push(c);
                }
            }
            c => {
                out.push(c);
                keep = out.len();
            }
        }
    }
    if quoted {
        return Err("unterminated quoted value");
    }
    out.truncate(keep);
    Ok(out)
}

/// Writes `value` as a quoted gcfg value that [`CsiConfig::parse`] reads back unchanged.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "csi_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "csi_proptests.rs"]
mod proptests;
