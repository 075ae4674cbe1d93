//! Property tests of the volume-path parser and the names derived from it, beyond the
//! table and generator tests of `volume_path_tests.rs`: spellings of one file agree,
//! hostile text (unicode, near-miss paths, 10k-character inputs) never panics, and object
//! names are deterministic with a 64-bit digest suffix that does not collide.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;

/// One directory or file-name part in canonical form: no `/`, brackets or control
/// characters, no blanks at its ends, not `.` or `..`.
fn part() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_é卷#?&+-][a-zA-Z0-9_ é卷#?&+.-]{0,10}[a-zA-Z0-9_é卷#?&+-]|[a-zA-Z0-9_é卷-]"
}

/// A datastore name in canonical form.
fn datastore() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_][A-Za-z0-9_ .-]{0,10}[A-Za-z0-9_]|[A-Za-z0-9_]"
}

/// (canonical string, one alias spelling of it)
fn canonical_and_alias() -> impl Strategy<Value = (String, String)> {
    (
        datastore(),
        prop::collection::vec(part(), 0..4),
        part(),
        prop_oneof![Just(".vmdk"), Just(".VMDK"), Just(".vmDK")],
        // Alias choices.
        (
            0_u8..4,
            0_u8..3,
            0_u8..4,
            any::<bool>(),
            any::<bool>(),
            0_u8..3,
        ),
    )
        .prop_map(|(ds, dirs, stem, ext, choice)| {
            let (ds_form, gap, dir_sep, leading, trailing, outer) = choice;
            let file = dirs
                .iter()
                .cloned()
                .chain(std::iter::once(format!("{stem}{ext}")))
                .collect::<Vec<_>>();
            let canonical = format!("[{ds}] {}", file.join("/"));
            let ds_alias = match ds_form {
                0 => ds.clone(),
                1 => format!("/DC0/datastore/{ds}"),
                2 => format!("dc/{ds}/"),
                _ => format!("  {ds}\u{a0}"),
            };
            let gap = ["", " ", " \u{3000} "][usize::from(gap)];
            let sep = ["/", "//", "/./", "/ /"][usize::from(dir_sep)];
            let mut alias_file = file.join(sep);
            if leading {
                alias_file.insert_str(0, "./");
            }
            if trailing {
                alias_file.push('/');
            }
            let pad = ["", " ", "\u{2003}\u{a0}"][usize::from(outer)];
            let alias = format!("{pad}[{ds_alias}]{gap}{alias_file}{pad}");
            (canonical, alias)
        })
}

/// Fragments that steer arbitrary text into every branch of the parser.
const FRAGMENTS: &[&str] = &[
    "[", "]", "/", ".", "..", " ", "\u{a0}", "\u{3000}", "\u{2028}", "\u{200b}", "\u{feff}",
    ".vmdk", ".VMDK", "vmdk", "ds", "a", "é", "卷", "🦀", "\t", "\0", "\u{7f}", "\u{85}", "-", "_",
    "\\", "%2F", "\"",
];

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|parts| parts.concat())
}

/// Checks everything a parsed path promises.
fn check_parsed(path: &VolumePath) -> Result<(), TestCaseError> {
    let canonical = path.canonical();
    let again = VolumePath::parse(&canonical)
        .map_err(|e| TestCaseError::fail(format!("canonical {canonical:?} rejected: {e}")))?;
    prop_assert_eq!(&again, path);
    prop_assert_eq!(again.canonical(), canonical.clone());
    prop_assert!(canonical.len() <= MAX_PATH_LEN + 1);
    check_object_name(path)?;
    let cns = path.cns_volume_name();
    prop_assert_eq!(cns.len(), CNS_NAME_PREFIX.len() + 64);
    Ok(())
}

/// `<stem>-<16 hex>`: the stem a DNS-1123 label of at most 54 chars, the suffix the first
/// 16 hex chars of SHA-256(canonical path), the whole a function of the canonical path.
fn check_object_name(path: &VolumePath) -> Result<(), TestCaseError> {
    let name = path.object_name();
    let Some((stem, suffix)) = name.rsplit_once('-') else {
        return Err(TestCaseError::fail(format!("{name:?} has no '-'")));
    };
    prop_assert!(is_dns1123_label(stem), "stem of {:?}", name);
    prop_assert!(stem.len() <= MAX_STEM_LEN, "{:?}", name);
    prop_assert_eq!(suffix.len(), 16, "{:?}", name);
    prop_assert!(
        suffix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{:?}",
        name
    );
    let digest = hex::encode(Sha256::digest(path.canonical().as_bytes()));
    prop_assert_eq!(suffix, &digest[..16]);
    prop_assert_eq!(&name, &path.object_name(), "deterministic");
    prop_assert_eq!(&name, &path.clone().object_name());
    Ok(())
}

