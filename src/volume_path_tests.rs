use super::*;
use proptest::prelude::*;

/// (input, expected canonical form)
const VALID: &[(&str, &str)] = &[
    (
        "[LocalDS_0] kubevols/disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0]kubevols/disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0]   kubevols/disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "  [LocalDS_0] kubevols/disk.vmdk  ",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0] /kubevols/disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0] kubevols//disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0] ./kubevols/./disk.vmdk",
        "[LocalDS_0] kubevols/disk.vmdk",
    ),
    (
        "[LocalDS_0] kubevols/disk.VMDK",
        "[LocalDS_0] kubevols/disk.VMDK",
    ),
    (
        "[LocalDS_0] kubevols/disk.Vmdk",
        "[LocalDS_0] kubevols/disk.Vmdk",
    ),
    ("[LocalDS_0] disk.vmdk", "[LocalDS_0] disk.vmdk"),
    (
        "[/DC0/datastore/LocalDS_0] a/b.vmdk",
        "[LocalDS_0] a/b.vmdk",
    ),
    (
        "[/DC0/datastore/LocalDS_0/] a/b.vmdk",
        "[LocalDS_0] a/b.vmdk",
    ),
    ("[DC0/datastore/LocalDS_0] a/b.vmdk", "[LocalDS_0] a/b.vmdk"),
    ("[ LocalDS_0 ] a/b.vmdk", "[LocalDS_0] a/b.vmdk"),
    (
        "[vsanDatastore] 5f3a-uuid/pvc 1.vmdk",
        "[vsanDatastore] 5f3a-uuid/pvc 1.vmdk",
    ),
    (
        "[shared ds] my folder/my disk.vmdk",
        "[shared ds] my folder/my disk.vmdk",
    ),
    (
        "[LocalDS_0] données/disque-é.vmdk",
        "[LocalDS_0] données/disque-é.vmdk",
    ),
    ("[LocalDS_0] 卷/磁盘.vmdk", "[LocalDS_0] 卷/磁盘.vmdk"),
    ("[LocalDS_0] a/b/c/d/e.vmdk", "[LocalDS_0] a/b/c/d/e.vmdk"),
    ("[LocalDS_0] a/b#1.vmdk", "[LocalDS_0] a/b#1.vmdk"),
    ("[LocalDS_0] a/b?x&y.vmdk", "[LocalDS_0] a/b?x&y.vmdk"),
    ("[LocalDS_0] a/b.c.vmdk", "[LocalDS_0] a/b.c.vmdk"),
    ("[LocalDS_0] a/...vmdk", "[LocalDS_0] a/...vmdk"),
    ("[LocalDS_0] a/b.vmdk/", "[LocalDS_0] a/b.vmdk"),
];

/// (input, expected error kind)
type ErrorCheck = fn(&PathError) -> bool;

fn invalid() -> Vec<(String, ErrorCheck)> {
    vec![
        ("".into(), |e| *e == PathError::Empty),
        ("   ".into(), |e| *e == PathError::Empty),
        ("kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::MissingDatastore { .. })
        }),
        ("LocalDS_0 kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::MissingDatastore { .. })
        }),
        ("[LocalDS_0 kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::UnbalancedBrackets { .. })
        }),
        ("LocalDS_0] kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::UnbalancedBrackets { .. })
        }),
        ("[[LocalDS_0]] kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::UnbalancedBrackets { .. })
        }),
        ("[LocalDS_0] kube]vols/disk.vmdk".into(), |e| {
            matches!(e, PathError::UnbalancedBrackets { .. })
        }),
        ("[LocalDS_0] kube[vols/disk.vmdk".into(), |e| {
            matches!(e, PathError::UnbalancedBrackets { .. })
        }),
        ("[] kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::EmptyDatastore { .. })
        }),
        ("[ / ] kubevols/disk.vmdk".into(), |e| {
            matches!(e, PathError::EmptyDatastore { .. })
        }),
        ("[LocalDS_0]".into(), |e| {
            matches!(e, PathError::EmptyFilePath { .. })
        }),
        ("[LocalDS_0]   ".into(), |e| {
            matches!(e, PathError::EmptyFilePath { .. })
        }),
        ("[LocalDS_0] /./".into(), |e| {
            matches!(e, PathError::EmptyFilePath { .. })
        }),
        ("[LocalDS_0] ../disk.vmdk".into(), |e| {
            matches!(e, PathError::ParentSegment { .. })
        }),
        ("[LocalDS_0] a/../disk.vmdk".into(), |e| {
            matches!(e, PathError::ParentSegment { .. })
        }),
        ("[LocalDS_0] a/b/..".into(), |e| {
            matches!(e, PathError::ParentSegment { .. })
        }),
        ("[LocalDS_0] kubevols/disk".into(), |e| {
            matches!(e, PathError::NotVmdk { .. })
        }),
        ("[LocalDS_0] kubevols/disk.vmdk.bak".into(), |e| {
            matches!(e, PathError::NotVmdk { .. })
        }),
        ("[LocalDS_0] kubevols/disk-flat.vmd".into(), |e| {
            matches!(e, PathError::NotVmdk { .. })
        }),
        ("[LocalDS_0] kubevols/.vmdk".into(), |e| {
            matches!(e, PathError::NotVmdk { .. })
        }),
        ("[LocalDS_0] vmdk".into(), |e| {
            matches!(e, PathError::NotVmdk { .. })
        }),
        ("[LocalDS_0] kubevols/disk\n.vmdk".into(), |e| {
            matches!(e, PathError::ControlCharacter { .. })
        }),
        ("[LocalDS_0] kubevols/disk\t.vmdk".into(), |e| {
            matches!(e, PathError::ControlCharacter { .. })
        }),
        ("[LocalDS_0] kubevols/disk\0.vmdk".into(), |e| {
            matches!(e, PathError::ControlCharacter { .. })
        }),
        ("[Local\u{7f}DS] disk.vmdk".into(), |e| {
            matches!(e, PathError::ControlCharacter { .. })
        }),
        (
            format!("[LocalDS_0] {}.vmdk", "a".repeat(MAX_PATH_LEN)),
            |e| matches!(e, PathError::TooLong { .. }),
        ),
    ]
}

