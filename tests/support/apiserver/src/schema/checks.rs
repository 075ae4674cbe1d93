//! Value validations of structural schemas: enum, bounds, lengths, patterns, composition.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use super::{Mode, Walker, json_type};
use crate::error::FieldCause;

fn num(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

fn regex_for(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(pattern.to_string())
        .or_insert_with(|| {
            let r = Regex::new(pattern);
            if r.is_err() {
                tracing::warn!(
                    pattern,
                    "ignoring a schema pattern the regex engine cannot compile"
                );
            }
            r.ok()
        })
        .clone()
}

/// Checks of strings, numbers and booleans.
pub(super) fn scalar(schema: &Value, v: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as f64;
        if let Some(max) = num(schema, "maxLength")
            && len > max
        {
            causes.push(FieldCause::too_many(
                path,
                format!("Too long: may not be more than {max} bytes"),
            ));
        }
        if let Some(min) = num(schema, "minLength")
            && len < min
        {
            causes.push(FieldCause::invalid(
                path,
                v,
                format!("{path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && let Some(re) = regex_for(p)
            && !re.is_match(s)
        {
            causes.push(FieldCause::invalid(
                path,
                v,
                format!("{path} in body should match '{p}'"),
            ));
        }
    }
    if let Some(x) = v.as_f64() {
        if let Some(min) = num(schema, "minimum") {
            let excl = flag(schema, "exclusiveMinimum");
            if (excl && x <= min) || (!excl && x < min) {
                let op = if excl {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should be {op} {min}"),
                ));
            }
        }
        if let Some(max) = num(schema, "maximum") {
            let excl = flag(schema, "exclusiveMaximum");
            if (excl && x >= max) || (!excl && x > max) {
                let op = if excl {
                    "less than"
                } else {
                    "less than or equal to"
                };
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should be {op} {max}"),
                ));
            }
        }
        if let Some(m) = num(schema, "multipleOf")
            && m > 0.0
            && (x / m).fract().abs() > f64::EPSILON
        {
            causes.push(FieldCause::invalid(
                path,
                v,
                format!("{path} in body should be a multiple of {m}"),
            ));
        }
    }
}

/// Checks of arrays.
pub(super) fn array(schema: &Value, items: &[Value], path: &str, causes: &mut Vec<FieldCause>) {
    let n = items.len() as f64;
    let shown = Value::Array(items.to_vec());
    if let Some(max) = num(schema, "maxItems")
        && n > max
    {
        causes.push(FieldCause::too_many(
            path,
            format!("Too many: {n}: must have at most {max} items"),
        ));
    }
    if let Some(min) = num(schema, "minItems")
        && n < min
    {
        causes.push(FieldCause::invalid(
            path,
            &shown,
            format!("{path} in body should have at least {min} items"),
        ));
    }
    let set = schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set");
    if flag(schema, "uniqueItems") || set {
        for (i, a) in items.iter().enumerate() {
            if items[..i].contains(a) {
                causes.push(FieldCause {
                    reason: "FieldValueDuplicate",
                    field: format!("{path}[{i}]"),
                    message: format!("Duplicate value: {a}"),
                });
            }
        }
    }
}

/// Checks of objects (property counts).
pub(super) fn object(
    schema: &Value,
    obj: &Map<String, Value>,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let n = obj.len() as f64;
    if let Some(max) = num(schema, "maxProperties")
        && n > max
    {
        causes.push(FieldCause::too_many(
            path,
            format!("Too many: {n}: must have at most {max} items"),
        ));
    }
    if let Some(min) = num(schema, "minProperties")
        && n < min
    {
        causes.push(FieldCause::invalid(
            path,
            &Value::String("object".into()),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
}

fn passes(mode: Mode<'_>, schema: &Value, value: &Value, path: &str) -> bool {
    let mut copy = value.clone();
    let mut w = Walker {
        mode,
        out: Default::default(),
    };
    w.visit(schema, &mut copy, None, path);
    w.out.causes.is_empty()
}

/// `enum`, `allOf`, `anyOf`, `oneOf` and `not`.
pub(super) fn composition(w: &mut Walker<'_>, schema: &Value, value: &Value, path: &str) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        w.out
            .causes
            .push(FieldCause::unsupported(path, value, allowed));
    }
    let mode = w.mode;
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            if s.get("$ref").is_none() && !passes(mode, s, value, path) {
                let mut copy = value.clone();
                let mut sub = Walker {
                    mode,
                    out: Default::default(),
                };
                sub.visit(s, &mut copy, None, path);
                w.out.causes.extend(sub.out.causes);
            }
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| passes(mode, s, value, path))
    {
        w.out.causes.push(FieldCause::invalid(
            path,
            &Value::String(json_type(value).into()),
            format!("{path} in body must match at least one schema in anyOf"),
        ));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let n = one.iter().filter(|s| passes(mode, s, value, path)).count();
        if n != 1 {
            w.out.causes.push(FieldCause::invalid(
                path,
                &Value::String(json_type(value).into()),
                format!("{path} in body must match exactly one schema in oneOf"),
            ));
        }
    }
    if let Some(not) = schema.get("not")
        && passes(mode, not, value, path)
    {
        w.out.causes.push(FieldCause::invalid(
            path,
            &Value::String(json_type(value).into()),
            format!("{path} in body should not be valid against the schema in \"not\""),
        ));
    }
}
