//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`),
//! which client-go typed clients send — `kubectl create namespace|configmap|secret|...` and
//! helm's release storage. Only the kinds those send are described; anything else is 415.
//! Responses are always JSON (clients accept it).

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

/// How one field decodes.
#[derive(Debug, Clone, Copy)]
enum F {
    Str,
    Bytes,
    Int,
    Bool,
    Time,
    Msg(&'static [(u32, &'static str, F)]),
    StrMap,
    BytesMap,
    RepStr,
    RepMsg(&'static [(u32, &'static str, F)]),
    RawJson,
}

type Desc = &'static [(u32, &'static str, F)];

const FIELDS_V1: Desc = &[(1, "Raw", F::RawJson)];
const MANAGED: Desc = &[
    (1, "manager", F::Str),
    (2, "operation", F::Str),
    (3, "apiVersion", F::Str),
    (4, "time", F::Time),
    (6, "fieldsType", F::Str),
    (7, "fieldsV1", F::Msg(FIELDS_V1)),
    (8, "subresource", F::Str),
];
const OWNER: Desc = &[
    (1, "kind", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "controller", F::Bool),
    (7, "blockOwnerDeletion", F::Bool),
];
const META: Desc = &[
    (1, "name", F::Str),
    (2, "generateName", F::Str),
    (3, "namespace", F::Str),
    (5, "uid", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "generation", F::Int),
    (8, "creationTimestamp", F::Time),
    (9, "deletionTimestamp", F::Time),
    (10, "deletionGracePeriodSeconds", F::Int),
    (11, "labels", F::StrMap),
    (12, "annotations", F::StrMap),
    (13, "ownerReferences", F::RepMsg(OWNER)),
    (14, "finalizers", F::RepStr),
    (17, "managedFields", F::RepMsg(MANAGED)),
];
const OBJECT_REF: Desc = &[
    (1, "kind", F::Str),
    (2, "namespace", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "fieldPath", F::Str),
];
const LOCAL_REF: Desc = &[(1, "name", F::Str)];
const NS_SPEC: Desc = &[(1, "finalizers", F::RepStr)];
const NS_STATUS: Desc = &[(1, "phase", F::Str)];
const NAMESPACE: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "spec", F::Msg(NS_SPEC)),
    (3, "status", F::Msg(NS_STATUS)),
];
const CONFIGMAP: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "data", F::StrMap),
    (3, "binaryData", F::BytesMap),
    (4, "immutable", F::Bool),
];
const SECRET: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "data", F::BytesMap),
    (3, "type", F::Str),
    (4, "stringData", F::StrMap),
    (5, "immutable", F::Bool),
];
const SERVICE_ACCOUNT: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "secrets", F::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", F::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", F::Bool),
];
const POLICY_RULE: Desc = &[
    (1, "verbs", F::RepStr),
    (2, "apiGroups", F::RepStr),
    (3, "resources", F::RepStr),
    (4, "resourceNames", F::RepStr),
    (5, "nonResourceURLs", F::RepStr),
];
const ROLE: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "rules", F::RepMsg(POLICY_RULE)),
];
const SUBJECT: Desc = &[
    (1, "kind", F::Str),
    (2, "apiGroup", F::Str),
    (3, "name", F::Str),
    (4, "namespace", F::Str),
];
const ROLE_REF: Desc = &[
    (1, "apiGroup", F::Str),
    (2, "kind", F::Str),
    (3, "name", F::Str),
];
const BINDING: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "subjects", F::RepMsg(SUBJECT)),
    (3, "roleRef", F::Msg(ROLE_REF)),
];
const PRECONDITIONS: Desc = &[(1, "uid", F::Str), (2, "resourceVersion", F::Str)];
const DELETE_OPTIONS: Desc = &[
    (1, "gracePeriodSeconds", F::Int),
    (2, "preconditions", F::Msg(PRECONDITIONS)),
    (3, "orphanDependents", F::Bool),
    (4, "propagationPolicy", F::Str),
    (5, "dryRun", F::RepStr),
];