#[test]
fn valid_table_canonicalizes() {
    for (input, canonical) in VALID {
        let path = VolumePath::parse(input).unwrap_or_else(|e| panic!("{input:?} rejected: {e}"));
        assert_eq!(path.canonical(), *canonical, "input {input:?}");
        assert_eq!(path.to_string(), *canonical);
    }
}

#[test]
fn invalid_table_gives_typed_errors() {
    for (input, expected) in invalid() {
        let err = VolumePath::parse(&input).expect_err(&input);
        assert!(expected(&err), "{input:?} gave unexpected error {err:?}");
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn table_is_large_enough() {
    assert!(VALID.len() + invalid().len() >= 40);
}

#[test]
fn parts_and_stem() {
    let p = VolumePath::parse("[/DC0/datastore/LocalDS_0] kubevols/My Disk.VMDK").unwrap();
    assert_eq!(p.datastore(), "LocalDS_0");
    assert_eq!(p.file_path(), "kubevols/My Disk.VMDK");
    assert_eq!(p.file_stem(), "My Disk");
}

#[test]
fn spellings_of_one_file_share_names() {
    let a = VolumePath::parse("[/DC0/datastore/LocalDS_0] kubevols//disk.vmdk").unwrap();
    let b = VolumePath::parse("[LocalDS_0] ./kubevols/disk.vmdk").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.object_name(), b.object_name());
    assert_eq!(a.cns_volume_name(), b.cns_volume_name());
}

#[test]
fn object_name_shape() {
    let p = VolumePath::parse("[LocalDS_0] kubevols/My_Disk (copy) é.vmdk").unwrap();
    let name = p.object_name();
    assert!(name.starts_with("my-disk-copy-"), "{name}");
    assert!(is_dns1123_label(&name), "{name}");
    let long = VolumePath::parse(&format!("[ds] {}.vmdk", "x".repeat(300))).unwrap();
    assert_eq!(long.object_name().len(), 54 + 1 + 16);
    let symbols = VolumePath::parse("[ds] ___.vmdk").unwrap();
    assert!(symbols.object_name().starts_with("volume-"));
    let cns = p.cns_volume_name();
    assert!(cns.starts_with(CNS_NAME_PREFIX));
    assert_eq!(cns.len(), CNS_NAME_PREFIX.len() + 64);
}

#[test]
fn different_files_get_different_names() {
    let a = VolumePath::parse("[ds] a/disk.vmdk").unwrap();
    let b = VolumePath::parse("[ds] b/disk.vmdk").unwrap();
    assert_ne!(a.object_name(), b.object_name());
    assert_ne!(a.cns_volume_name(), b.cns_volume_name());
}

#[test]
fn serde_round_trip_uses_the_canonical_string() {
    let p = VolumePath::parse("[/DC/datastore/ds]  x//y.vmdk").unwrap();
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(json, "\"[ds] x/y.vmdk\"");
    let back: VolumePath = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    assert!(serde_json::from_str::<VolumePath>("\"nope\"").is_err());
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_ -]{1,12}",
        "[a-zé卷 ]{1,6}",
        Just(".".to_owned()),
        Just(String::new()),
    ]
}

fn raw_path() -> impl Strategy<Value = String> {
    (
        "[ ]{0,2}",
        prop::collection::vec("[A-Za-z0-9_]{1,8}", 1..4),
        prop::bool::ANY,
        "[ ]{0,3}",
        prop::collection::vec(segment(), 0..5),
        "[a-zA-Z0-9 é_-]{1,20}",
        prop_oneof![Just(".vmdk"), Just(".VMDK"), Just(".Vmdk")],
    )
        .prop_map(|(lead, ds, inventory, gap, dirs, stem, ext)| {
            let datastore = if inventory {
                format!("/{}", ds.join("/"))
            } else {
                ds.join("_")
            };
            let mut file = dirs.join("/");
            if !file.is_empty() {
                file.push('/');
            }
            format!("{lead}[{datastore}]{gap}{file}{stem}{ext}")
        })
}

proptest! {
    #[test]
    fn canonicalization_is_idempotent(raw in raw_path()) {
        if let Ok(path) = VolumePath::parse(&raw) {
            let again = VolumePath::parse(&path.canonical()).unwrap();
            prop_assert_eq!(&again, &path);
            prop_assert_eq!(again.canonical(), path.canonical());
        }
    }

    #[test]
    fn names_are_dns1123_and_stable(raw in raw_path()) {
        if let Ok(path) = VolumePath::parse(&raw) {
            let name = path.object_name();
            prop_assert!(is_dns1123_label(&name), "{}", name);
            prop_assert_eq!(&name, &VolumePath::parse(&raw).unwrap().object_name());
            let cns = path.cns_volume_name();
            prop_assert!(cns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        }
    }

    #[test]
    fn arbitrary_text_never_panics(raw in ".{0,200}") {
        let _ = VolumePath::parse(&raw);
    }
}
