//! Query parameters of resource requests.

use crate::admission::FieldValidation;
use crate::error::{ApiError, ApiResult};
use crate::selectors::{FieldSelector, LabelSelector};

/// Parsed query parameters.
#[derive(Debug, Clone)]
pub struct Query {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0 = none).
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `watch=true`.
    pub watch: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force=true`.
    pub force: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// `includeObject` (Tables).
    pub include_object: Option<String>,
    /// The request's User-Agent (for the default field manager).
    pub user_agent: String,
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a raw query string into decoded pairs.
pub fn pairs(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True")
}

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: Option<&str>) -> ApiResult<Self> {
        let mut q = Query {
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
            limit: 0,
            continue_token: None,
            resource_version: None,
            resource_version_match: None,
            watch: false,
            bookmarks: false,
            timeout_seconds: None,
            send_initial_events: false,
            dry_run: false,
            field_manager: None,
            force: false,
            field_validation: FieldValidation::Warn,
            include_object: None,
            user_agent: String::new(),
        };
        for (k, v) in pairs(raw.unwrap_or("")) {
            match k.as_str() {
                "labelSelector" => q.labels = LabelSelector::parse(&v)?,
                "fieldSelector" => q.fields = FieldSelector::parse(&v)?,
                "limit" => {
                    q.limit = v
                        .parse()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit {v:?}")))?
                }
                "continue" if !v.is_empty() => q.continue_token = Some(v),
                "resourceVersion" if !v.is_empty() => q.resource_version = Some(v),
                "resourceVersionMatch" if !v.is_empty() => q.resource_version_match = Some(v),
                "watch" => q.watch = truthy(&v),
                "allowWatchBookmarks" => q.bookmarks = truthy(&v),
                "timeoutSeconds" => {
                    q.timeout_seconds = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid timeoutSeconds {v:?}"))
                    })?)
                }
                "sendInitialEvents" => q.send_initial_events = truthy(&v),
                "dryRun" => {
                    if v != "All" && !v.is_empty() {
                        return Err(ApiError::bad_request(format!(
                            "unsupported dryRun value {v:?}; only All is supported"
                        )));
                    }
                    q.dry_run = v == "All";
                }
                "fieldManager" if !v.is_empty() => q.field_manager = Some(v),
                "force" => q.force = truthy(&v),
                "fieldValidation" => q.field_validation = FieldValidation::parse(Some(&v))?,
                "includeObject" => q.include_object = Some(v),
                _ => {}
            }
        }
        Ok(q)
    }

    /// The field manager of a non-apply write.
    pub fn manager(&self) -> String {
        self.field_manager
            .clone()
            .unwrap_or_else(|| crate::managed::default_manager(&self.user_agent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_parameters() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&limit=50&watch=1&resourceVersion=10&dryRun=All&fieldValidation=Strict",
        ))
        .expect("parse");
        assert_eq!(q.limit, 50);
        assert!(q.watch && q.dry_run);
        assert_eq!(q.resource_version.as_deref(), Some("10"));
        assert_eq!(q.field_validation, FieldValidation::Strict);
        assert!(!q.labels.is_empty());
        assert!(Query::parse(Some("limit=x")).is_err());
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("%zz"), "%zz");
    }
}
