//! SOAP 1.1 envelopes: building requests and parsing responses and faults with quick-xml's
//! serde support. Nothing here does I/O.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Namespace of the vim25 API (`/sdk`).
pub(crate) const VIM_NS: &str = "urn:vim25";
/// Namespace of the CNS API (`/vsanHealth`).
pub(crate) const CNS_NS: &str = "urn:vsan";

const ENVELOPE_START: &str = concat!(
    r#"<?xml version="1.0" encoding="UTF-8"?>"#,
    r#"<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/""#,
    r#" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/""#,
    r#" xmlns:xsd="http://www.w3.org/2001/XMLSchema""#,
    r#" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">"#
);

/// A managed object reference, `<x type="Folder">group-d1</x>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct MoRef {
    /// The managed object type, e.g. `Datastore`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// The managed object ID, e.g. `datastore-12`.
    #[serde(rename = "$text")]
    pub value: String,
}

impl MoRef {
    /// A reference of `kind` to `value`.
    pub fn new(kind: &str, value: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            value: value.to_owned(),
        }
    }
}

impl std::fmt::Display for MoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.value)
    }
}

/// Serializes one SOAP method call: `<method xmlns="ns">…body fields…</method>`.
pub(crate) fn method_xml<T: Serialize>(
    method: &str,
    namespace: &str,
    body: &T,
) -> Result<String, quick_xml::SeError> {
    let xml = quick_xml::se::to_string_with_root(method, body)?;
    // The serializer writes `<method` first; the namespace goes right after the name.
    let split = 1 + method.len();
    Ok(format!(
        "{} xmlns=\"{}\"{}",
        &xml[..split],
        namespace,
        &xml[split..]
    ))
}

/// Wraps a serialized method call in a SOAP envelope. `session_cookie` adds the
/// `vcSessionCookie` header that the CNS endpoint reads on a real vCenter.
pub(crate) fn envelope(method_xml: &str, session_cookie: Option<&str>) -> String {
    let mut out = String::with_capacity(ENVELOPE_START.len() + method_xml.len() + 160);
    out.push_str(ENVELOPE_START);
    if let Some(cookie) = session_cookie {
        out.push_str("<soapenv:Header><vcSessionCookie>");
        out.push_str(&quick_xml::escape::escape(cookie));
        out.push_str("</vcSessionCookie></soapenv:Header>");
    }
    out.push_str("<soapenv:Body>");
    out.push_str(method_xml);
    out.push_str("</soapenv:Body></soapenv:Envelope>");
    out
}

#[derive(Deserialize)]
struct Envelope<B> {
    #[serde(rename = "Body")]
    body: B,
}

#[derive(Deserialize)]
struct Body<T> {
    #[serde(rename = "$value")]
    content: T,
}

/// The usual shape of a vim25 response element: one optional `returnval`.
#[derive(Debug, Deserialize)]
pub(crate) struct Returnval<T> {
    pub returnval: Option<T>,
}

/// `LocalizableMessage` of `MethodFault.faultMessage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LocalizableMessage {
    pub message: Option<String>,
}

/// A CNS volume ID as it appears in XML, `<volumeId><id>…</id></volumeId>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CnsVolumeIdXml {
    pub id: String,
}

/// The fields of a `MethodFault` (any subtype) that volmig reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct FaultData {
    /// `xsi:type`, e.g. `InvalidLogin`, `CnsAlreadyRegisteredFault`.
    #[serde(rename = "@type")]
    pub kind: Option<String>,
    #[serde(rename = "faultMessage", default)]
    pub messages: Vec<LocalizableMessage>,
    /// `CnsFault.reason`.
    pub reason: Option<String>,
    /// `CnsAlreadyRegisteredFault.volumeId`.
    #[serde(rename = "volumeId")]
    pub volume_id: Option<CnsVolumeIdXml>,
    /// `FileFault.file`.
    pub file: Option<String>,
    /// `InvalidArgument.invalidProperty`.
    #[serde(rename = "invalidProperty")]
    pub invalid_property: Option<String>,
    /// `NoPermission.privilegeId`.
    #[serde(rename = "privilegeId")]
    pub privilege_id: Option<String>,
}

/// `LocalizedMethodFault`: a fault inside a task result or task error.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LocalizedMethodFault {
    pub fault: Option<FaultData>,
    #[serde(rename = "localizedMessage")]
    pub localized_message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SoapFaultXml {
    faultcode: Option<String>,
    faultstring: Option<String>,
    detail: Option<FaultDetailXml>,
}

