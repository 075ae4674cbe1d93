use super::*;

const PATH_A: &str = "[LocalDS_0] kubevols/a.vmdk";
const PATH_B: &str = "[LocalDS_0] kubevols/b.vmdk";

fn read(publish: bool) -> Inputs {
    Inputs {
        persistent_volumes: 3,
        paths: 2,
        volume_migrations: 1,
        cns_volumes: 1,
        publish,
    }
}

/// Decided in the order a pass decides (reconcile before full sync before publish), so
/// printing must regroup them.
fn mixed() -> Plan {
    let mut plan = Plan {
        read: read(true),
        actions: Vec::new(),
    };
    plan.add(
        Action::new(
            Group::Repair,
            "reconcile",
            "set_pvs",
            "a-1",
            Some(PATH_A.into()),
        )
        .with_detail("PVs: pv-a"),
    );
    plan.add(
        Action::new(
            Group::Register,
            "full_sync",
            "create_migration",
            "b-2",
            Some(PATH_B.into()),
        )
        .with_detail("PVs: pv-b,pv-c"),
    );
    plan.add(Action::new(
        Group::Note,
        "full_sync",
        "orphan",
        "vol-9",
        None,
    ));
    plan.add(
        Action::new(
            Group::Publish,
            "publish",
            "create_object",
            "obj-a",
            Some(PATH_A.into()),
        )
        .with_detail("volume v-1"),
    );
    plan
}

#[test]
fn an_empty_plan_has_nothing_to_do_and_exits_0() {
    let plan = Plan {
        read: read(false),
        actions: Vec::new(),
    };
    assert!(plan.nothing_to_do());
    let rendered = render(&plan, Format::Table);
    assert_eq!(rendered.exit_code(), crate::report::EXIT_READY);
    assert_eq!(rendered.stderr, None);
    assert!(
        rendered.stdout.contains("No actions."),
        "{}",
        rendered.stdout
    );
    assert!(
        rendered
            .stdout
            .ends_with("\nNOTHING TO DO: all 3 in-tree vSphere PVs are Registered\n"),
        "{}",
        rendered.stdout
    );
    let published = Plan {
        read: read(true),
        actions: Vec::new(),
    };
    assert_eq!(
        verdict(&published),
        "NOTHING TO DO: all 3 in-tree vSphere PVs are Registered and published to the vSphere \
         CSI driver"
    );
}

#[test]
fn the_table_groups_actions_one_line_each_and_exits_1() {
    let plan = mixed();
    let rendered = render(&plan, Format::Table);
    assert_eq!(rendered.exit_code(), crate::report::EXIT_NOT_READY);
    let lines: Vec<&str> = rendered.stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("WOULD "))
        .unwrap_or_else(|| panic!("no header: {}", rendered.stdout));
    let rows: Vec<Vec<&str>> = lines[header + 1..header + 5]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let firsts: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(firsts, ["register", "repair", "publish", "note"]);
    assert_eq!(
        rows[0][..4],
        [
            "register",
            "full_sync/create_migration",
            "b-2",
            "[LocalDS_0]"
        ]
    );
    assert!(lines[header + 1].contains(PATH_B), "{}", lines[header + 1]);
    assert!(lines[header + 1].ends_with("PVs: pv-b,pv-c"));
    assert_eq!(
        lines[header + 4].split_whitespace().collect::<Vec<_>>(),
        ["note", "full_sync/orphan", "vol-9", "-"],
        "no trailing blanks without detail"
    );
    assert_eq!(
        lines.last().copied(),
        Some("WOULD ACT: 3 actions (register 1, repair 1, publish 1)")
    );
    assert!(
        lines[0].starts_with("Dry run, one pass: 3 in-tree vSphere PVs (2 paths)"),
        "{}",
        lines[0]
    );
}

#[test]
fn notes_alone_change_nothing() {
    let mut plan = Plan {
        read: read(false),
        actions: Vec::new(),
    };
    plan.add(Action::new(
        Group::Note,
        "full_sync",
        "orphan",
        "vol-9",
        None,
    ));
    assert!(plan.nothing_to_do());
    assert_eq!(render(&plan, Format::Table).exit_code(), 0);
    assert_eq!(plan.counts().get(&("full_sync", "orphan")), Some(&1));
}

#[test]
fn counts_are_the_dry_run_metric_samples() {
    let mut plan = mixed();
    plan.add(Action::new(
        Group::Register,
        "full_sync",
        "create_migration",
        "c-3",
        None,
    ));
    let counts = plan.counts();
    assert_eq!(counts.get(&("full_sync", "create_migration")), Some(&2));
    assert_eq!(counts.get(&("reconcile", "set_pvs")), Some(&1));
    assert_eq!(counts.values().sum::<usize>(), plan.actions.len());
    assert_eq!(plan.changes(), 4);
}

#[test]
fn json_carries_the_plan_and_the_verdict_goes_to_stderr() {
    let rendered = render(&mixed(), Format::Json);
    let value: serde_json::Value = serde_json::from_str(&rendered.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", rendered.stdout));
    assert_eq!(value["nothingToDo"], false);
    assert_eq!(value["read"]["persistentVolumes"], 3);
    assert_eq!(value["read"]["publish"], true);
    assert_eq!(value["totals"]["register"], 1);
    assert_eq!(value["totals"]["note"], 1);
    let actions = value["actions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    assert_eq!(actions.len(), 4);
    assert_eq!(actions[0]["group"], "register");
    assert_eq!(actions[0]["source"], "full_sync");
    assert_eq!(actions[0]["action"], "create_migration");
    assert_eq!(actions[0]["object"], "b-2");
    assert_eq!(actions[0]["path"], PATH_B);
    assert_eq!(actions[3]["path"], serde_json::Value::Null);
    assert_eq!(
        rendered.stderr.as_deref(),
        Some("WOULD ACT: 3 actions (register 1, repair 1, publish 1)")
    );
    assert_eq!(rendered.exit_code(), 1);
}

#[test]
fn csv_has_one_record_per_action() {
    let rendered = render(&mixed(), Format::Csv);
    let records: Vec<&str> = rendered.stdout.split("\r\n").collect();
    assert_eq!(records[0], CSV_HEADERS.join(","));
    assert_eq!(
        records[1],
        "register,full_sync,create_migration,b-2,[LocalDS_0] kubevols/b.vmdk,\"PVs: pv-b,pv-c\""
    );
    assert_eq!(records.len(), 6, "header, 4 records, empty tail");
    assert!(rendered.stderr.is_some());
}

#[test]
fn one_action_is_singular() {
    let mut plan = Plan::default();
    plan.add(Action::new(
        Group::Unregister,
        "reconcile",
        "unregister_and_finalize",
        "a",
        None,
    ));
    assert_eq!(verdict(&plan), "WOULD ACT: 1 action (unregister 1)");
}
