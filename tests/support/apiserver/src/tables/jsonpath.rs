//! The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[-1]`, `.a[*].b`, `.a['x.y']`,
//! optionally wrapped in `{}`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
}

/// A compiled JSONPath.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses a printer-column JSONPath; `None` when it is outside the supported subset.
    pub fn parse(src: &str) -> Option<Self> {
        let mut s = src.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
            s = inner.trim();
        }
        s = s.strip_prefix('$').unwrap_or(s);
        let chars: Vec<char> = s.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    i += 1;
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        i += 1;
                    }
                    let name: String = chars[start..i].iter().collect();
                    match name.as_str() {
                        "" => {}
                        "*" => steps.push(Step::All),
                        _ => steps.push(Step::Field(name)),
                    }
                }
                '[' => {
                    let end = chars[i..].iter().position(|c| *c == ']')? + i;
                    let inner: String = chars[i + 1..end].iter().collect();
                    let inner = inner.trim();
                    if inner == "*" {
                        steps.push(Step::All);
                    } else if let Some(q) = inner
                        .strip_prefix('\'')
                        .and_then(|x| x.strip_suffix('\''))
                        .or_else(|| inner.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
                    {
                        steps.push(Step::Field(q.to_string()));
                    } else {
                        steps.push(Step::Index(inner.parse().ok()?));
                    }
                    i = end + 1;
                }
                _ => return None,
            }
        }
        Some(JsonPath(steps))
    }

    /// Every value the path selects, in document order.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut cur = vec![root];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in cur {
                match (step, v) {
                    (Step::Field(f), Value::Object(m)) => next.extend(m.get(f)),
                    (Step::Index(i), Value::Array(a)) => {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        if let Ok(u) = usize::try_from(idx) {
                            next.extend(a.get(u));
                        }
                    }
                    (Step::All, Value::Array(a)) => next.extend(a.iter()),
                    (Step::All, Value::Object(m)) => next.extend(m.values()),
                    _ => {}
                }
            }
            cur = next;
        }
        cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_supported_forms() {
        let o = json!({"spec": {"volumePath": "[ds] a.vmdk"},
                       "status": {"persistentVolumes": ["pv1", "pv2"], "attempts": 3,
                                  "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]},
                       "metadata": {"annotations": {"a.b/c": "v"}}});
        let f = |p: &str| {
            JsonPath::parse(p)
                .expect(p)
                .find(&o)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(f(".spec.volumePath"), vec![json!("[ds] a.vmdk")]);
        assert_eq!(f("{.status.attempts}"), vec![json!(3)]);
        assert_eq!(
            f(".status.persistentVolumes[*]"),
            vec![json!("pv1"), json!("pv2")]
        );
        assert_eq!(f(".status.persistentVolumes[0]"), vec![json!("pv1")]);
        assert_eq!(f(".status.persistentVolumes[-1]"), vec![json!("pv2")]);
        assert_eq!(
            f(".status.conditions[*].type"),
            vec![json!("Ready"), json!("X")]
        );
        assert_eq!(f(".metadata.annotations['a.b/c']"), vec![json!("v")]);
        assert!(f(".status.missing").is_empty());
        assert!(JsonPath::parse(".a[?(@.x)]").is_none());
    }
}
