//! The compact form gives back exactly what `strip_for_cache` leaves, for every shape of
//! object: generated ones (every optional field present or not, identifiers that are and
//! are not UUIDs or numbers) and the edge cases named below.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::k8s::migrations::strip_for_cache;

fn round_trip(vm: &VolumeMigration) {
    let mut stripped = vm.clone();
    strip_for_cache(&mut stripped);
    let name = stripped.metadata.name.clone().unwrap_or_default();
    let compact = CompactMigration::new(vm);
    let back = compact.to_object(&name);
    assert_eq!(back.metadata, stripped.metadata);
    assert_eq!(
        serde_json::to_value(&back.spec).unwrap(),
        serde_json::to_value(&stripped.spec).unwrap()
    );
    assert_eq!(back.status, stripped.status);
    assert_eq!(
        compact.record(&name),
        crate::controller::full_sync::record(&stripped)
    );
}

fn object(value: Value) -> VolumeMigration {
    serde_json::from_value(value).unwrap()
}

#[test]
fn identifiers_are_kept_compact_only_when_they_spell_back_exactly() {
    for (text, compact) in [
        ("0a1b2c3d-0000-4000-8000-00000000000f", true),
        ("0A1B2C3D-0000-4000-8000-00000000000F", false),
        ("0a1b2c3d00004000800000000000000f", false),
        ("0a1b2c3d-0000-4000-8000-00000000000", false),
        ("0a1b2c3d_0000-4000-8000-00000000000f", false),
        ("12345", true),
        ("0", true),
        ("007", false),
        ("+7", false),
        ("18446744073709551616", false),
        ("", false),
        ("6000C298-e5a8-4c4e-9fd3-0d2b2a7b1c1e", false),
    ] {
        let token = Token::new(text);
        assert_eq!(token.to_string(), text);
        assert_eq!(!matches!(token, Token::Text(_)), compact, "{text}");
    }
}

#[test]
fn a_registered_object_needs_no_out_of_line_part() {
    let vm = object(json!({
        "metadata": {"name": "a-1", "uid": "0a1b2c3d-0000-4000-8000-00000000000f",
            "resourceVersion": "17", "generation": 1, "finalizers": [FINALIZER],
            "labels": {"app.kubernetes.io/managed-by": "volmig"}},
        "spec": {"volumePath": "[ds] a.vmdk"},
        "status": {"phase": "Registered", "volumeID": "0a1b2c3d-0000-4000-8000-000000000001",
            "persistentVolumes": ["pv-a"], "persistentVolumeCount": 1, "attempts": 1,
            "registeredTime": "2025-01-01T00:00:00Z", "protectedFromVmDelete": true,
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Registered",
                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
    }));
    let compact = CompactMigration::new(&vm);
    assert!(compact.rare.is_none(), "{compact:?}");
    assert!(matches!(compact.uid, Some(Token::Uuid(_))));
    assert!(matches!(compact.resource_version, Some(Token::Number(17))));
    round_trip(&vm);
}

#[test]
fn edge_cases_round_trip() {
    for value in [
        // No status at all, no finalizers.
        json!({"metadata": {"name": "a"}, "spec": {"volumePath": "x"}}),
        // A status that holds only conditions (dropped): an empty status stays present.
        json!({"metadata": {"name": "a"}, "spec": {"volumePath": "x"},
            "status": {"conditions": []}}),
        json!({"metadata": {"name": "a"}, "spec": {"volumePath": "x"}, "status": {}}),
        // Finalizers present but empty, someone else's, ours twice, ours among others.
        json!({"metadata": {"name": "a", "finalizers": []}, "spec": {"volumePath": "x"}}),
        json!({"metadata": {"name": "a", "finalizers": ["other"]}, "spec": {"volumePath": "x"}}),
        json!({"metadata": {"name": "a", "finalizers": [FINALIZER, FINALIZER]},
            "spec": {"volumePath": "x"}}),
        json!({"metadata": {"name": "a", "finalizers": ["other", FINALIZER]},
            "spec": {"volumePath": "x"}}),
        // Being deleted, with a namespace (never for this cluster-scoped kind, but kept).
        json!({"metadata": {"name": "a", "namespace": "ns", "finalizers": [FINALIZER],
            "deletionTimestamp": "2025-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0},
            "spec": {"volumePath": "x", "storagePolicyName": "gold"}}),
        // Failed with everything the registrar writes on the way.
        json!({"metadata": {"name": "a", "resourceVersion": "007", "uid": "not-a-uuid"},
            "spec": {"volumePath": "x"},
            "status": {"phase": "Failed", "attempts": 3, "registeringToken": "t",
                "lastError": {"reason": "DiskNotFound", "message": "m",
                    "time": "2025-01-01T00:00:00Z"},
                "nextRetryTime": "2025-01-01T00:01:00Z",
                "duplicateVolumeIDs": ["b", "a"], "persistentVolumes": []}}),
    ] {
        round_trip(&object(value));
    }
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop::option::of(s).boxed()
}

fn identifier() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 16]>().prop_map(|b| Token::Uuid(b).to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[0-9a-fA-F-]{0,40}",
        "\\PC{0,12}",
    ]
}

