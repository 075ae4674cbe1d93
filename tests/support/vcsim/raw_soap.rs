//! A minimal hand-written SOAP client for the harness (the shapes of `SOAP-NOTES.md`), for
//! tests that act as "another client" of vCenter, never as volmig.

use super::SUPPORT_USER_AGENT;

/// Minimal hand-written SOAP client (the shapes of `tests/support/vcsim/SOAP-NOTES.md`).
#[derive(Clone)]
pub struct RawSoap {
    base: String,
    http: reqwest::Client,
    cookie: String,
    user: String,
}

/// Escapes text for an XML element.
pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The text of every `<tag>..</tag>` element (no attributes on `tag`), in document order.
pub fn xml_texts(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_string());
        rest = &after[j + close.len()..];
    }
    out
}

impl RawSoap {
    /// A client without a session for `base` (`https://127.0.0.1:PORT`).
    pub(crate) fn new(base: String, http: reqwest::Client) -> RawSoap {
        RawSoap {
            base,
            http,
            cookie: String::new(),
            user: String::new(),
        }
    }

    /// POSTs one SOAP body (an element such as `<Logout ...>`) to `/sdk` or `/vsanHealth`
    /// with the session cookie and `vcSessionCookie` header; returns HTTP status and text.
    pub async fn call(&self, endpoint: &str, body: &str) -> (u16, String) {
        let (status, text, _) = self.post(endpoint, body).await;
        (status, text)
    }