const BOUND_REF: Desc = &[
    (1, "kind", F::Str),
    (2, "apiVersion", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
];
const TOKEN_REQUEST_SPEC: Desc = &[
    (1, "audiences", F::RepStr),
    (3, "boundObjectRef", F::Msg(BOUND_REF)),
    (4, "expirationSeconds", F::Int),
];
const TOKEN_REQUEST: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "spec", F::Msg(TOKEN_REQUEST_SPEC)),
];
const RESOURCE_ATTRIBUTES: Desc = &[
    (1, "namespace", F::Str),
    (2, "verb", F::Str),
    (3, "group", F::Str),
    (4, "version", F::Str),
    (5, "resource", F::Str),
    (6, "subresource", F::Str),
    (7, "name", F::Str),
];
const NON_RESOURCE_ATTRIBUTES: Desc = &[(1, "path", F::Str), (2, "verb", F::Str)];
const SSAR_SPEC: Desc = &[
    (1, "resourceAttributes", F::Msg(RESOURCE_ATTRIBUTES)),
    (2, "nonResourceAttributes", F::Msg(NON_RESOURCE_ATTRIBUTES)),
];
const SELF_SUBJECT_ACCESS_REVIEW: Desc = &[
    (1, "metadata", F::Msg(META)),
    (2, "spec", F::Msg(SSAR_SPEC)),
];

fn descriptor(kind: &str) -> Option<Desc> {
    Some(match kind {
        "Namespace" => NAMESPACE,
        "ConfigMap" => CONFIGMAP,
        "Secret" => SECRET,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => BINDING,
        "DeleteOptions" => DELETE_OPTIONS,
        "TokenRequest" => TOKEN_REQUEST,
        "SelfSubjectAccessReview" => SELF_SUBJECT_ACCESS_REVIEW,
        _ => return None,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed(what: &str) -> ApiError {
    ApiError::bad_request(format!("malformed protobuf body: {what}"))
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| malformed("truncated varint"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed("varint too long"))
    }

    fn bytes(&mut self) -> ApiResult<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| malformed("length"))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| malformed("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn skip(&mut self, wire: u64) -> ApiResult<()> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => {
                self.pos += 8;
                Ok(())
            }
            2 => self.bytes().map(|_| ()),
            5 => {
                self.pos += 4;
                Ok(())
            }
            _ => Err(malformed("unsupported wire type")),
        }
    }
}

fn text(b: &[u8]) -> ApiResult<Value> {
    std::str::from_utf8(b)
        .map(|s| Value::String(s.to_string()))
        .map_err(|_| malformed("string is not UTF-8"))
}

