//! Identifiers as the API server and vCenter spell them, kept in the fewest bytes that
//! still spell back exactly: a lowercase UUID (volume IDs, uids), a PV name `pvc-<uuid>`, a
//! disk UUID as vCenter writes it (`60 00 C2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 40`, hex
//! digits in either case) or a decimal number without leading zeros (resourceVersions) is
//! a 16-byte value, anything else is text. volmig keeps a handful per tracked volume,
//! 100k volumes in a large cluster, so the 40 to 60 bytes a string costs (allocation
//! included) add up.
//!
//! A text maps to exactly one [`CompactText`] (the parse is the only way to build one), so
//! equality and hashing of the compact values agree with those of the texts; maps keyed by
//! it are looked up with a [`TextRef`], which parses without allocating.

use std::fmt;
use std::hash::{Hash, Hasher};

/// Prefix of the PV names the in-tree provisioner gives (`pvc-` + the claim's UID).
const PVC_PREFIX: &str = "pvc-";

/// One identifier, compactly (24 bytes, no allocation unless it is free text).
#[derive(Clone, PartialEq, Eq)]
pub enum CompactText {
    /// A lowercase UUID.
    Uuid([u8; 16]),
    /// `pvc-` followed by a lowercase UUID.
    PvcUuid([u8; 16]),
    /// A disk UUID in vCenter's spelling: 16 bytes, which hex digits are uppercase.
    DiskUuid([u8; 16], UpperDigits),
    /// A decimal number without leading zeros.
    Number(u64),
    /// Anything else, as written.
    Text(Box<str>),
}

/// Which of the 32 hex digits of a [`CompactText::DiskUuid`] are written uppercase (bit
/// `i` for digit `i`; never set for a decimal digit, so a text has one value).
pub type UpperDigits = u32;

/// A borrowed identifier in the same shape as [`CompactText`]: what lookups in maps keyed
/// by [`CompactText`] take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TextRef<'a> {
    /// A lowercase UUID.
    Uuid([u8; 16]),
    /// `pvc-` followed by a lowercase UUID.
    PvcUuid([u8; 16]),
    /// A disk UUID in vCenter's spelling.
    DiskUuid([u8; 16], UpperDigits),
    /// A decimal number without leading zeros.
    Number(u64),
    /// Anything else.
    Text(&'a str),
}

impl<'a> TextRef<'a> {
    /// The compact shape of `text` (no allocation).
    pub fn new(text: &'a str) -> Self {
        if let Some(bytes) = parse_uuid(text) {
            return Self::Uuid(bytes);
        }
        if let Some(bytes) = text.strip_prefix(PVC_PREFIX).and_then(parse_uuid) {
            return Self::PvcUuid(bytes);
        }
        if let Some((bytes, upper)) = parse_disk_uuid(text) {
            return Self::DiskUuid(bytes, upper);
        }
        match text.parse::<u64>() {
            Ok(n) if !text.starts_with(['+', '0']) || text == "0" => Self::Number(n),
            _ => Self::Text(text),
        }
    }

    /// The owned form.
    pub fn to_owned(self) -> CompactText {
        match self {
            Self::Uuid(bytes) => CompactText::Uuid(bytes),
            Self::PvcUuid(bytes) => CompactText::PvcUuid(bytes),
            Self::DiskUuid(bytes, upper) => CompactText::DiskUuid(bytes, upper),
            Self::Number(n) => CompactText::Number(n),
            Self::Text(text) => CompactText::Text(text.into()),
        }
    }
}

impl CompactText {
    /// The compact form of `text`.
    pub fn new(text: &str) -> Self {
        TextRef::new(text).to_owned()
    }

    /// The borrowed form (for lookups and comparisons).
    pub fn as_ref(&self) -> TextRef<'_> {
        match self {
            Self::Uuid(bytes) => TextRef::Uuid(*bytes),
            Self::PvcUuid(bytes) => TextRef::PvcUuid(*bytes),
            Self::DiskUuid(bytes, upper) => TextRef::DiskUuid(*bytes, *upper),
            Self::Number(n) => TextRef::Number(*n),
            Self::Text(text) => TextRef::Text(text),
        }
    }

    /// True when this spells `text`.
    pub fn is(&self, text: &str) -> bool {
        self.as_ref() == TextRef::new(text)
    }
}

