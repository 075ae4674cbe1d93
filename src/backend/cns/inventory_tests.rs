//! Inventory parsing and datacenter/datastore selection from a fixture with a datacenter
//! inside a folder and a datastore name that exists in two datacenters.

use super::*;

const NESTED: &str = include_str!("fixtures/inventory_nested.xml");

fn datacenters() -> Vec<Datacenter> {
    let parsed: Returnval<RetrieveResult<SimpleValue>> =
        crate::backend::cns::soap::parse_response(NESTED).unwrap();
    let result = parsed.returnval.unwrap();
    assert_eq!(result.token.as_deref(), Some("page-2"));
    build_tree(&MoRef::new("Folder", "group-d1"), result.objects)
}

fn filters(raw: &[&str]) -> Vec<DatacenterFilter> {
    normalize_filters(&raw.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
}

#[test]
fn datacenters_in_folders_are_found_with_their_paths() {
    let dcs = datacenters();
    let summary: Vec<(&str, &str, Vec<&str>)> = dcs
        .iter()
        .map(|dc| {
            (
                dc.name.as_str(),
                dc.path.as_str(),
                dc.datastores.iter().map(|(n, _)| n.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("DC0", "DC0", vec!["LocalDS_0", "only in DC0"]),
            ("DC1", "F0/DC1", vec!["LocalDS_0", "data & store #1"]),
        ]
    );
    assert_eq!(dcs[1].moref, MoRef::new("Datacenter", "datacenter-4"));
}

#[test]
fn all_datacenters_make_a_shared_name_ambiguous() {
    let snapshot = Snapshot {
        by_name: index(&datacenters(), &[]),
        generation: 1,
    };
    let err = lookup(&snapshot, "LocalDS_0", "op").unwrap().unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert_eq!(err.fault, names::AMBIGUOUS_DATASTORE);
    assert!(err.message.contains("DC0, F0/DC1"), "{err}");
    let unique = lookup(&snapshot, "data & store #1", "op").unwrap().unwrap();
    assert_eq!(unique.datacenter_path, "F0/DC1");
    assert_eq!(unique.datastore, MoRef::new("Datastore", "datastore-22"));
    assert!(lookup(&snapshot, "nowhere", "op").is_none());
}

#[test]
fn a_datacenter_filter_by_path_or_name_selects_it() {
    let dcs = datacenters();
    for raw in ["/F0/DC1", "F0/DC1", "DC1", " /F0/DC1/ "] {
        let selected = filters(&[raw]);
        assert!(unmatched_filters(&dcs, &selected).is_empty(), "{raw}");
        let snapshot = Snapshot {
            by_name: index(&dcs, &selected),
            generation: 1,
        };
        let found = lookup(&snapshot, "LocalDS_0", "op").unwrap().unwrap();
        assert_eq!(
            found.datacenter,
            MoRef::new("Datacenter", "datacenter-4"),
            "{raw}"
        );
        assert_eq!(found.datacenter_path, "F0/DC1");
        assert!(lookup(&snapshot, "only in DC0", "op").is_none(), "{raw}");
    }
    let snapshot = Snapshot {
        by_name: index(&dcs, &filters(&["DC0"])),
        generation: 1,
    };
    let found = lookup(&snapshot, "LocalDS_0", "op").unwrap().unwrap();
    assert_eq!(found.datacenter_path, "DC0");
}

#[test]
fn unknown_datacenters_are_reported() {
    let dcs = datacenters();
    assert_eq!(
        unmatched_filters(&dcs, &filters(&["DC0", "DC9", "F1/DC1", "/DC1"])),
        vec!["DC9".to_owned(), "/F1/DC1".to_owned(), "/DC1".to_owned()],
        "a path must match the whole inventory path"
    );
    assert!(filters(&["", " / "]).is_empty());
}

#[test]
fn the_inventory_spec_traverses_folders_and_datacenter_datastores() {
    let spec = inventory_spec(&MoRef::new("Folder", "group-d1"));
    let xml = crate::backend::cns::soap::method_xml(
        "RetrievePropertiesEx",
        crate::backend::cns::soap::VIM_NS,
        &RetrievePropertiesEx {
            this: &MoRef::new("PropertyCollector", "propertyCollector"),
            spec_set: spec,
            options: RetrieveOptions { max_objects: None },
        },
    )
    .unwrap();
    assert!(
        xml.contains(
            "<objectSet><obj type=\"Folder\">group-d1</obj><skip>false</skip>\
             <selectSet xsi:type=\"TraversalSpec\"><name>folders</name><type>Folder</type>\
             <path>childEntity</path><skip>false</skip><selectSet><name>folders</name>\
             </selectSet><selectSet><name>datastores</name></selectSet></selectSet>"
        ),
        "{xml}"
    );
    assert!(xml.contains("<propSet><type>Datacenter</type><all>false</all><pathSet>name</pathSet><pathSet>datastore</pathSet></propSet>"), "{xml}");
}
