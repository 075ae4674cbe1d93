//! Just enough PromQL reading to list the metric selectors of an expression (the metric
//! name and its label matchers), and to read a Prometheus text exposition, so that the
//! chart's alerts and dashboard can be checked against the metrics volmig really exports.

use std::collections::{BTreeMap, BTreeSet};

/// One label matcher: `name op "value"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub name: String,
    pub op: String,
    pub value: String,
}

/// A metric selector of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: String,
    pub matchers: Vec<Matcher>,
}

/// Keywords that take a parenthesised label list.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Aggregation operators (`sum by (x) (...)` has no parenthesis right after the name).
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Binary operators and modifiers spelled as words.
const WORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "atan2"];

/// The metric selectors of `expr`. Functions, keywords, grouping label lists, numbers,
/// durations, strings, range brackets and Grafana `$variables` are skipped.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let next_non_blank = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let after = next_non_blank(i);
            let paren = chars.get(after) == Some(&'(');
            if GROUPING.contains(&word.as_str()) {
                if paren {
                    while i < chars.len() && chars[i] != ')' {
                        i += 1;
                    }
                    i += 1;
                }
            } else if WORDS.contains(&word.as_str())
                || AGGREGATIONS.contains(&word.as_str())
                || paren
            {
                // An operator word or a function call.
            } else {
                let mut matchers = Vec::new();
                if chars.get(after) == Some(&'{') {
                    let (parsed, end) = parse_matchers(&chars, after);
                    matchers = parsed;
                    i = end;
                }
                out.push(Selector {
                    metric: word,
                    matchers,
                });
            }
        } else if c == '{' {
            // A selector without a metric name: not used by volmig's rules or dashboard.
            let (_, end) = parse_matchers(&chars, i);
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// Parses `{a="x",b=~"y|z"}` starting at the `{`; returns the matchers and the index after
/// the `}`.
fn parse_matchers(chars: &[char], open: usize) -> (Vec<Matcher>, usize) {
    let mut i = open + 1;
    let mut out = Vec::new();
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        if i >= chars.len() {
            panic!(
                "unterminated label matchers in {:?}",
                chars.iter().collect::<String>()
            );
        }
        if chars[i] == '}' {
            return (out, i + 1);
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        while chars[i].is_whitespace() {
            i += 1;
        }
        let op_start = i;
        while matches!(chars[i], '=' | '!' | '~') {
            i += 1;
        }
        let op: String = chars[op_start..i].iter().collect();
        while chars[i].is_whitespace() {
            i += 1;
        }
        let end = skip_string(chars, i);
        let value: String = chars[i + 1..end - 1].iter().collect();
        assert!(
            !name.is_empty() && ["=", "!=", "=~", "!~"].contains(&op.as_str()),
            "cannot read the matcher at {:?}",
            chars[start..].iter().collect::<String>()
        );
        out.push(Matcher { name, op, value });
        i = end;
    }
}

/// Sample names of a Prometheus text exposition, with every label name and the values
/// seen for it.
pub type Exposition = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Reads the samples of a Prometheus text (or OpenMetrics) exposition.
pub fn exposition(text: &str) -> Exposition {
    let mut out = Exposition::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        let sel = selectors(series);
        assert_eq!(sel.len(), 1, "unreadable sample line {line:?}");
        let labels = out.entry(sel[0].metric.clone()).or_default();
        for m in &sel[0].matchers {
            labels
                .entry(m.name.clone())
                .or_default()
                .insert(m.value.clone());
        }
    }
    out
}

#[test]
fn reads_selectors_out_of_expressions() {
    let expr = r#"sum by (result) (increase(volmig_registrations_total{result=~"failed|x",job="j"}[15m])) > 0
        and on() time() - min(process_start_time_seconds{job="$job"}) > 1800
        or absent(volmig_leader{namespace="n"}) unless histogram_quantile(0.95, sum by (le) (rate(h_bucket[$__rate_interval]))) offset 5m"#;
    let got: Vec<(String, usize)> = selectors(expr)
        .into_iter()
        .map(|s| (s.metric, s.matchers.len()))
        .collect();
    assert_eq!(
        got,
        [
            ("volmig_registrations_total".to_owned(), 2),
            ("process_start_time_seconds".to_owned(), 1),
            ("volmig_leader".to_owned(), 1),
            ("h_bucket".to_owned(), 0),
        ]
    );
    let first = &selectors(expr)[0];
    assert_eq!(
        first.matchers[0],
        Matcher {
            name: "result".into(),
            op: "=~".into(),
            value: "failed|x".into()
        }
    );
    let exp = exposition(
        "# TYPE a counter\na_total{r=\"x\",o=\"y\"} 1\na_total{r=\"z\",o=\"y\"} 2\nb 3\n",
    );
    assert_eq!(exp["a_total"]["r"].len(), 2);
    assert!(exp["b"].is_empty());
}