fn time() -> impl Strategy<Value = String> {
    (0_i64..4_000_000_000).prop_map(|s| {
        jiff::Timestamp::from_second(s)
            .map(|t| t.to_string())
            .unwrap_or_default()
    })
}

fn phase() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("Pending"),
        Just("Registering"),
        Just("Registered"),
        Just("Failed"),
        Just("Unregistering"),
    ]
}

fn finalizers() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![Just(FINALIZER.to_owned()), "[a-z./]{1,12}"],
        0..3,
    )
}

/// Inserts `key: value` into `map` when `value` is present.
fn put(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

fn migration() -> impl Strategy<Value = VolumeMigration> {
    let meta = (
        opt(identifier()),
        opt(identifier()),
        opt(prop_oneof![0_i64..5, any::<i64>()]),
        opt(finalizers()),
        opt(time()),
        opt(0_i64..100),
        opt("[a-z]{1,5}"),
    );
    let status = opt((
        opt(phase()),
        opt(identifier()),
        opt(identifier()),
        opt(prop::collection::vec("[a-z0-9-]{1,20}", 0..3)),
        opt(prop_oneof![0_u64..5, any::<u64>()]),
        opt(prop_oneof![0_u32..5, any::<u32>()]),
        opt(time()),
        opt(any::<bool>()),
        opt(prop_oneof![0_i64..5, any::<i64>()]),
        (
            opt(("[A-Za-z]{1,10}", "\\PC{0,10}", time())),
            opt(time()),
            opt(prop::collection::vec(identifier(), 0..3)),
            opt("[a-z0-9-]{1,10}"),
            any::<bool>(),
        ),
    ));
    (meta, status, "\\PC{0,30}", opt("[a-z]{1,8}")).prop_map(
        |((uid, rv, generation, fins, deleted, grace, ns), status, path, policy)| {
            let mut metadata = serde_json::Map::new();
            metadata.insert("name".into(), json!("a-1"));
            put(&mut metadata, "uid", uid.map(Value::from));
            put(&mut metadata, "resourceVersion", rv.map(Value::from));
            put(&mut metadata, "generation", generation.map(Value::from));
            put(&mut metadata, "finalizers", fins.map(Value::from));
            put(&mut metadata, "deletionTimestamp", deleted.map(Value::from));
            put(
                &mut metadata,
                "deletionGracePeriodSeconds",
                grace.map(Value::from),
            );
            put(&mut metadata, "namespace", ns.map(Value::from));
            metadata.insert("labels".into(), json!({"k": "v"}));
            let mut spec = serde_json::Map::new();
            spec.insert("volumePath".into(), json!(path));
            put(&mut spec, "storagePolicyName", policy.map(Value::from));
            let mut value = json!({"metadata": metadata, "spec": spec});
            if let Some((phase, id, disk, pvs, count, attempts, registered, protected, og, more)) =
                status
            {
                let (last_error, next_retry, duplicates, token, conditions) = more;
                let mut s = serde_json::Map::new();
                put(&mut s, "phase", phase.map(Value::from));
                put(&mut s, "volumeID", id.map(Value::from));
                put(&mut s, "diskUUID", disk.map(Value::from));
                put(&mut s, "persistentVolumes", pvs.map(Value::from));
                put(&mut s, "persistentVolumeCount", count.map(Value::from));
                put(&mut s, "attempts", attempts.map(Value::from));
                put(&mut s, "registeredTime", registered.map(Value::from));
                put(&mut s, "protectedFromVmDelete", protected.map(Value::from));
                put(&mut s, "observedGeneration", og.map(Value::from));
                put(
                    &mut s,
                    "lastError",
                    last_error.map(|(r, m, t)| json!({"reason": r, "message": m, "time": t})),
                );
                put(&mut s, "nextRetryTime", next_retry.map(Value::from));
                put(&mut s, "duplicateVolumeIDs", duplicates.map(Value::from));
                put(&mut s, "registeringToken", token.map(Value::from));
                if conditions {
                    s.insert("conditions".into(), json!([]));
                }
                value["status"] = Value::Object(s);
            }
            object(value)
        },
    )
}

proptest! {
    #[test]
    fn every_generated_object_round_trips(vm in migration()) {
        round_trip(&vm);
    }
}