impl Hash for CompactText {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

impl hashbrown::Equivalent<CompactText> for TextRef<'_> {
    fn equivalent(&self, key: &CompactText) -> bool {
        *self == key.as_ref()
    }
}

impl fmt::Display for TextRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uuid(bytes) => write_uuid(f, bytes),
            Self::PvcUuid(bytes) => {
                f.write_str(PVC_PREFIX)?;
                write_uuid(f, bytes)
            }
            Self::DiskUuid(bytes, upper) => write_disk_uuid(f, bytes, *upper),
            Self::Number(n) => write!(f, "{n}"),
            Self::Text(text) => f.write_str(text),
        }
    }
}

impl fmt::Display for CompactText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}

impl fmt::Debug for CompactText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A set of names without an allocation per name (for a `pvc-<uuid>` or a UUID): what a
/// watcher collects during a re-list to learn which objects are gone. A set of `String`s
/// would leave 100,000 small holes among the indexes' long-lived allocations once freed.
pub type NameSet = hashbrown::HashSet<CompactText, std::hash::RandomState>;

/// A set of identifiers that usually holds one (the PVs of a path, the objects of a
/// path): that one inline, more in a boxed slice (rebuilt on change: sets of more than one
/// are rare and small). 24 bytes. Unordered; no repeats.
#[derive(Debug, Clone)]
pub enum CompactSet {
    /// Exactly one.
    One(CompactText),
    /// Any number (empty after the last is removed).
    Many(Box<[CompactText]>),
}

impl CompactSet {
    /// A set of `first` alone.
    pub fn one(first: CompactText) -> Self {
        Self::One(first)
    }

    /// Adds `text` unless it is in the set already.
    pub fn insert(&mut self, text: CompactText) {
        if self.contains(text.as_ref()) {
            return;
        }
        let mut all: Vec<CompactText> = self.iter().cloned().collect();
        all.push(text);
        *self = Self::Many(all.into_boxed_slice());
    }

    /// Removes `text`; true when the set is empty afterwards.
    pub fn remove(&mut self, text: TextRef<'_>) -> bool {
        if self.contains(text) {
            let rest: Vec<CompactText> = self
                .iter()
                .filter(|t| t.as_ref() != text)
                .cloned()
                .collect();
            *self = Self::Many(rest.into_boxed_slice());
        }
        self.is_empty()
    }

    /// True when `text` is in the set.
    pub fn contains(&self, text: TextRef<'_>) -> bool {
        self.iter().any(|t| t.as_ref() == text)
    }

    /// The members, in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, CompactText> {
        match self {
            Self::One(first) => std::slice::from_ref(first).iter(),
            Self::Many(all) => all.iter(),
        }
    }

    /// True when the set holds nothing.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Many(all) if all.is_empty())
    }

    /// The members spelled out, sorted.
    pub fn sorted(&self) -> Vec<String> {
        let mut out: Vec<String> = self.iter().map(CompactText::to_string).collect();
        out.sort();
        out
    }
}

impl<'a> IntoIterator for &'a CompactSet {
    type Item = &'a CompactText;
    type IntoIter = std::slice::Iter<'a, CompactText>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Positions of the dashes in `8-4-4-4-12`.
const UUID_DASHES: [usize; 4] = [8, 13, 18, 23];

fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let raw = text.as_bytes();
    if raw.len() != 36 || UUID_DASHES.iter().any(|&i| raw[i] != b'-') {
        return None;
    }
    let mut digits = raw
        .iter()
        .enumerate()
        .filter(|(i, _)| !UUID_DASHES.contains(i))
        .map(|(_, &c)| c);
    let mut out = [0u8; 16];
    for byte in &mut out {
        let hi = lower_hex(digits.next()?)?;
        let lo = lower_hex(digits.next()?)?;
        *byte = (hi << 4) | lo;
    }
    Some(out)
}

/// Length of vCenter's disk UUID spelling: 16 two-digit groups and 15 separators.
const DISK_UUID_LEN: usize = 47;

