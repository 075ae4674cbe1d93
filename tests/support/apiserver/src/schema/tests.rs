use serde_json::{Map, Value, json};

use super::*;

fn crd_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["volumePath"],
                "properties": {
                    "volumePath": {"type": "string", "minLength": 3,
                        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "volumePath is immutable"}]},
                    "policy": {"type": "string", "enum": ["a", "b"], "default": "a"},
                    "count": {"type": "integer", "minimum": 1, "maximum": 5},
                    "name": {"type": "string", "pattern": "^[a-z]+$"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "maybe": {"type": "string", "nullable": true}
                }
            },
            "status": {"type": "object", "properties": {"attempts": {"type": "integer"}}}
        }
    })
}

fn run(obj: &mut Value, old: Option<&Value>) -> Outcome {
    let defs = Map::new();
    validate(
        Mode {
            defs: &defs,
            custom: true,
        },
        &crd_schema(),
        obj,
        old,
        &["metadata"],
    )
}

#[test]
fn unknown_fields_are_pruned_and_reported() {
    let mut o =
        json!({"spec": {"volumePath": "abc", "bogus": 1, "free": {"x": {"y": 1}}}, "extra": true});
    let out = run(&mut o, None);
    assert!(out.causes.is_empty(), "{:?}", out.causes);
    assert_eq!(
        out.unknown,
        vec!["extra".to_string(), "spec.bogus".to_string()]
    );
    assert_eq!(
        o,
        json!({"spec": {"volumePath": "abc", "free": {"x": {"y": 1}}, "policy": "a"}})
    );
}

#[test]
fn required_enum_bounds_and_pattern_are_enforced() {
    let mut o = json!({"spec": {"policy": "c", "count": 9, "name": "AB", "labels": {"k": 1}}});
    let out = run(&mut o, None);
    let fields: Vec<&str> = out.causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.count",
            "spec.labels.k",
            "spec.name",
            "spec.policy",
            "spec.volumePath"
        ],
        "{:?}",
        out.causes
    );
    assert!(out.causes[0].message.contains("less than or equal to 5"));
    assert_eq!(out.causes[4].reason, "FieldValueRequired");
}

#[test]
fn type_errors_name_the_field() {
    let mut o = json!({"spec": {"volumePath": "abc"}, "status": {"attempts": "three"}});
    let out = run(&mut o, None);
    assert_eq!(out.causes.len(), 1);
    assert_eq!(out.causes[0].field, "status.attempts");
    assert!(out.causes[0].message.contains("must be of type integer"));
}

#[test]
fn nulls_are_dropped_unless_nullable() {
    let mut o = json!({"spec": {"volumePath": "abc", "count": null, "maybe": null}});
    let out = run(&mut o, None);
    assert!(out.causes.is_empty());
    assert_eq!(o["spec"].get("count"), None);
    assert_eq!(o["spec"]["maybe"], Value::Null);
}

#[test]
fn immutability_rule_uses_the_old_object() {
    let old = json!({"spec": {"volumePath": "abc"}});
    let mut same = json!({"spec": {"volumePath": "abc"}});
    assert!(run(&mut same, Some(&old)).causes.is_empty());
    let mut changed = json!({"spec": {"volumePath": "xyz"}});
    let out = run(&mut changed, Some(&old));
    assert_eq!(out.causes.len(), 1);
    assert_eq!(out.causes[0].field, "spec.volumePath");
}

#[test]
fn builtin_schemas_prune_unknown_fields_and_keep_vsphere_volumes() {
    let defs = builtin::definitions();
    let schema = builtin::reference("io.k8s.api.core.v1.PersistentVolume");
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv1", "labels": {"a": "b"}, "junk": 1},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "vsphereVolume": {"volumePath": "[ds] a/b.vmdk", "fsType": "ext4"},
            "nonsense": true
        }
    });
    let out = validate(
        Mode {
            defs,
            custom: false,
        },
        &schema,
        &mut pv,
        None,
        &[],
    );
    assert!(out.causes.is_empty(), "{:?}", out.causes);
    assert_eq!(
        out.unknown,
        vec!["metadata.junk".to_string(), "spec.nonsense".to_string()]
    );
    assert_eq!(pv["spec"]["vsphereVolume"]["volumePath"], "[ds] a/b.vmdk");
    assert_eq!(pv["metadata"]["labels"]["a"], "b");
}
