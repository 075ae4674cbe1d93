//! Property tests of the `csi-vsphere.conf` parser beyond `csi_tests.rs`: whole generated
//! files (any placement, key case, quoting, comments, line endings) read back to the values
//! written; hostile text (unicode, 10k-character lines, endless continuations) never
//! panics; unquoted values keep quotes gcfg does not treat as quotes.

use proptest::prelude::*;

use super::*;

/// What a generated file says; `None` leaves the key out.
#[derive(Debug, Clone)]
struct Spec {
    cluster_id: Option<String>,
    distribution: Option<String>,
    host: String,
    port: Option<u16>,
    user: Option<String>,
    password: Option<String>,
    datacenters: Vec<String>,
    insecure: Option<bool>,
    ca_file: Option<String>,
}

/// How the file is written.
#[derive(Debug, Clone)]
struct Style {
    /// Per key (port, user, password, datacenters, insecure, ca-file): in [Global]
    /// instead of [VirtualCenter].
    in_global: [bool; 6],
    upper_keys: bool,
    upper_sections: bool,
    /// Quote values that could be written bare.
    always_quote: bool,
    crlf: bool,
    comments: bool,
    vc_first: bool,
}

/// A value written bare must survive gcfg's unquoted rules: no `"`, `\`, `;`, `#`, no
/// control characters, no blanks at its ends.
fn bare_safe(value: &str) -> bool {
    !value.is_empty()
        && value.trim() == value
        && !value
            .chars()
            .any(|c| matches!(c, '"' | '\\' | ';' | '#') || c.is_control())
}

fn write_value(value: &str, style: &Style) -> String {
    if style.always_quote || !bare_safe(value) {
        quote(value)
    } else {
        value.to_owned()
    }
}

fn render(spec: &Spec, style: &Style) -> String {
    let key = |k: &str| {
        if style.upper_keys {
            k.to_ascii_uppercase()
        } else {
            k.to_owned()
        }
    };
    let comment = |text: &str| {
        if style.comments {
            format!(" ; {text}")
        } else {
            String::new()
        }
    };
    let mut global = Vec::new();
    let mut vc = Vec::new();
    if let Some(id) = &spec.cluster_id {
        global.push(format!(
            "{} = {}{}",
            key("cluster-id"),
            write_value(id, style),
            comment("id")
        ));
    }
    if let Some(d) = &spec.distribution {
        global.push(format!(
            "{} = {}",
            key("cluster-distribution"),
            write_value(d, style)
        ));
    }
    let mut place = |index: usize, line: String| {
        if style.in_global[index] {
            global.push(line);
        } else {
            vc.push(line);
        }
    };
    if let Some(port) = spec.port {
        place(0, format!("{} = {port}{}", key("port"), comment("port")));
    }
    if let Some(user) = &spec.user {
        place(1, format!("{} = {}", key("user"), write_value(user, style)));
    }
    if let Some(password) = &spec.password {
        // A password is always quoted: any text is valid.
        place(
            2,
            format!("{}={}{}", key("password"), quote(password), comment("pw")),
        );
    }
    if !spec.datacenters.is_empty() {
        let joined = spec.datacenters.join(", ");
        place(
            3,
            format!("{} = {}", key("datacenters"), write_value(&joined, style)),
        );
    }
    match spec.insecure {
        Some(true) => place(4, key("insecure-flag")),
        Some(false) => place(4, format!("{} = \"false\"", key("insecure-flag"))),
        None => {}
    }
    if let Some(ca) = &spec.ca_file {
        place(
            5,
            format!("{} = {}", key("ca-file"), write_value(ca, style)),
        );
    }
    let (global_name, vc_name) = if style.upper_sections {
        ("GLOBAL", "VIRTUALCENTER")
    } else {
        ("Global", "VirtualCenter")
    };
    let global_section = std::iter::once(format!("[{global_name}]")).chain(global);
    let vc_section = std::iter::once(format!("[{vc_name} {}]", quote(&spec.host))).chain(vc);
    let mut lines: Vec<String> = if style.comments {
        vec!["# generated".to_owned(), String::new()]
    } else {
        Vec::new()
    };
    if style.vc_first {
        lines.extend(vc_section);
        lines.extend(global_section);
    } else {
        lines.extend(global_section);
        lines.extend(vc_section);
    }
    lines.join(if style.crlf { "\r\n" } else { "\n" })
}

