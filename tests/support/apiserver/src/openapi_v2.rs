//! A minimal OpenAPI v2 document in gnostic protobuf form (`/openapi/v2`), for kubectl
//! before 1.28, which checks there (not in v3) whether the server validates fields itself:
//! one PATCH operation per kind with its `x-kubernetes-group-version-kind` and the
//! `fieldValidation`/`dryRun` query parameters. It carries no schema definitions.

use crate::registry::Registry;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A length-delimited field.
fn field(num: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 6);
    varint(u64::from(num) << 3 | 2, &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn s(num: u32, text: &str) -> Vec<u8> {
    field(num, text.as_bytes())
}

fn query_param(name: &str) -> Vec<u8> {
    // QueryParameterSubSchema{in=2, name=4, type=6}
    let sub = [s(2, "query"), s(4, name), s(6, "string")].concat();
    let non_body = field(3, &sub); // NonBodyParameter.query_parameter_sub_schema
    let parameter = field(2, &non_body); // Parameter.non_body_parameter
    field(1, &parameter) // ParametersItem.parameter
}

fn patch_operation(group: &str, version: &str, kind: &str, id: &str) -> Vec<u8> {
    let response = s(1, "OK"); // Response.description
    let value = field(1, &response); // ResponseValue.response
    let named = [s(1, "200"), field(2, &value)].concat(); // NamedResponseValue
    let responses = field(1, &named); // Responses.response_code
    let yaml = format!("group: {group:?}\nkind: {kind}\nversion: {version}\n");
    let any = s(2, &yaml); // Any.yaml
    let ext = [s(1, "x-kubernetes-group-version-kind"), field(2, &any)].concat(); // NamedAny
    let mut op = s(5, id); // Operation.operation_id
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        op.extend(field(8, &query_param(p))); // Operation.parameters
    }
    op.extend(field(9, &responses));
    op.extend(field(13, &ext)); // Operation.vendor_extension
    op
}

/// The encoded document for the resources in `reg`.
pub fn document(reg: &Registry, version_label: &str) -> Vec<u8> {
    let info = [s(1, "Kubernetes"), s(2, version_label)].concat();
    let mut paths = Vec::new();
    for def in reg.all() {
        for v in &def.versions {
            let prefix = if def.group.is_empty() {
                format!("/api/{}", v.name)
            } else {
                format!("/apis/{}/{}", def.group, v.name)
            };
            let path = if def.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", def.plural)
            } else {
                format!("{prefix}/{}/{{name}}", def.plural)
            };
            let id = format!("patch{}{}", def.kind, v.name);
            let item = field(8, &patch_operation(&def.group, &v.name, &def.kind, &id)); // PathItem.patch
            let named = [s(1, &path), field(2, &item)].concat(); // NamedPathItem
            paths.extend(field(2, &named)); // Paths.path
        }
    }
    [s(1, "2.0"), field(2, &info), field(8, &paths)].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_varints_and_fields() {
        let mut v = Vec::new();
        varint(300, &mut v);
        assert_eq!(v, vec![0xac, 0x02]);
        assert_eq!(field(1, b"ab"), vec![0x0a, 2, b'a', b'b']);
        let doc = document(&Registry::with_builtins(), "v1.33.0");
        assert!(doc.starts_with(&[0x0a, 3, b'2', b'.', b'0']));
        let text = String::from_utf8_lossy(&doc);
        assert!(text.contains("/api/v1/persistentvolumes/{name}"));
        assert!(text.contains("fieldValidation"));
        assert!(text.contains("kind: PersistentVolume"));
    }
}