/// The separator after byte `i` of a disk UUID (`-` between the two halves).
fn disk_uuid_separator(i: usize) -> u8 {
    if i == 7 { b'-' } else { b' ' }
}

/// `hh hh hh hh hh hh hh hh-hh hh hh hh hh hh hh hh`, hex digits in either case.
fn parse_disk_uuid(text: &str) -> Option<([u8; 16], UpperDigits)> {
    let raw = text.as_bytes();
    if raw.len() != DISK_UUID_LEN {
        return None;
    }
    let mut out = [0u8; 16];
    let mut upper: UpperDigits = 0;
    for (i, byte) in out.iter_mut().enumerate() {
        let at = i * 3;
        if i < 15 && raw[at + 2] != disk_uuid_separator(i) {
            return None;
        }
        let mut value = 0;
        for (j, &c) in raw[at..at + 2].iter().enumerate() {
            let (digit, is_upper) = match c {
                b'A'..=b'F' => (c - b'A' + 10, true),
                _ => (lower_hex(c)?, false),
            };
            value = (value << 4) | digit;
            if is_upper {
                upper |= 1 << (i * 2 + j);
            }
        }
        *byte = value;
    }
    Some((out, upper))
}

fn write_disk_uuid(
    f: &mut fmt::Formatter<'_>,
    bytes: &[u8; 16],
    upper: UpperDigits,
) -> fmt::Result {
    const LOWER: &[u8; 16] = b"0123456789abcdef";
    const UPPER: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = [0u8; DISK_UUID_LEN];
    for (i, byte) in bytes.iter().enumerate() {
        for (j, nibble) in [byte >> 4, byte & 0xf].into_iter().enumerate() {
            let digits = if upper & (1 << (i * 2 + j)) != 0 {
                UPPER
            } else {
                LOWER
            };
            out[i * 3 + j] = digits[usize::from(nibble)];
        }
        if i < 15 {
            out[i * 3 + 2] = disk_uuid_separator(i);
        }
    }
    // Only ASCII was written.
    f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
}

