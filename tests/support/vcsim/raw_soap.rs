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
    via: SessionVia,
}

/// How a logged-in `RawSoap` presents its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionVia {
    /// `Cookie: vmware_soap_session=..` and the `vcSessionCookie` SOAP header (default).
    Both,
    /// Only the HTTP cookie.
    Cookie,
    /// Only the `vcSessionCookie` SOAP header (what real vCenter's PBM/VSLM read).
    Header,
}

/// The `info.state` value in a task poll answer (`running`, `success`, `error`), if any.
pub fn task_state(xml: &str) -> Option<String> {
    let rest = &xml[xml.find("<name>info.state</name>")?..];
    let rest = &rest[rest.find("<val")?..];
    let value = &rest[rest.find('>')? + 1..rest.find("</val>")?];
    Some(value.trim().to_string())
}

/// The existing volume ID named by a `CnsAlreadyRegisteredFault` in a create's task
/// result, if the text holds one.
pub fn already_registered_id(text: &str) -> Option<String> {
    let rest = &text[text.find("CnsAlreadyRegisteredFault")?..];
    xml_texts(rest, "id")
        .into_iter()
        .map(|id| id.trim().to_string())
        .find(|id| !id.is_empty())
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
            via: SessionVia::Both,
        }
    }

    /// The same session, presented only as `via` says.
    pub fn session_via(&self, via: SessionVia) -> RawSoap {
        RawSoap {
            via,
            ..self.clone()
        }
    }

    /// `https://127.0.0.1:PORT/folder/FILE?dcPath=DC&dsName=DS`, a backing URL.
    pub fn backing_url(&self, dc_path: &str, datastore: &str, file_path: &str) -> String {
        let host = self.base.split("://").nth(1).unwrap_or_default();
        format!(
            "https://{host}/folder/{}?dcPath={}&dsName={}",
            percent_encode(file_path),
            percent_encode(dc_path),
            percent_encode(datastore)
        )
    }

    /// POSTs one SOAP body (an element such as `<Logout ...>`) to `/sdk` or `/vsanHealth`
    /// with the session cookie and `vcSessionCookie` header; returns HTTP status and text.
    pub async fn call(&self, endpoint: &str, body: &str) -> (u16, String) {
        let (status, text, _) = self.post(endpoint, body).await;
        (status, text)
    }

    async fn post(&self, endpoint: &str, body: &str) -> (u16, String, Option<String>) {
        self.try_post(endpoint, body)
            .await
            .unwrap_or_else(|e| panic!("raw SOAP: {e}"))
    }

    /// Like `call`, but a transport failure (e.g. the connection closed without an answer)
    /// is an `Err` instead of a panic.
    pub async fn try_call(&self, endpoint: &str, body: &str) -> Result<(u16, String), String> {
        let (status, text, _) = self.try_post(endpoint, body).await?;
        Ok((status, text))
    }

    async fn try_post(
        &self,
        endpoint: &str,
        body: &str,
    ) -> Result<(u16, String, Option<String>), String> {
        let header = if self.cookie.is_empty() || self.via == SessionVia::Cookie {
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
        if !self.cookie.is_empty() && self.via != SessionVia::Header {
            req = req.header(
                reqwest::header::COOKIE,
                format!("vmware_soap_session={}", self.cookie),
            );
        }
        let resp = req.send().await.map_err(|e| format!("POST {url}: {e}"))?;
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
            .map_err(|e| format!("POST {url}: read body: {e}"))?;
        Ok((status, text, cookie))
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
    /// returns the new volume ID, or the existing one when CNS answers
    /// `CnsAlreadyRegisteredFault` (as the CSI driver's `CreateVolume` does); panics when
    /// the create fails otherwise (see `try_create_volume`).
    pub async fn create_volume(
        &self,
        name: &str,
        dc_path: &str,
        datastore: &str,
        file_path: &str,
        cluster_id: &str,
    ) -> String {
        match self
            .try_create_volume(name, dc_path, datastore, file_path, cluster_id)
            .await
        {
            Ok(id) => id,
            Err(e) => already_registered_id(&e).unwrap_or_else(|| panic!("raw SOAP: {e}")),
        }
    }

    /// `CnsDeleteVolume` of one ID (`deleteDisk` as given) and waits for its task: `Ok` when
    /// the volume result carries no fault, else the task result (an unknown ID: `NotFound`).
    pub async fn delete_volume(&self, id: &str, delete_disk: bool) -> Result<(), String> {
        let body = format!(
            "<CnsDeleteVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><volumeIds><id>{}</id></volumeIds><deleteDisk>{}\
             </deleteDisk></CnsDeleteVolume>",
            xml_escape(id),
            delete_disk
        );
        let (status, text) = self
            .try_call("/vsanHealth", &body)
            .await
            .map_err(|e| format!("CnsDeleteVolume: {e}"))?;
        let task = text
            .split("<returnval type=\"Task\">")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .map(str::to_string)
            .ok_or_else(|| format!("CnsDeleteVolume: HTTP {status}, no task: {text}"))?;
        let result = self
            .wait_task(&task, std::time::Duration::from_secs(60))
            .await;
        if result.contains("<fault") || task_state(&result).as_deref() != Some("success") {
            return Err(format!("CnsDeleteVolume {id}: task {task}: {result}"));
        }
        Ok(())
    }

    /// The IDs of every CNS volume whose container clusters include `cluster_id`
    /// (`CnsQueryVolume` with `containerClusterIds`, every page), as the driver's
    /// `QueryAllVolumesForCluster` asks.
    pub async fn volume_ids_for_cluster(&self, cluster_id: &str) -> Result<Vec<String>, String> {
        let mut ids = Vec::new();
        let mut offset = 0_u64;
        loop {
            let body = format!(
                "<CnsQueryVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
                 cns-volume-manager</_this><filter><containerClusterIds>{}\
                 </containerClusterIds><cursor><offset>{offset}</offset><limit>100</limit>\
                 </cursor></filter></CnsQueryVolume>",
                xml_escape(cluster_id)
            );
            let (status, text) = self
                .try_call("/vsanHealth", &body)
                .await
                .map_err(|e| format!("CnsQueryVolume: {e}"))?;
            if status != 200 {
                return Err(format!("CnsQueryVolume: HTTP {status}: {text}"));
            }
            let page: Vec<String> = text
                .split("<volumeId>")
                .skip(1)
                .filter_map(|rest| xml_texts(rest, "id").into_iter().next())
                .collect();
            let next = xml_texts(&text, "offset")
                .last()
                .and_then(|o| o.trim().parse::<u64>().ok());
            let total = xml_texts(&text, "totalRecords")
                .last()
                .and_then(|t| t.trim().parse::<u64>().ok());
            let empty = page.is_empty();
            ids.extend(page);
            match (next, total) {
                (Some(next), Some(total)) if !empty && next > offset && next < total => {
                    offset = next;
                }
                _ => return Ok(ids),
            }
        }
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
        let task = self
            .start_create_volume(name, dc_path, datastore, file_path, cluster_id)
            .await?;
        self.volume_of_task(&task).await
    }

    /// Waits for a `CnsCreateVolume` task and returns the volume ID of its first result.
    pub async fn volume_of_task(&self, task: &str) -> Result<String, String> {
        let result = self
            .wait_task(task, std::time::Duration::from_secs(60))
            .await;
        match xml_texts(&result, "id").first() {
            Some(id) if !id.is_empty() && !result.contains("<fault") => Ok(id.clone()),
            _ => Err(format!("CnsCreateVolume task {task} failed: {result}")),
        }
    }

    /// Sends `CnsCreateVolume` for a vmdk named by its backing URL and returns the task ID
    /// (the task may still be running); `Err` when the reply is a fault or never comes.
    pub async fn start_create_volume(
        &self,
        name: &str,
        dc_path: &str,
        datastore: &str,
        file_path: &str,
        cluster_id: &str,
    ) -> Result<String, String> {
        let url = self.backing_url(dc_path, datastore, file_path);
        let backing = format!(
            "<backingDiskUrlPath>{}</backingDiskUrlPath>",
            xml_escape(&url)
        );
        self.start_create(name, cluster_id, &backing).await
    }

    /// `CnsCreateVolume` of a vmdk named by `url` exactly as given (the CSI driver builds it
    /// without escaping the file path): the new volume ID, the existing one when CNS answers
    /// `CnsAlreadyRegisteredFault`, else the task result holding the fault.
    pub async fn create_volume_by_url(
        &self,
        name: &str,
        url: &str,
        cluster_id: &str,
    ) -> Result<String, String> {
        let backing = format!(
            "<backingDiskUrlPath>{}</backingDiskUrlPath>",
            xml_escape(url)
        );
        let task = self.start_create(name, cluster_id, &backing).await?;
        match self.volume_of_task(&task).await {
            Ok(id) => Ok(id),
            Err(e) => already_registered_id(&e).ok_or(e),
        }
    }

    /// Sends `CnsCreateVolume` for an FCD (`backingDiskId`) and returns the task ID.
    pub async fn start_create_volume_by_disk_id(
        &self,
        name: &str,
        disk_id: &str,
        cluster_id: &str,
    ) -> Result<String, String> {
        let backing = format!("<backingDiskId>{}</backingDiskId>", xml_escape(disk_id));
        self.start_create(name, cluster_id, &backing).await
    }

    async fn start_create(
        &self,
        name: &str,
        cluster_id: &str,
        backing: &str,
    ) -> Result<String, String> {
        let cluster = format!(
            "<clusterType>KUBERNETES</clusterType><clusterId>{}</clusterId>\
             <vSphereUser>{}</vSphereUser><clusterFlavor>VANILLA</clusterFlavor>",
            xml_escape(cluster_id),
            xml_escape(&self.user)
        );
        let body = format!(
            "<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><createSpecs><name>{}</name><volumeType>BLOCK\
             </volumeType><metadata><containerCluster>{cluster}</containerCluster>\
             </metadata><backingObjectDetails xsi:type=\"CnsBlockBackingDetails\">{backing}\
             </backingObjectDetails></createSpecs></CnsCreateVolume>",
            xml_escape(name),
        );
        let (status, text) = self
            .try_call("/vsanHealth", &body)
            .await
            .map_err(|e| format!("CnsCreateVolume: {e}"))?;
        text.split("<returnval type=\"Task\">")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .map(str::to_string)
            .ok_or_else(|| format!("CnsCreateVolume: HTTP {status}, no task: {text}"))
    }

    /// One poll of a task (`info.state`, `info.result`, `info.error`): HTTP status and text.
    pub async fn poll_task(&self, task: &str) -> (u16, String) {
        let body = format!(
            "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">\
             propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state\
             </pathSet><pathSet>info.result</pathSet><pathSet>info.error</pathSet></propSet>\
             <objectSet><obj type=\"Task\">{}</obj><skip>false</skip></objectSet></specSet>\
             <options/></RetrievePropertiesEx>",
            xml_escape(task)
        );
        self.call("/sdk", &body).await
    }

    /// The `info.state` + `info.result` response for a task that has completed.
    pub async fn task_result(&self, task: &str) -> String {
        let (status, text) = self.poll_task(task).await;
        assert_eq!(status, 200, "raw SOAP: task {task}: {text}");
        text
    }

    /// Polls a task every 50 ms until it is `success` or `error` (panics after `timeout`);
    /// returns the last answer.
    pub async fn wait_task(&self, task: &str, timeout: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let text = self.task_result(task).await;
            match task_state(&text).as_deref() {
                Some("success" | "error") => return text,
                _ if std::time::Instant::now() > deadline => {
                    panic!("raw SOAP: task {task} not done after {timeout:?}: {text}")
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    /// `RetrieveServiceContent` on `/sdk` (no session needed): the response text.
    pub async fn service_content(&self) -> String {
        let (status, text) = self
            .call(
                "/sdk",
                "<RetrieveServiceContent xmlns=\"urn:vim25\"><_this type=\"ServiceInstance\">\
                 ServiceInstance</_this></RetrieveServiceContent>",
            )
            .await;
        assert_eq!(status, 200, "raw SOAP: RetrieveServiceContent: {text}");
        text
    }

    /// vim25 `VcenterVStorageObjectManager.RegisterDisk` of a backing URL: the FCD ID, or
    /// the HTTP status and fault text.
    pub async fn register_disk(&self, url: &str, name: &str) -> Result<String, String> {
        let body = format!(
            "<RegisterDisk xmlns=\"urn:vim25\"><_this type=\"VcenterVStorageObjectManager\">\
             VStorageObjectManager</_this><path>{}</path><name>{}</name></RegisterDisk>",
            xml_escape(url),
            xml_escape(name)
        );
        let (status, text) = self.call("/sdk", &body).await;
        // `config.id` is an `ID` object: `<id><id>UUID</id></id>`.
        let id = xml_texts(&text, "id")
            .first()
            .and_then(|outer| outer.rsplit('>').next().map(str::to_string));
        match id {
            Some(id) if status == 200 && !id.is_empty() => Ok(id),
            _ => Err(format!("HTTP {status}: {text}")),
        }
    }

    /// VSLM `RetrieveContent` on `/vslm/sdk`: HTTP status and text.
    pub async fn vslm_content(&self) -> (u16, String) {
        self.call(
            "/vslm/sdk",
            "<RetrieveContent xmlns=\"urn:vslm\"><_this type=\"VslmServiceInstance\">\
             ServiceInstance</_this></RetrieveContent>",
        )
        .await
    }

    /// VSLM `VslmRetrieveVStorageObject` of FCD `id`: HTTP status and text.
    pub async fn vslm_retrieve(&self, id: &str) -> (u16, String) {
        let body = format!(
            "<VslmRetrieveVStorageObject xmlns=\"urn:vslm\"><_this \
             type=\"VslmVStorageObjectManager\">VStorageObjectManager</_this><id><id>{}</id>\
             </id></VslmRetrieveVStorageObject>",
            xml_escape(id)
        );
        self.call("/vslm/sdk", &body).await
    }

    /// VSLM `VslmSetVStorageObjectControlFlags` on FCD `id`: HTTP status and text.
    pub async fn vslm_set_control_flags(&self, id: &str, flags: &[&str]) -> (u16, String) {
        let flags: String = flags
            .iter()
            .map(|f| format!("<controlFlags>{}</controlFlags>", xml_escape(f)))
            .collect();
        let body = format!(
            "<VslmSetVStorageObjectControlFlags xmlns=\"urn:vslm\"><_this \
             type=\"VslmVStorageObjectManager\">VStorageObjectManager</_this><id><id>{}</id>\
             </id>{flags}</VslmSetVStorageObjectControlFlags>",
            xml_escape(id)
        );
        self.call("/vslm/sdk", &body).await
    }

    /// Resolves a storage policy name to its profile ID through `/pbm/sdk`
    /// (`PbmQueryProfile` for STORAGE requirement profiles, then `PbmRetrieveContent`).
    pub async fn pbm_profile_id(&self, name: &str) -> Option<String> {
        let (status, text) = self
            .call(
                "/pbm/sdk",
                "<PbmQueryProfile xmlns=\"urn:pbm\"><_this type=\"PbmProfileProfileManager\">\
                 ProfileManager</_this><resourceType><resourceType>STORAGE</resourceType>\
                 </resourceType><profileCategory>REQUIREMENT</profileCategory></PbmQueryProfile>",
            )
            .await;
        assert_eq!(status, 200, "raw SOAP: PbmQueryProfile: {text}");
        let ids: String = xml_texts(&text, "uniqueId")
            .iter()
            .map(|id| {
                format!(
                    "<profileIds><uniqueId>{}</uniqueId></profileIds>",
                    xml_escape(id)
                )
            })
            .collect();
        let body = format!(
            "<PbmRetrieveContent xmlns=\"urn:pbm\"><_this type=\"PbmProfileProfileManager\">\
             ProfileManager</_this>{ids}</PbmRetrieveContent>"
        );
        let (status, text) = self.call("/pbm/sdk", &body).await;
        assert_eq!(status, 200, "raw SOAP: PbmRetrieveContent: {text}");
        for profile in text.split("<returnval").skip(1) {
            let id = profile
                .split("<uniqueId>")
                .nth(1)?
                .split("</uniqueId>")
                .next()?;
            let pname = profile.split("<name>").nth(1)?.split("</name>").next()?;
            if pname == xml_escape(name) {
                return Some(id.to_string());
            }
        }
        None
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