fn text_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._@/-]{1,16}",
        "[A-Za-z0-9 ._@\"'\\\\;#=é卷-]{0,16}",
        "\\PC{0,24}",
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::option::of(text_value()),
        prop::option::of(text_value()),
        "[a-z0-9][a-z0-9.-]{0,20}|[0-9a-f]{1,4}(:[0-9a-f]{0,4}){2,6}",
        prop::option::of(1_u16..),
        prop::option::of(text_value()),
        prop::option::of("\\PC{0,40}"),
        prop::collection::vec("[A-Za-z0-9/_.-]{1,10}", 0..4),
        prop::option::of(any::<bool>()),
        prop::option::of("/[A-Za-z0-9/_. -]{0,20}[A-Za-z0-9]"),
    )
        .prop_map(
            |(
                cluster_id,
                distribution,
                host,
                port,
                user,
                password,
                datacenters,
                insecure,
                ca_file,
            )| Spec {
                cluster_id,
                distribution,
                host,
                port,
                user,
                password,
                datacenters,
                insecure,
                ca_file,
            },
        )
}

fn style() -> impl Strategy<Value = Style> {
    (
        any::<[bool; 6]>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(in_global, upper_keys, upper_sections, always_quote, crlf, comments, vc_first)| {
                Style {
                    in_global,
                    upper_keys,
                    upper_sections,
                    always_quote,
                    crlf,
                    comments,
                    vc_first,
                }
            },
        )
}

/// Empty text values count as unset, as in the driver.
fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}