#[derive(Debug, Deserialize)]
struct FaultDetailXml {
    #[serde(rename = "$value")]
    fault: Option<FaultData>,
}

/// A server fault, reduced to what volmig keeps: the fault type name, a message, and the
/// fault's data.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fault {
    /// The vim/CNS fault type without namespace, e.g. `FileNotFound`.
    pub name: String,
    /// The best human-readable message the server gave.
    pub message: String,
    /// The fault's fields.
    pub data: FaultData,
}

/// Strips a namespace prefix and a vmodl package from a type name:
/// `vim25:InvalidLogin` and `vim.fault.InvalidLogin` both give `InvalidLogin`.
pub(crate) fn bare_type_name(name: &str) -> &str {
    let name = name.rsplit(':').next().unwrap_or(name);
    name.rsplit('.').next().unwrap_or(name).trim()
}

impl Fault {
    /// Builds a fault from its data and the surrounding messages.
    pub fn from_data(data: FaultData, outer_message: Option<&str>) -> Self {
        let name = data
            .kind
            .as_deref()
            .map(bare_type_name)
            .filter(|n| !n.is_empty())
            .unwrap_or("MethodFault")
            .to_owned();
        let mut parts: Vec<String> = Vec::new();
        let mut push = |text: &str, mentions: &str| {
            let text = text.trim();
            if !text.is_empty() && !parts.iter().any(|p| p.contains(mentions.trim())) {
                parts.push(text.to_owned());
            }
        };
        if let Some(outer) = outer_message {
            push(outer, outer);
        }
        if let Some(reason) = data.reason.as_deref() {
            push(reason, reason);
        }
        for message in data.messages.iter().filter_map(|m| m.message.as_deref()) {
            push(message, message);
        }
        if let Some(file) = data.file.as_deref() {
            push(&format!("file {file}"), file);
        }
        if let Some(property) = data.invalid_property.as_deref() {
            push(&format!("invalid property {property}"), property);
        }
        if let Some(privilege) = data.privilege_id.as_deref()
            && name != "NotAuthenticated"
        {
            push(&format!("missing privilege {privilege}"), privilege);
        }
        let message = if parts.is_empty() {
            name.clone()
        } else {
            parts.join("; ")
        };
        Self {
            name,
            message,
            data,
        }
    }

    /// Builds a fault from a `LocalizedMethodFault` of a task or a CNS operation result.
    pub fn from_localized(fault: LocalizedMethodFault) -> Self {
        Self::from_data(
            fault.fault.unwrap_or_default(),
            fault.localized_message.as_deref(),
        )
    }
}

/// Why a SOAP response could not be turned into a value.
#[derive(Debug)]
pub(crate) enum ResponseError {
    /// The server answered with a SOAP fault.
    Fault(Box<Fault>),
    /// The body is not the expected XML.
    Malformed(String),
}

/// Parses a response body into the content of its one body element; a SOAP fault (even
/// with HTTP 200) is returned as [`ResponseError::Fault`].
pub(crate) fn parse_response<T: DeserializeOwned>(xml: &str) -> Result<T, ResponseError> {
    if (xml.contains(":Fault>") || xml.contains("<Fault>"))
        && let Some(fault) = parse_fault(xml)
    {
        return Err(ResponseError::Fault(Box::new(fault)));
    }
    quick_xml::de::from_str::<Envelope<Body<T>>>(xml)
        .map(|envelope| envelope.body.content)
        .map_err(|err| ResponseError::Malformed(err.to_string()))
}

/// Parses a SOAP fault body; `None` when the body is not a fault.
pub(crate) fn parse_fault(xml: &str) -> Option<Fault> {
    let envelope = quick_xml::de::from_str::<Envelope<Body<SoapFaultXml>>>(xml).ok()?;
    let fault = envelope.body.content;
    if fault.faultcode.is_none() && fault.faultstring.is_none() && fault.detail.is_none() {
        return None;
    }
    let data = fault
        .detail
        .and_then(|d| d.fault)
        .unwrap_or_else(|| FaultData {
            // No detail: the fault code (e.g. `ServerFaultCode`) is the best name there is.
            kind: fault.faultcode.clone(),
            ..FaultData::default()
        });
    Some(Fault::from_data(data, fault.faultstring.as_deref()))
}

#[cfg(test)]
#[path = "soap_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "soap_proptests.rs"]
mod proptests;
