//! Request counters: by (verb, group, resource, subresource), with writes counted exactly
//! (the `/_testserver` endpoints, discovery and OpenAPI are not API verbs and are counted
//! apart).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The API verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, server-side apply included).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    #[serde(rename = "deletecollection")]
    DeleteCollection,
}

impl Verb {
    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// The counter of one (verb, group, resource, subresource).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCount {
    /// Verb.
    pub verb: Verb,
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`), if any.
    pub subresource: Option<String>,
    /// Number of requests.
    pub count: u64,
}

/// A snapshot of the counters since start or the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Every API request, by verb and resource, including failed, faulted and dry-run ones.
    pub requests: Vec<RequestCount>,
    /// Write requests (create/update/patch/delete/deletecollection) that were not dry runs,
    /// whether they succeeded or not.
    pub writes: u64,
    /// Dry-run write requests.
    pub dry_run_writes: u64,
    /// Read requests (get/list/watch).
    pub reads: u64,
    /// Other requests (discovery, OpenAPI, /version, health).
    pub other: u64,
    /// Requests answered with an injected failure.
    pub injected_failures: u64,
    /// Non-dry-run writes by User-Agent.
    pub writes_by_user_agent: BTreeMap<String, u64>,
    /// Requests answered 401 (unknown, expired or revoked token); counted nowhere else.
    #[serde(default)]
    pub unauthorized: u64,
    /// Requests answered 403 by the authorizer (they also count in `requests`, `reads`
    /// and `writes`, like every API request that reached the server).
    #[serde(default)]
    pub forbidden: u64,
    /// 403s by user name.
    #[serde(default)]
    pub forbidden_by_user: BTreeMap<String, u64>,
    /// 403s by (verb, group, resource, subresource); a non-resource request has its path
    /// as `resource`.
    #[serde(default)]
    pub forbidden_requests: Vec<ForbiddenCount>,
    /// 403s by their full message (`persistentvolumes is forbidden: User ...`).
    #[serde(default)]
    pub forbidden_messages: BTreeMap<String, u64>,
}

/// The 403 counter of one (verb, group, resource, subresource).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForbiddenCount {
    /// Authorization verb (`get`, `list`, `watch`, `create`, …; lower-case HTTP method for
    /// non-resource requests).
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// Plural resource, or the path of a non-resource request.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Number of denials.
    pub count: u64,
}

impl Stats {
    /// Requests of `verb` on `resource` (any group, main resource and subresources).
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.verb == verb && r.resource == resource)
            .map(|r| r.count)
            .sum()
    }

    /// Requests of `verb` on `resource` and exactly `subresource`.
    pub fn count_sub(&self, verb: Verb, resource: &str, subresource: Option<&str>) -> u64 {
        self.requests
            .iter()
            .filter(|r| {
                r.verb == verb && r.resource == resource && r.subresource.as_deref() == subresource
            })
            .map(|r| r.count)
            .sum()
    }

    /// 403s of `verb` on `resource` (any group; `resource/subresource` names a
    /// subresource, a plain `resource` counts the main resource and its subresources).
    pub fn forbidden_count(&self, verb: &str, resource: &str) -> u64 {
        let (res, sub) = match resource.split_once('/') {
            Some((r, s)) if !resource.starts_with('/') => (r, Some(s)),
            _ => (resource, None),
        };
        self.forbidden_requests
            .iter()
            .filter(|f| {
                f.verb == verb && f.resource == res && sub.is_none_or(|s| f.subresource == s)
            })
            .map(|f| f.count)
            .sum()
    }

    /// 403s answered to `user`.
    pub fn forbidden_for(&self, user: &str) -> u64 {
        self.forbidden_by_user.get(user).copied().unwrap_or(0)
    }

    /// Write requests (all write verbs, dry runs included) on `resource`.
    pub fn writes_to(&self, resource: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.verb.is_write() && r.resource == resource)
            .map(|r| r.count)
            .sum()
    }
}

type Key = (Verb, String, String, Option<String>);
type ForbiddenKey = (String, String, String, String);

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    by_key: BTreeMap<Key, u64>,
    forbidden_by_key: BTreeMap<ForbiddenKey, u64>,
    stats: Stats,
}

impl Counters {
    pub(crate) fn api(
        &mut self,
        verb: Verb,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        dry_run: bool,
        agent: &str,
    ) {
        let key = (
            verb,
            group.to_string(),
            resource.to_string(),
            sub.map(str::to_string),
        );
        *self.by_key.entry(key).or_insert(0) += 1;
        if !verb.is_write() {
            self.stats.reads += 1;
        } else if dry_run {
            self.stats.dry_run_writes += 1;
        } else {
            self.stats.writes += 1;
            *self
                .stats
                .writes_by_user_agent
                .entry(agent.to_string())
                .or_insert(0) += 1;
        }
    }

    pub(crate) fn other(&mut self) {
        self.stats.other += 1;
    }

    pub(crate) fn unauthorized(&mut self) {
        self.stats.unauthorized += 1;
    }

    pub(crate) fn forbidden(&mut self, user: &str, a: &crate::auth::Attributes, message: &str) {
        self.stats.forbidden += 1;
        *self
            .stats
            .forbidden_by_user
            .entry(user.to_string())
            .or_insert(0) += 1;
        let resource = if a.resource_request {
            a.resource.clone()
        } else {
            a.path.clone()
        };
        let key = (
            a.verb.clone(),
            a.group.clone(),
            resource,
            a.subresource.clone(),
        );
        *self.forbidden_by_key.entry(key).or_insert(0) += 1;
        *self
            .stats
            .forbidden_messages
            .entry(message.to_string())
            .or_insert(0) += 1;
    }

    pub(crate) fn injected(&mut self) {
        self.stats.injected_failures += 1;
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let mut s = self.stats.clone();
        s.requests = self
            .by_key
            .iter()
            .map(
                |((verb, group, resource, subresource), count)| RequestCount {
                    verb: *verb,
                    group: group.clone(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    count: *count,
                },
            )
            .collect();
        s.forbidden_requests = self
            .forbidden_by_key
            .iter()
            .map(
                |((verb, group, resource, subresource), count)| ForbiddenCount {
                    verb: verb.clone(),
                    group: group.clone(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    count: *count,
                },
            )
            .collect();
        s
    }

    pub(crate) fn reset(&mut self) {
        *self = Counters::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_writes_and_reads_separately() {
        let mut c = Counters::default();
        c.api(Verb::List, "", "persistentvolumes", None, false, "a");
        c.api(
            Verb::Patch,
            "volmig.io",
            "volumemigrations",
            Some("status"),
            false,
            "volmig",
        );
        c.api(
            Verb::Patch,
            "volmig.io",
            "volumemigrations",
            None,
            false,
            "volmig",
        );
        c.api(Verb::Create, "", "persistentvolumes", None, true, "kubectl");
        c.other();
        let s = c.snapshot();
        assert_eq!((s.reads, s.writes, s.dry_run_writes, s.other), (1, 2, 1, 1));
        assert_eq!(s.count(Verb::Patch, "volumemigrations"), 2);
        assert_eq!(
            s.count_sub(Verb::Patch, "volumemigrations", Some("status")),
            1
        );
        assert_eq!(s.writes_to("persistentvolumes"), 1);
        assert_eq!(s.writes_by_user_agent["volmig"], 2);
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["requests"][0]["verb"], "list");
        c.reset();
        assert_eq!(c.snapshot(), Stats::default());
    }
}
