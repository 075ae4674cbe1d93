//! `x-kubernetes-validations` (CEL rules). Only the immutability rule `self == oldSelf` is
//! evaluated; any other rule is logged once and ignored.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use super::json_type;
use crate::error::FieldCause;

fn normalized(rule: &str) -> String {
    rule.chars().filter(|c| !c.is_whitespace()).collect()
}

fn log_unsupported_once(rule: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.insert(rule.to_string()) {
        tracing::info!(
            rule,
            "x-kubernetes-validations rule not supported by the test server; ignored"
        );
    }
}

/// Evaluates the rules on `schema` for `value` (with `old`, the previous value at the same
/// path, for transition rules).
pub(super) fn check(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for r in rules {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else {
            continue;
        };
        let n = normalized(rule);
        let holds = match n.as_str() {
            "self==oldSelf" | "oldSelf==self" => old.is_none_or(|o| o == value),
            "true" => true,
            _ => {
                log_unsupported_once(rule);
                true
            }
        };
        if holds {
            continue;
        }
        let message = r
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("failed rule: {rule}"), str::to_string);
        let field = match r.get("fieldPath").and_then(Value::as_str) {
            Some(fp) => format!("{path}{fp}"),
            None => path.to_string(),
        };
        let shown = Value::String(json_type(value).to_string());
        causes.push(FieldCause::invalid(&field, &shown, message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "volumePath is immutable"}
        ]})
    }

    #[test]
    fn immutability_holds_on_create_and_equal_update() {
        let mut causes = Vec::new();
        check(&schema(), &json!("a"), None, "spec.volumePath", &mut causes);
        check(
            &schema(),
            &json!("a"),
            Some(&json!("a")),
            "spec.volumePath",
            &mut causes,
        );
        assert!(causes.is_empty());
    }

    #[test]
    fn immutability_fails_on_change() {
        let mut causes = Vec::new();
        check(
            &schema(),
            &json!("b"),
            Some(&json!("a")),
            "spec.volumePath",
            &mut causes,
        );
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.volumePath");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"string\": volumePath is immutable"
        );
    }

    #[test]
    fn other_rules_are_ignored() {
        let s = json!({"x-kubernetes-validations": [{"rule": "self.size() > 3"}]});
        let mut causes = Vec::new();
        check(&s, &json!("ab"), None, "x", &mut causes);
        assert!(causes.is_empty());
    }
}
