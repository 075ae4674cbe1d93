//! Style rules of the repository's text, checked over every source and document file.
//!
//! Comments, doc comments and documents cite the section of docs/design.md that states a
//! rule ("docs/design.md §4.8"), never an issue number and never a design document outside
//! the repository (an upper-case design file name, a path into a sibling `shared`
//! directory). The forbidden spellings are built from parts below so that this file does
//! not trip its own check.

use std::fs;
use std::path::{Path, PathBuf};

/// Directories never walked: version control and build output.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

/// Whether `line` mentions an issue by number: the word (singular or plural, any case) at a
/// word start, an optional space and `#`, then digits that do not start a compound such as
/// "2048-bit" (as in "the CA issues 2048-bit keys").
fn mentions_issue_number(line: &str) -> bool {
    let word = concat!("iss", "ue");
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut from = 0;
    while let Some(found) = lower[from..].find(word) {
        let start = from + found;
        from = start + word.len();
        if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut i = start + word.len();
        if bytes.get(i) == Some(&b's') {
            i += 1;
        }
        if bytes.get(i) == Some(&b' ') {
            i += 1;
        }
        if bytes.get(i) == Some(&b'#') {
            i += 1;
        }
        let digits = i;
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == digits {
            continue;
        }
        let next = bytes.get(i);
        if next.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'-') {
            continue;
        }
        return true;
    }
    false
}

/// Whether `line` cites a design document that is not the repository's docs/design.md.
fn cites_outside_design(line: &str) -> bool {
    let bare = concat!("DES", "IGN.md");
    let shared = concat!("../", "shared/");
    line.contains(bare) || line.contains(shared)
}

/// Every file under `dir`, skipping [`SKIPPED_DIRS`] and not following symbolic links.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            let name = entry.file_name();
            if !SKIPPED_DIRS.iter().any(|s| name == *s) {
                walk(&path, files);
            }
        } else if kind.is_file() {
            files.push(path);
        }
    }
}

#[test]
fn the_matchers_recognise_what_they_must() {
    let word = concat!("Iss", "ue");
    for hit in [
        format!("/// {word} 12.1: a create whose outcome is unknown"),
        format!("//! tests (see {} 4, acceptance 7)", word.to_lowercase()),
        format!("the goals of {}s 7 and 14", word.to_lowercase()),
        format!("# fixed in {word} #12"),
        format!("{word}14 and more"),
    ] {
        assert!(mentions_issue_number(&hit), "not flagged: {hit:?}");
    }
    for miss in [
        "vCenter's VMCA issues 2048-bit keys",
        "docs/design.md §4.8: an unknown outcome is not a failure",
        "no issue here; tissue 12 is another word",
        "an issue number is not cited",
    ] {
        assert!(!mentions_issue_number(miss), "flagged: {miss:?}");
    }
    assert!(cites_outside_design(concat!("see DES", "IGN.md §5")));
    assert!(cites_outside_design(concat!("see ../", "shared/design.md")));
    assert!(!cites_outside_design("see docs/design.md §5"));
}

#[test]
fn comments_and_docs_cite_design_sections_not_issue_numbers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(root, &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("docs/design.md")),
        "the walk of {} found no docs/design.md",
        root.display()
    );
    let mut found = Vec::new();
    for file in &files {
        // Binary files (images) are not text and are skipped.
        let Ok(text) = String::from_utf8(fs::read(file).unwrap_or_default()) else {
            continue;
        };
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            if mentions_issue_number(line) || cites_outside_design(line) {
                found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) cite an issue number or a design document outside the repository; \
         cite the docs/design.md section that states the rule instead (e.g. \
         \"docs/design.md §4.8\"):\n{}",
        found.len(),
        found.join("\n")
    );
    println!("{} files checked", files.len());
}
