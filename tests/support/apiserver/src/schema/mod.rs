//! Structural-schema validation, pruning and defaulting, as kube-apiserver applies to writes.
//!
//! One walker serves both custom resources (the CRD's `openAPIV3Schema`, with required fields,
//! enums, bounds, patterns, defaults and `x-kubernetes-validations`) and built-ins (the
//! k8s-openapi schemas, used for unknown-field pruning and type checks).

pub mod builtin;
mod checks;
mod rules;

use serde_json::{Map, Value};

use crate::error::FieldCause;

/// What to do with fields the schema does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// Drop them silently or with a warning (kube-apiserver's default).
    Prune,
    /// Drop them and report them as errors (`fieldValidation=Strict`).
    Reject,
}

/// Options of one validation run.
#[derive(Debug, Clone, Copy)]
pub struct Mode<'a> {
    /// `$ref` targets (`#/components/schemas/<name>`).
    pub defs: &'a Map<String, Value>,
    /// Whether this is a custom resource (required/defaults/rules apply).
    pub custom: bool,
}

/// The result of validating one object.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Field errors (422).
    pub causes: Vec<FieldCause>,
    /// Paths of fields the schema does not know (pruned).
    pub unknown: Vec<String>,
}

struct Walker<'a> {
    mode: Mode<'a>,
    out: Outcome,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Validates, prunes and defaults `value` in place against `schema`.
///
/// `old` is the previous version of the object (for transition rules); `skip_root` names root
/// fields that are not checked (e.g. `metadata`, checked separately).
pub fn validate(
    mode: Mode<'_>,
    schema: &Value,
    value: &mut Value,
    old: Option<&Value>,
    skip_root: &[&str],
) -> Outcome {
    let mut w = Walker {
        mode,
        out: Outcome::default(),
    };
    w.visit_root(schema, value, old, skip_root);
    w.out
}

impl<'a> Walker<'a> {
    /// Follows `$ref` (also wrapped as a single `allOf`) to the schema it names.
    fn resolve<'s>(&self, schema: &'s Value) -> &'s Value
    where
        'a: 's,
    {
        let mut cur = schema;
        for _ in 0..8 {
            let target = if let Some(r) = cur.get("$ref").and_then(Value::as_str) {
                Some(r)
            } else if cur.get("type").is_none() && cur.get("properties").is_none() {
                cur.get("allOf")
                    .and_then(Value::as_array)
                    .filter(|a| a.len() == 1)
                    .and_then(|a| a[0].get("$ref"))
                    .and_then(Value::as_str)
            } else {
                None
            };
            let Some(r) = target else { return cur };
            let name = r.rsplit('/').next().unwrap_or(r);
            match self.mode.defs.get(name) {
                Some(next) => cur = next,
                None => return cur,
            }
        }
        cur
    }

    fn visit_root(
        &mut self,
        schema: &Value,
        value: &mut Value,
        old: Option<&Value>,
        skip: &[&str],
    ) {
        let schema = self.resolve(schema);
        let Some(obj) = value.as_object_mut() else {
            self.out
                .causes
                .push(FieldCause::invalid("", value, "must be an object"));
            return;
        };
        let props = schema.get("properties").and_then(Value::as_object);
        let keys: Vec<String> = obj.keys().cloned().collect();
        for key in keys {
            if skip.contains(&key.as_str()) || key == "apiVersion" || key == "kind" {
                continue;
            }
            self.visit_property(schema, props, obj, &key, old, "");
        }
        self.object_checks(schema, obj, old, "");
    }

    fn visit_property(
        &mut self,
        schema: &Value,
        props: Option<&Map<String, Value>>,
        obj: &mut Map<String, Value>,
        key: &str,
        old: Option<&Value>,
        path: &str,
    ) {
        let child_path = join(path, key);
        let old_child = old.and_then(|o| o.get(key));
        let declared = props.and_then(|p| p.get(key));
        let additional = schema.get("additionalProperties");
        let sub = match (declared, additional) {
            (Some(s), _) => Some(s),
            (None, Some(a)) if a.is_object() => Some(a),
            _ => None,
        };
        let Some(sub) = sub else {
            let preserve = schema.get("x-kubernetes-preserve-unknown-fields")
                == Some(&Value::Bool(true))
                || additional == Some(&Value::Bool(true))
                || (!self.mode.custom && props.is_none());
            if !preserve {
                self.out.unknown.push(child_path);
                obj.remove(key);
            }
            return;
        };
        let sub = self.resolve(sub);
        if obj.get(key) == Some(&Value::Null) && sub.get("nullable") != Some(&Value::Bool(true)) {
            obj.remove(key);
            return;
        }
        if let Some(v) = obj.get_mut(key) {
            self.visit(sub, v, old_child, &child_path);
        }
    }

    fn visit(&mut self, schema: &Value, value: &mut Value, old: Option<&Value>, path: &str) {
        let schema = self.resolve(schema);
        if value.is_null() {
            if schema.get("nullable") != Some(&Value::Bool(true)) {
                self.out.causes.push(FieldCause::invalid(
                    path,
                    value,
                    format!("{path} in body must not be null"),
                ));
            }
            return;
        }
        if !self.type_ok(schema, value, path) {
            return;
        }
        match &mut *value {
            Value::Object(obj) => {
                let embedded =
                    schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
                let props = schema.get("properties").and_then(Value::as_object);
                let keys: Vec<String> = obj.keys().cloned().collect();
                for key in keys {
                    if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    self.visit_property(schema, props, obj, &key, old, path);
                }
                self.object_checks(schema, obj, old, path);
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter_mut().enumerate() {
                        let p = format!("{path}[{i}]");
                        self.visit(item_schema, item, None, &p);
                    }
                }
                if self.mode.custom {
                    checks::array(schema, items, path, &mut self.out.causes);
                }
            }
            _ => {
                if self.mode.custom {
                    checks::scalar(schema, value, path, &mut self.out.causes);
                }
            }
        }
        if self.mode.custom {
            checks::composition(self, schema, value, path);
            rules::check(schema, value, old, path, &mut self.out.causes);
        }
    }

    fn object_checks(
        &mut self,
        schema: &Value,
        obj: &mut Map<String, Value>,
        old: Option<&Value>,
        path: &str,
    ) {
        if !self.mode.custom {
            return;
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                if obj.contains_key(k) {
                    continue;
                }
                if let Some(d) = self.resolve(sub).get("default") {
                    let mut d = d.clone();
                    let old_child = old.and_then(|o| o.get(k));
                    self.visit(sub, &mut d, old_child, &join(path, k));
                    obj.insert(k.clone(), d);
                }
            }
        }
        for req in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(r) = req.as_str()
                && !obj.contains_key(r)
            {
                self.out.causes.push(FieldCause::required(&join(path, r)));
            }
        }
        checks::object(schema, obj, path, &mut self.out.causes);
    }

    fn type_ok(&mut self, schema: &Value, value: &Value, path: &str) -> bool {
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            if value.is_string() || value.is_i64() || value.is_u64() {
                return true;
            }
            self.type_error(path, value, "integer or string");
            return false;
        }
        let Some(t) = schema.get("type").and_then(Value::as_str) else {
            return true;
        };
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !ok {
            self.type_error(path, value, t);
        }
        ok
    }

    fn type_error(&mut self, path: &str, value: &Value, want: &str) {
        let got = json_type(value);
        let shown = Value::String(got.to_string());
        self.out.causes.push(FieldCause::invalid(
            path,
            &shown,
            format!("{path} in body must be of type {want}: {got:?}"),
        ));
    }
}

/// The JSON type name of a value as the apiserver words it.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests;