proptest! {
    #[test]
    fn aliases_agree_with_the_canonical_spelling((canonical, alias) in canonical_and_alias()) {
        let from_canonical = VolumePath::parse(&canonical)
            .map_err(|e| TestCaseError::fail(format!("{canonical:?}: {e}")))?;
        let from_alias = VolumePath::parse(&alias)
            .map_err(|e| TestCaseError::fail(format!("alias {alias:?} of {canonical:?}: {e}")))?;
        prop_assert_eq!(from_canonical.canonical(), canonical.clone());
        prop_assert_eq!(&from_alias, &from_canonical, "alias {:?}", alias);
        prop_assert_eq!(from_alias.object_name(), from_canonical.object_name());
        prop_assert_eq!(from_alias.cns_volume_name(), from_canonical.cns_volume_name());
        check_parsed(&from_alias)?;
    }

    #[test]
    fn fragment_soup_never_panics_and_what_parses_is_canonical(text in fragment_text()) {
        match VolumePath::parse(&text) {
            Ok(path) => check_parsed(&path)?,
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn arbitrary_unicode_up_to_10k_chars_never_panics(
        chars in prop::collection::vec(any::<char>(), 0..10_000)
    ) {
        let text: String = chars.into_iter().collect();
        match VolumePath::parse(&text) {
            Ok(path) => check_parsed(&path)?,
            Err(PathError::TooLong { len }) => prop_assert_eq!(len, text.len()),
            Err(_) => prop_assert!(text.len() <= MAX_PATH_LEN),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(path) = VolumePath::parse(&text) {
            check_parsed(&path)?;
        }
    }

    #[test]
    fn one_edit_away_from_a_valid_path_never_panics(
        (canonical, _alias) in canonical_and_alias(),
        at in any::<prop::sample::Index>(),
        insert in prop::sample::select(FRAGMENTS),
        delete in any::<bool>(),
    ) {
        let chars: Vec<char> = canonical.chars().collect();
        let at = at.index(chars.len() + 1);
        let mut edited: String = chars[..at].iter().collect();
        if !delete {
            edited.push_str(insert);
        }
        let rest = if delete { at + 1 } else { at };
        edited.extend(chars.iter().skip(rest));
        if let Ok(path) = VolumePath::parse(&edited) {
            check_parsed(&path)?;
        }
    }

    #[test]
    fn long_paths_around_the_limit(
        stem_len in (MAX_PATH_LEN - 40)..(MAX_PATH_LEN + 40),
        wide in any::<bool>(),
    ) {
        // Multi-byte characters put the byte limit inside a character.
        let stem: String = if wide { "é".repeat(stem_len / 2) } else { "a".repeat(stem_len) };
        let raw = format!("[ds] {stem}.vmdk");
        match VolumePath::parse(&raw) {
            Ok(path) => {
                prop_assert!(raw.len() <= MAX_PATH_LEN);
                check_parsed(&path)?;
            }
            Err(PathError::TooLong { len }) => {
                prop_assert!(raw.len() > MAX_PATH_LEN);
                prop_assert_eq!(len, raw.len());
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
    }
}

#[test]
fn ten_thousand_character_inputs_are_refused_as_too_long() {
    for raw in [
        format!("[ds] {}.vmdk", "a".repeat(10_000)),
        format!("[{}] a.vmdk", "d".repeat(10_000)),
        "[".repeat(10_000),
        "/".repeat(10_000),
        "é".repeat(10_000),
        format!("[ds] {}a.vmdk", "./".repeat(5_000)),
    ] {
        assert_eq!(
            VolumePath::parse(&raw),
            Err(PathError::TooLong { len: raw.len() })
        );
    }
}

/// 1,000,000 distinct canonical paths that share datastore and file stem, so their object
/// names differ only in the 64-bit digest suffix: none collide (the chance of any collision
/// among 10^6 random 64-bit values is about 3 * 10^-8).
#[test]
fn a_million_distinct_paths_get_distinct_object_names() {
    const PATHS: usize = 1_000_000;
    let mut names = HashSet::with_capacity(PATHS);
    for i in 0..PATHS {
        let raw = format!("[LocalDS_{}] kubevols/{i:x}/disk.vmdk", i % 3);
        let path = VolumePath::parse(&raw).unwrap();
        let name = path.object_name();
        assert!(name.starts_with("disk-"), "{name}");
        assert!(names.insert(name), "object name collision at {raw:?}");
    }
    assert_eq!(names.len(), PATHS);
    // Deterministic: a path parsed again gives the name already in the set.
    let again = VolumePath::parse("[LocalDS_1] kubevols/1/disk.vmdk").unwrap();
    assert!(names.contains(&again.object_name()));
}