    async fn post(&self, endpoint: &str, body: &str) -> (u16, String, Option<String>) {
        let header = if self.cookie.is_empty() {
            String::new()
        } else {
            format!(
                "<soapenv:Header><vcSessionCookie>{}</vcSessionCookie></soapenv:Header>",
                xml_escape(&self.cookie)
            )
        };
        let envelope = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
             <soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" \
             xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" \
             xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">\
             {header}<soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>"
        );
        let url = format!("{}{endpoint}", self.base);
        let mut req = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "text/xml; charset=utf-8")
            .header("SOAPAction", "\"urn:vim25/7.0.3.0\"")
            .header(reqwest::header::USER_AGENT, SUPPORT_USER_AGENT)
            .body(envelope);
        if !self.cookie.is_empty() {
            req = req.header(
                reqwest::header::COOKIE,
                format!("vmware_soap_session={}", self.cookie),
            );
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("raw SOAP: POST {url}: {e}"));
        let status = resp.status().as_u16();
        let cookie = resp
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("vmware_soap_session="))
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_string()
            });
        let text = resp
            .text()
            .await
            .unwrap_or_else(|e| panic!("raw SOAP: POST {url}: read body: {e}"));
        (status, text, cookie)
    }

    /// `SessionManager.Login`; on success the session cookie is used by later calls, on
    /// failure the error holds the HTTP status and the SOAP response.
    pub async fn login(mut self, user: &str, password: &str) -> Result<RawSoap, String> {
        let body = format!(
            "<Login xmlns=\"urn:vim25\"><_this type=\"SessionManager\">SessionManager</_this>\
             <userName>{}</userName><password>{}</password></Login>",
            xml_escape(user),
            xml_escape(password)
        );
        let (status, text, cookie) = self.post("/sdk", &body).await;
        match cookie {
            Some(cookie) if status == 200 => {
                self.cookie = cookie;
                self.user = user.to_string();
                Ok(self)
            }
            _ => Err(format!("Login as {user}: HTTP {status}: {text}")),
        }
    }

    /// `QueryVirtualDiskUuid` for `[datastore] path` in datacenter MoRef `dc`: the UUID, or
    /// the HTTP status and fault text.
    pub async fn query_disk_uuid(&self, dc: &str, path: &str) -> Result<String, String> {
        let body = format!(
            "<QueryVirtualDiskUuid xmlns=\"urn:vim25\"><_this type=\"VirtualDiskManager\">\
             virtualDiskManager</_this><name>{}</name><datacenter type=\"Datacenter\">{}\
             </datacenter></QueryVirtualDiskUuid>",
            xml_escape(path),
            xml_escape(dc)
        );
        let (status, text) = self.call("/sdk", &body).await;
        match xml_texts(&text, "returnval").first() {
            Some(uuid) if status == 200 => Ok(uuid.clone()),
            _ => Err(format!("HTTP {status}: {text}")),
        }
    }

    /// The MoRef value `FindByInventoryPath` returns for `path` (`/DC0`), if any.
    pub async fn find_by_inventory_path(&self, path: &str) -> Option<String> {
        let body = format!(
            "<FindByInventoryPath xmlns=\"urn:vim25\"><_this type=\"SearchIndex\">SearchIndex\
             </_this><inventoryPath>{}</inventoryPath></FindByInventoryPath>",
            xml_escape(path)
        );
        let (status, text) = self.call("/sdk", &body).await;
        assert_eq!(status, 200, "raw SOAP: FindByInventoryPath {path}: {text}");
        let rest = &text[text.find("<returnval type=\"")?..];
        let value = &rest[rest.find('>')? + 1..rest.find("</returnval>")?];
        Some(value.to_string())
    }

    /// Registers a vmdk with `CnsCreateVolume` as any client could (bypassing volmig) and
    /// returns the new volume ID; panics when the create fails (see `try_create_volume`).
    pub async fn create_volume(
        &self,
        name: &str,
        dc_path: &str,
        datastore: &str,
        file_path: &str,
        cluster_id: &str,
    ) -> String {
        self.try_create_volume(name, dc_path, datastore, file_path, cluster_id)
            .await
            .unwrap_or_else(|e| panic!("raw SOAP: {e}"))
    }

    /// `CnsCreateVolume` of `[datastore] file_path` in datacenter `dc_path` (inventory path
    /// without the leading slash): the new volume ID, or the task result holding the fault.
    pub async fn try_create_volume(
        &self,
        name: &str,
        dc_path: &str,
        datastore: &str,
        file_path: &str,
        cluster_id: &str,
    ) -> Result<String, String> {
        let host = self
            .base
            .split("://")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let url = format!(
            "https://{host}/folder/{}?dcPath={}&dsName={}",
            percent_encode(file_path),
            percent_encode(dc_path),
            percent_encode(datastore)
        );
        let body = format!(
            "<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><createSpecs><name>{}</name><volumeType>BLOCK\
             </volumeType><metadata><containerCluster><clusterType>KUBERNETES</clusterType>\
             <clusterId>{}</clusterId><vSphereUser>{}</vSphereUser><clusterFlavor>VANILLA\
             </clusterFlavor></containerCluster></metadata><backingObjectDetails \
             xsi:type=\"CnsBlockBackingDetails\"><backingDiskUrlPath>{}</backingDiskUrlPath>\
             </backingObjectDetails></createSpecs></CnsCreateVolume>",
            xml_escape(name),
            xml_escape(cluster_id),
            xml_escape(&self.user),
            xml_escape(&url)
        );
        let (status, text) = self.call("/vsanHealth", &body).await;
        let task = text
            .split("<returnval type=\"Task\">")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .ok_or_else(|| format!("CnsCreateVolume: HTTP {status}, no task: {text}"))?
            .to_string();
        let result = self.task_result(&task).await;
        match xml_texts(&result, "id").first() {
            Some(id) if !id.is_empty() && !result.contains("<fault") => Ok(id.clone()),
            _ => Err(format!("CnsCreateVolume task {task} failed: {result}")),
        }
    }

    /// The `info.state` + `info.result` response for a task (already complete in vcsim).
    pub async fn task_result(&self, task: &str) -> String {
        let body = format!(
            "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">\
             propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state\
             </pathSet><pathSet>info.result</pathSet><pathSet>info.error</pathSet></propSet>\
             <objectSet><obj type=\"Task\">{}</obj><skip>false</skip></objectSet></specSet>\
             <options/></RetrievePropertiesEx>",
            xml_escape(task)
        );
        let (status, text) = self.call("/sdk", &body).await;
        assert_eq!(status, 200, "raw SOAP: task {task}: {text}");
        text
    }
}

/// Percent-encodes everything but unreserved characters and `/` (for the file path and
/// the `dcPath`/`dsName` values of a backing URL).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
