//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!` not exists) and field
//! selectors (`path=value`, `path!=value`).

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_set(s: &str, whole: &str) -> ApiResult<Vec<String>> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: {whole:?}: expected a parenthesized set"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `labelSelector`.
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let p = part.trim();
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {p:?}"));
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::Ne(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some(i) = p.find(" notin ") {
                Req::NotIn(p[..i].trim().to_string(), parse_set(&p[i + 7..], p)?)
            } else if let Some(i) = p.find(" in ") {
                Req::In(p[..i].trim().to_string(), parse_set(&p[i + 4..], p)?)
            } else {
                Req::Exists(p.to_string())
            };
            let key = match &req {
                Req::Eq(k, _) | Req::Ne(k, _) | Req::In(k, _) | Req::NotIn(k, _) => k,
                Req::Exists(k) | Req::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object's labels (`metadata.labels`) match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector over dotted paths (`metadata.name=x,status.phase!=Failed`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in v.chars() {
        if esc || c != '\\' {
            out.push(c);
            esc = false;
        } else {
            esc = true;
        }
    }
    out
}

impl FieldSelector {
    /// Parses `fieldSelector`.
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let p = part.trim();
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{p}'; can't understand '{p}'"
                )));
            };
            let path: Vec<String> = k.trim().split('.').map(str::to_string).collect();
            reqs.push((path, eq, unescape(v.trim())));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Rewrites the first path segment (`regarding` → `involvedObject`, ...).
    pub fn rename_root(&mut self, from: &str, to: &str) {
        for (path, _, _) in &mut self.0 {
            if path.first().is_some_and(|p| p == from) {
                path[0] = to.to_string();
            }
        }
    }

    /// Whether an object matches; missing fields compare as "".
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front"}}, "status": {"phase": "Bound"}})
    }

    #[test]
    fn label_operators() {
        let o = obj();
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=web,tier in (back)", false),
            ("app in (web),tier notin (back)", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).expect(sel).matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn bad_label_selectors_are_rejected() {
        for sel in ["app in web", "=x", "a b c"] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = obj();
        assert!(
            FieldSelector::parse("metadata.name=a")
                .expect("p")
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .expect("p")
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("status.phase==Bound,metadata.namespace=")
                .expect("p")
                .matches(&o)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
