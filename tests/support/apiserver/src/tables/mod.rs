//! `meta.k8s.io/v1` Table responses (what `kubectl get` asks for): CRD printer columns,
//! default columns for built-ins.

mod age;
mod jsonpath;

use serde_json::{Map, Value, json};

pub use age::{age_of, human_duration};
pub use jsonpath::JsonPath;

use crate::registry::{BuiltinColumn, ColumnSource, PrinterColumn, ResourceDef};

/// What each row carries as `object` (`includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// A `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter.
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

#[derive(Debug, Clone)]
enum Column {
    Name,
    Custom(PrinterColumn, Option<JsonPath>),
    Builtin(BuiltinColumn),
    Age,
}

/// The columns of one resource version, ready to render rows.
#[derive(Debug, Clone)]
pub struct Columns {
    cols: Vec<Column>,
    now: i64,
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.";

impl Columns {
    /// The columns for `def` at `version`.
    pub fn for_resource(def: &ResourceDef, version: &str) -> Self {
        let mut cols = vec![Column::Name];
        if let Some(b) = &def.builtin {
            cols.extend(b.columns.iter().copied().map(Column::Builtin));
            cols.push(Column::Age);
        } else {
            let custom = def
                .version(version)
                .map(|v| v.columns.clone())
                .unwrap_or_default();
            if custom.is_empty() {
                cols.push(Column::Age);
            }
            for c in custom {
                let path = JsonPath::parse(&c.json_path);
                if path.is_none() {
                    tracing::info!(path = %c.json_path, "printer column JSONPath outside the supported subset");
                }
                cols.push(Column::Custom(c, path));
            }
        }
        Columns {
            cols,
            now: jiff::Timestamp::now().as_second(),
        }
    }

    /// `columnDefinitions`.
    pub fn definitions(&self) -> Value {
        let def = |name: &str, type_: &str, format: &str, desc: &str, priority: i64| json!({"name": name, "type": type_, "format": format, "description": desc, "priority": priority});
        Value::Array(
            self.cols
                .iter()
                .map(|c| match c {
                    Column::Name => def("Name", "string", "name", NAME_DESC, 0),
                    Column::Age => def("Age", "string", "", AGE_DESC, 0),
                    Column::Builtin(b) => def(b.name, b.type_, "", "", 0),
                    Column::Custom(p, _) => {
                        let t = if p.type_ == "date" {
                            "string"
                        } else {
                            p.type_.as_str()
                        };
                        def(&p.name, t, &p.format, &p.description, p.priority)
                    }
                })
                .collect(),
        )
    }

    fn cell(&self, c: &Column, obj: &Value) -> Value {
        let created = obj
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str);
        match c {
            Column::Name => obj
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::Null),
            Column::Age => Value::String(age_of(created.unwrap_or(""), self.now)),
            Column::Builtin(b) => match b.source {
                ColumnSource::Func(f) => f(obj),
                ColumnSource::Path(p) => JsonPath::parse(p)
                    .map(|jp| render(&jp.find(obj), "string", self.now))
                    .unwrap_or(Value::Null),
            },
            Column::Custom(p, Some(jp)) => render(&jp.find(obj), &p.type_, self.now),
            Column::Custom(_, None) => Value::Null,
        }
    }

    /// One row for `obj` (in served form).
    pub fn row(&self, obj: &Value, include: IncludeObject) -> Value {
        let cells: Vec<Value> = self.cols.iter().map(|c| self.cell(c, obj)).collect();
        let mut row = Map::new();
        row.insert("cells".into(), Value::Array(cells));
        match include {
            IncludeObject::None => {}
            IncludeObject::Object => {
                row.insert("object".into(), obj.clone());
            }
            IncludeObject::Metadata => {
                row.insert("object".into(), partial_metadata(obj));
            }
        }
        Value::Object(row)
    }

    /// A whole Table.
    pub fn table<'a>(
        &self,
        rows: impl Iterator<Item = &'a Value>,
        list_meta: Value,
        include: IncludeObject,
        headers: bool,
    ) -> Value {
        let rows: Vec<Value> = rows.map(|o| self.row(o, include)).collect();
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta,
            "columnDefinitions": if headers { self.definitions() } else { json!([]) },
            "rows": rows,
        })
    }
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Renders JSONPath results into a cell of the column type; several results join with ",".
fn render(found: &[&Value], type_: &str, now: i64) -> Value {
    if found.is_empty() || (found.len() == 1 && found[0].is_null()) {
        return Value::Null;
    }
    if found.len() == 1 {
        let v = found[0];
        match type_ {
            "integer" if v.is_i64() || v.is_u64() => return v.clone(),
            "number" if v.is_number() => return v.clone(),
            "boolean" if v.is_boolean() => return v.clone(),
            "date" => return Value::String(age_of(v.as_str().unwrap_or(""), now)),
            _ => {}
        }
    }
    let parts: Vec<String> = found
        .iter()
        .map(|v| {
            if type_ == "date" {
                age_of(v.as_str().unwrap_or(""), now)
            } else {
                scalar_text(v)
            }
        })
        .collect();
    Value::String(parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_cells_by_type() {
        assert_eq!(render(&[], "string", 0), Value::Null);
        assert_eq!(render(&[&json!(3)], "integer", 0), json!(3));
        assert_eq!(
            render(&[&json!("a"), &json!("b")], "string", 0),
            json!("a,b")
        );
        assert_eq!(render(&[&json!({"x": 1})], "string", 0), json!("{\"x\":1}"));
        assert_eq!(
            render(&[&json!("1970-01-01T00:00:00Z")], "date", 300),
            json!("5m")
        );
    }
}
