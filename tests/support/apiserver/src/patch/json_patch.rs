//! RFC 6902 JSON patch.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split(path: &str) -> ApiResult<Vec<String>> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| ApiError::unprocessable(format!("invalid JSON pointer {path:?}")))?;
    Ok(rest.split('/').map(unescape).collect())
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String], path: &str) -> ApiResult<&'a mut Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| ApiError::unprocessable(format!("doc is missing path: {path:?}")))?;
    }
    Ok(cur)
}

fn get(doc: &Value, path: &str) -> ApiResult<Value> {
    doc.pointer(path)
        .cloned()
        .ok_or_else(|| ApiError::unprocessable(format!("doc is missing path: {path:?}")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> ApiResult<()> {
    let tokens = split(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents, path)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| {
                        ApiError::unprocessable(format!(
                            "add operation does not apply: doc is missing path: {path:?}"
                        ))
                    })?
            };
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(ApiError::unprocessable(format!(
            "doc is missing path: {path:?}"
        ))),
    }
}

fn remove(doc: &mut Value, path: &str) -> ApiResult<Value> {
    let tokens = split(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err(ApiError::unprocessable("cannot remove the whole document"));
    };
    let missing = || {
        ApiError::unprocessable(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        ))
    };
    match parent_mut(doc, parents, path)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Applies a JSON patch (an array of operations) to `doc`.
pub fn apply_json_patch(doc: &Value, ops: &Value) -> ApiResult<Value> {
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be an array of operations"))?;
    let mut out = doc.clone();
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str).ok_or_else(|| {
            ApiError::bad_request(format!("json patch operation without a path: {op}"))
        })?;
        let value = || {
            op.get("value").cloned().ok_or_else(|| {
                ApiError::bad_request(format!("json patch {kind} without a value: {op}"))
            })
        };
        let from = || {
            op.get("from").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_request(format!("json patch {kind} without from: {op}"))
            })
        };
        match kind {
            "add" => add(&mut out, path, value()?)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                remove(&mut out, path)?;
                add(&mut out, path, value()?)?;
            }
            "move" => {
                let v = remove(&mut out, from()?)?;
                add(&mut out, path, v)?;
            }
            "copy" => {
                let v = get(&out, from()?)?;
                add(&mut out, path, v)?;
            }
            "test" => {
                // A missing value tests equal to null (kube-runtime's finalizer helper relies
                // on this to add the first finalizer).
                let got = out.pointer(path).cloned().unwrap_or(Value::Null);
                if got != value()? {
                    return Err(ApiError::unprocessable(format!(
                        "testing value {path} failed"
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unexpected json patch operation {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn all_operations() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"x": 1}});
        let ops = json!([
            {"op": "test", "path": "/spec/x", "value": 1},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
            {"op": "replace", "path": "/spec/x", "value": 2},
            {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
            {"op": "move", "from": "/spec/y", "path": "/spec/a~1b"}
        ]);
        let out = apply_json_patch(&doc, &ops).expect("patch");
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["b", "c"]}, "spec": {"x": 2, "a/b": 2}})
        );
    }

    #[test]
    fn failures_are_422() {
        let doc = json!({"a": 1});
        let e =
            apply_json_patch(&doc, &json!([{"op": "test", "path": "/a", "value": 2}])).unwrap_err();
        assert_eq!(e.code, 422);
        let e = apply_json_patch(&doc, &json!([{"op": "remove", "path": "/b"}])).unwrap_err();
        assert_eq!(e.code, 422);
        let first = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                           {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        let out = apply_json_patch(&json!({"metadata": {}}), &first)
            .expect("test null on a missing path");
        assert_eq!(out["metadata"]["finalizers"][0], "f");
    }
}