proptest! {
    #[test]
    fn generated_files_read_back_to_what_was_written(spec in spec(), style in style()) {
        let text = render(&spec, &style);
        let c = CsiConfig::parse(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let shown = format!("{c:?}");
        // The printed form does not depend on the password (a plain "does not contain"
        // fails when another field, e.g. the user, contains the password).
        let mut other = c.clone();
        other.password = c.password.as_ref().map(|p| Password::new(format!("{}x", p.expose())));
        prop_assert_eq!(shown, format!("{other:?}"));
        // The URL is built or refused, never a panic.
        let _ = c.url();
        prop_assert_eq!(&c.host, &spec.host);
        prop_assert_eq!(c.port, spec.port.unwrap_or(443));
        prop_assert_eq!(c.cluster_id, non_empty(&spec.cluster_id));
        prop_assert_eq!(c.cluster_distribution, non_empty(&spec.distribution));
        prop_assert_eq!(c.user, non_empty(&spec.user));
        prop_assert_eq!(
            c.password.as_ref().map(|p| p.expose().to_owned()),
            spec.password.clone()
        );
        prop_assert_eq!(&c.datacenters, &spec.datacenters);
        prop_assert_eq!(c.insecure, spec.insecure.unwrap_or(false));
        prop_assert_eq!(c.ca_file, spec.ca_file.clone().map(PathBuf::from));
        prop_assert!(c.thumbprint.is_none());
    }

    /// gcfg only treats `"` as a quote: a bare value that starts or ends with `'`, or
    /// with a `"` that is escaped, is kept exactly.
    #[test]
    fn quotes_at_the_ends_of_a_bare_value_are_kept(
        body in "[A-Za-z0-9@._-]{0,12}",
        lead in prop::sample::select(&["'", "\\\"", ""][..]),
        tail in prop::sample::select(&["'", "\\\"", ""][..]),
    ) {
        let written = format!("{lead}{body}{tail}");
        prop_assume!(!written.is_empty());
        let c = CsiConfig::parse(&format!("[VirtualCenter \"vc\"]\npassword = {written}\n"))
            .map_err(|e| TestCaseError::fail(format!("{written:?}: {e}")))?;
        let meant = written.replace("\\\"", "\"");
        prop_assert_eq!(c.password.map(|p| p.expose().to_owned()), Some(meant));
    }

    #[test]
    fn hostile_lines_never_panic(
        lines in prop::collection::vec(
            prop_oneof![
                "\\PC{0,200}",
                "[\\[\\]\"\\\\;#= a-zA-Z\\t\\r]{0,40}",
                Just("\\".to_owned()),
                Just("[VirtualCenter \"\\".to_owned()),
                Just("password = \"\\".to_owned()),
            ],
            0..30,
        )
    ) {
        let text = lines.join("\n");
        if let Ok(c) = CsiConfig::parse(&text) {
            let _ = c.url();
        }
        let text = format!("[VirtualCenter \"vc\"]\n{}", lines.join("\n"));
        if let Ok(c) = CsiConfig::parse(&text) {
            let _ = c.url();
            prop_assert_eq!(c.host, "vc");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = CsiConfig::parse(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn huge_inputs_are_parsed_or_refused_without_panicking() {
    let long_value = "p".repeat(10_000);
    let c = CsiConfig::parse(&format!(
        "[VirtualCenter \"vc\"]\npassword = {}\n",
        quote(&long_value)
    ))
    .unwrap();
    assert_eq!(c.password.unwrap().expose(), long_value);
    // 10k continuation lines make one logical line.
    let continued = format!(
        "[VirtualCenter \"vc\"]\ndatacenters = a{}\n",
        ",\\\nb".repeat(10_000)
    );
    let c = CsiConfig::parse(&continued).unwrap();
    assert_eq!(c.datacenters.len(), 10_001);
    // A file that is one 10k-character token, an unterminated quote, a lone backslash.
    for text in [
        "x".repeat(10_000),
        "[".repeat(10_000),
        format!("[VirtualCenter \"vc\"]\nuser = \"{}", "a".repeat(10_000)),
        format!("[VirtualCenter \"{}", "\\".repeat(10_001)),
        "\\".repeat(10_001),
    ] {
        assert!(CsiConfig::parse(&text).is_err(), "{}", &text[..20]);
    }
}

/// A password no error message contains by chance: letters and digits at most two in a
/// row, between characters (`%~^&$`) that no message uses, so any 3 characters in a row
/// of it include one of those.
fn marked_secret() -> impl Strategy<Value = String> {
    prop::collection::vec(("[A-Za-z0-9]{0,2}", "[%~^&$]"), 3..12)
        .prop_map(|parts| parts.into_iter().map(|(a, b)| a + &b).collect())
}

proptest! {
    /// Whatever is wrong with the line that holds the password (or with a line that is the
    /// password), the error names the line and never shows 3 characters of the value.
    #[test]
    fn errors_never_show_the_password(
        secret in marked_secret(),
        damage in 0_usize..10,
        cut in any::<prop::sample::Index>(),
        escape in "[ac-mo-su-zA-Z0-9%~^&$']",
        comments in 0_usize..4,
        in_global in any::<bool>(),
    ) {
        let (a, b) = secret.split_at(cut.index(secret.len() + 1));
        let (line, key) = match damage {
            0 => (format!("password = \"{secret}"), Some("password")),
            1 => (format!("password = \"{a}\\{escape}{b}\""), Some("password")),
            2 => (format!("password = {a}\\{escape}{b}"), Some("password")),
            3 => (format!("password = {secret}\\"), Some("password")),
            4 => (format!("password {secret}"), Some("password")),
            5 => (format!("port = {secret}"), Some("port")),
            6 => (format!("insecure-flag = {secret}"), Some("insecure-flag")),
            7 => (secret.clone(), None),
            8 => (format!("\"{secret}\" = x"), None),
            _ => (format!("password = \"{secret}"), Some("password")),
        };
        let before_sections = damage == 9;
        let mut text = String::new();
        if !before_sections {
            text.push_str("[Global]\ncluster-id = c\n");
            text.push_str(&"; note\n".repeat(comments));
            if !in_global {
                text.push_str("[VirtualCenter \"vc\"]\nuser = u\n");
            }
        }
        let number = text.matches('\n').count() + 1;
        text.push_str(&line);
        if damage != 3 {
            text.push_str("\n[VirtualCenter \"vc\"]\nuser = u2\n");
        }
        let error = CsiConfig::parse(&text)
            .err()
            .ok_or_else(|| TestCaseError::fail(format!("accepted:\n{text}")))?;
        let shown = error.to_string();
        let escaped = format!("\\{escape}");
        prop_assert!(!shown.contains(&escaped), "{}", shown);
        let debug = format!("{error:?}");
        let chars: Vec<char> = secret.chars().collect();
        for window in chars.windows(3) {
            let part: String = window.iter().collect();
            prop_assert!(!shown.contains(&part), "{:?} shown: {}", part, shown);
            prop_assert!(!debug.contains(&part), "{:?} shown: {}", part, debug);
        }
        let line_prefix = format!("line {number}: ");
        prop_assert!(shown.starts_with(&line_prefix), "{}", shown);
        if let Some(key) = key {
            prop_assert!(shown.contains(key), "{}", shown);
        }
        if !before_sections {
            let section = if in_global { "[Global]" } else { "[VirtualCenter]" };
            prop_assert!(shown.contains(section), "{}", shown);
        }
    }
}