fn map_entry(b: &[u8], bytes_value: bool) -> ApiResult<(String, Value)> {
    let mut r = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while r.pos < r.buf.len() {
        let tag = r.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => k = text(r.bytes()?)?.as_str().unwrap_or_default().to_string(),
            (2, 2) if bytes_value => {
                v = Value::String(base64::engine::general_purpose::STANDARD.encode(r.bytes()?));
            }
            (2, 2) => v = text(r.bytes()?)?,
            (_, w) => r.skip(w)?,
        }
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> ApiResult<Value> {
    let m = message(b, &[(1, "seconds", F::Int), (2, "nanos", F::Int)])?;
    let secs = m.get("seconds").and_then(Value::as_i64).unwrap_or(0);
    let ts = jiff::Timestamp::from_second(secs).map_err(|_| malformed("time out of range"))?;
    Ok(Value::String(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn message(b: &[u8], desc: Desc) -> ApiResult<Map<String, Value>> {
    let mut r = Reader { buf: b, pos: 0 };
    let mut out = Map::new();
    while r.pos < r.buf.len() {
        let tag = r.varint()?;
        let (num, wire) = (tag >> 3, tag & 7);
        let Some((_, name, f)) = desc.iter().find(|(n, _, _)| u64::from(*n) == num) else {
            r.skip(wire)?;
            continue;
        };
        let name = (*name).to_string();
        match (f, wire) {
            (F::Str, 2) => {
                // Go emits empty strings; JSON would have omitted them.
                let v = text(r.bytes()?)?;
                if v != "" {
                    out.insert(name, v);
                }
            }
            (F::Bytes, 2) => {
                out.insert(
                    name,
                    Value::String(base64::engine::general_purpose::STANDARD.encode(r.bytes()?)),
                );
            }
            (F::Int, 0) => {
                out.insert(name, json!(r.varint()? as i64));
            }
            (F::Bool, 0) => {
                out.insert(name, Value::Bool(r.varint()? != 0));
            }
            (F::Time, 2) => {
                let t = time(r.bytes()?)?;
                if t != "1970-01-01T00:00:00Z" {
                    out.insert(name, t);
                }
            }
            (F::Msg(d), 2) => {
                out.insert(name, Value::Object(message(r.bytes()?, d)?));
            }
            (F::RawJson, 2) => {
                let raw = r.bytes()?;
                let v =
                    serde_json::from_slice(raw).map_err(|_| malformed("FieldsV1 is not JSON"))?;
                return Ok(match v {
                    Value::Object(m) => m,
                    _ => Map::new(),
                });
            }
            (F::StrMap | F::BytesMap, 2) => {
                let (k, v) = map_entry(r.bytes()?, matches!(f, F::BytesMap))?;
                let m = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = m.as_object_mut() {
                    m.insert(k, v);
                }
            }
            (F::RepStr, 2) => {
                let s = text(r.bytes()?)?;
                push(&mut out, name, s);
            }
            (F::RepMsg(d), 2) => {
                let m = Value::Object(message(r.bytes()?, d)?);
                push(&mut out, name, m);
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) {
    if let Some(a) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
        a.push(v);
    }
}

/// Decodes a `k8s\0`-prefixed protobuf envelope into the JSON form of the object it holds.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let payload = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| malformed("missing the k8s magic prefix"))?;
    const TYPE_META: Desc = &[(1, "apiVersion", F::Str), (2, "kind", F::Str)];
    const UNKNOWN: Desc = &[(1, "typeMeta", F::Msg(TYPE_META)), (2, "raw", F::Bytes)];
    let env = message(payload, UNKNOWN)?;
    let api_version = env.pointer_str("typeMeta", "apiVersion");
    let kind = env.pointer_str("typeMeta", "kind");
    let raw = env
        .get("raw")
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default();
    let desc = descriptor(&kind).ok_or_else(|| {
        ApiError::unsupported_media_type(&format!(
            "application/vnd.kubernetes.protobuf (kind {kind:?}; send JSON)"
        ))
    })?;
    let mut obj = message(&raw, desc)?;
    if kind != "DeleteOptions" {
        obj.insert("apiVersion".into(), Value::String(api_version));
        obj.insert("kind".into(), Value::String(kind));
    }
    Ok(Value::Object(obj))
}

trait PointerStr {
    fn pointer_str(&self, a: &str, b: &str) -> String;
}

impl PointerStr for Map<String, Value> {
    fn pointer_str(&self, a: &str, b: &str) -> String {
        self.get(a)
            .and_then(|x| x.get(b))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_secret_in_an_envelope() {
        let entry = [field(1, b"release"), field(2, b"\x01\x02")].concat();
        let label = [field(1, b"owner"), field(2, b"helm")].concat();
        let meta = [
            field(1, b"sh.helm.release.v1.x.v1"),
            field(3, b"volmig"),
            field(11, &label),
        ]
        .concat();
        let secret = [
            field(1, &meta),
            field(2, &entry),
            field(3, b"helm.sh/release.v1"),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"Secret")].concat();
        let mut body = b"k8s\0".to_vec();
        body.extend([field(1, &type_meta), field(2, &secret)].concat());
        let v = decode(&body).expect("decodes");
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["metadata"]["namespace"], "volmig");
        assert_eq!(v["metadata"]["labels"]["owner"], "helm");
        assert_eq!(v["data"]["release"], "AQI=");
        assert_eq!(v["type"], "helm.sh/release.v1");
    }

    #[test]
    fn unknown_kinds_are_415() {
        let type_meta = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let mut body = b"k8s\0".to_vec();
        body.extend(field(1, &type_meta));
        assert_eq!(decode(&body).unwrap_err().code, 415);
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
    }
}