fn lower_hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn write_uuid(f: &mut fmt::Formatter<'_>, bytes: &[u8; 16]) -> fmt::Result {
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            f.write_str("-")?;
        }
        write!(f, "{byte:02x}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::hash::BuildHasher;

    #[test]
    fn each_shape_spells_back_exactly() {
        for (text, shape) in [
            ("0a1b2c3d-0000-4000-8000-00000000002a", "Uuid"),
            ("pvc-0a1b2c3d-0000-4000-8000-00000000002a", "PvcUuid"),
            ("0", "Number"),
            ("18446744073709551615", "Number"),
            ("18446744073709551616", "Text"),
            ("007", "Text"),
            ("+7", "Text"),
            ("", "Text"),
            ("0A1B2C3D-0000-4000-8000-00000000002A", "Text"),
            ("pvc-0a1b2c3d", "Text"),
            ("pv-static-01", "Text"),
            ("0a1b2c3d-0000-4000-8000-00000000002a-1a2b3c4d", "Text"),
            (
                "60 00 C2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 40",
                "DiskUuid",
            ),
            (
                "60 00 c2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 40",
                "DiskUuid",
            ),
            (
                "60 00 C2 9E A7 E8 26 9C-7D 20 45 4C 72 2A AF 40",
                "DiskUuid",
            ),
            ("60 00 C2 9e a7 e8 26 9c 7d 20 45 4c 72 2a af 40", "Text"),
            ("60 00 C2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 4g", "Text"),
            ("60-00 C2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 40", "Text"),
            ("60 00 C2 9e a7 e8 26 9c-7d 20 45 4c 72 2a af 40 ", "Text"),
            ("6000C29ea7e8269c7d20454c722aaf40", "Text"),
        ] {
            let compact = CompactText::new(text);
            let got = match compact {
                CompactText::Uuid(_) => "Uuid",
                CompactText::PvcUuid(_) => "PvcUuid",
                CompactText::DiskUuid(..) => "DiskUuid",
                CompactText::Number(_) => "Number",
                CompactText::Text(_) => "Text",
            };
            assert_eq!(got, shape, "{text:?}");
            assert_eq!(compact.to_string(), text);
            assert!(compact.is(text));
        }
    }

    #[test]
    fn a_compact_value_is_24_bytes() {
        assert_eq!(std::mem::size_of::<CompactText>(), 24);
    }

    #[test]
    fn maps_keyed_by_compact_text_are_looked_up_by_reference() {
        let mut map: hashbrown::HashMap<CompactText, u8, std::hash::RandomState> =
            hashbrown::HashMap::default();
        for (i, text) in ["pvc-0a1b2c3d-0000-4000-8000-00000000002a", "static", "42"]
            .iter()
            .enumerate()
        {
            map.insert(CompactText::new(text), i as u8);
        }
        assert_eq!(
            map.get(&TextRef::new("pvc-0a1b2c3d-0000-4000-8000-00000000002a")),
            Some(&0)
        );
        assert_eq!(map.get(&TextRef::new("static")), Some(&1));
        assert_eq!(map.get(&TextRef::new("42")), Some(&2));
        assert_eq!(map.get(&TextRef::new("042")), None);
    }

    #[test]
    fn a_set_keeps_one_inline_and_no_repeats() {
        let (a, b) = (CompactText::new("pv-a"), CompactText::new("pv-b"));
        let mut set = CompactSet::one(a.clone());
        set.insert(a.clone());
        assert!(matches!(set, CompactSet::One(_)), "a repeat is not added");
        set.insert(b.clone());
        assert_eq!(set.sorted(), ["pv-a", "pv-b"]);
        assert!(!set.remove(a.as_ref()));
        assert!(!set.remove(TextRef::new("pv-c")), "absent: no change");
        assert_eq!(set.sorted(), ["pv-b"]);
        assert!(set.remove(b.as_ref()));
        let mut single = CompactSet::one(b.clone());
        assert!(single.remove(b.as_ref()));
        assert_eq!(single.iter().count(), 0);
        assert_eq!(std::mem::size_of::<CompactSet>(), 24);
    }

    proptest! {
        #[test]
        fn any_text_round_trips_and_compares_as_text(a in "[0-9a-fA-Fp\\-cv+ ]{0,48}", b in "[0-9a-fA-Fp\\-cv+ ]{0,48}") {
            let (ca, cb) = (CompactText::new(&a), CompactText::new(&b));
            prop_assert_eq!(ca.to_string(), a.clone());
            prop_assert_eq!(ca == cb, a == b);
            let state = std::hash::RandomState::new();
            prop_assert_eq!(state.hash_one(&ca), state.hash_one(TextRef::new(&a)));
        }

        #[test]
        fn uuids_round_trip(bytes in any::<[u8; 16]>()) {
            let text = CompactText::Uuid(bytes).to_string();
            prop_assert_eq!(CompactText::new(&text), CompactText::Uuid(bytes));
            let pvc = format!("pvc-{text}");
            prop_assert_eq!(CompactText::new(&pvc), CompactText::PvcUuid(bytes));
        }

        #[test]
        fn disk_uuids_round_trip_in_any_case(bytes in any::<[u8; 16]>(), case in any::<u32>()) {
            let lower = CompactText::DiskUuid(bytes, 0).to_string();
            // Uppercase the letters `case` picks; digits have no case.
            let text: String = lower
                .chars()
                .filter(char::is_ascii_hexdigit)
                .zip(0..)
                .map(|(c, i)| if case & (1 << i) != 0 { c.to_ascii_uppercase() } else { c })
                .collect::<Vec<char>>()
                .chunks(2)
                .enumerate()
                .map(|(i, pair)| {
                    let sep = match i { 7 => "-", 15 => "", _ => " " };
                    format!("{}{}{sep}", pair[0], pair[1])
                })
                .collect();
            let compact = CompactText::new(&text);
            prop_assert!(matches!(compact, CompactText::DiskUuid(..)), "{}", text);
            prop_assert_eq!(compact.to_string(), text.clone());
            prop_assert_eq!(CompactText::new(&text.to_lowercase()) == compact, text == text.to_lowercase());
        }
    }
}
