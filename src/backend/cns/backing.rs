//! The backing-disk URL of a registration,
//! `https://<host>/folder/<file path>?dcPath=<datacenter>&dsName=<datastore>`, and its
//! inverse (CNS reports the URL back on queries).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use url::Url;

use crate::volume_path::VolumePath;

/// Everything but RFC 3986 "unreserved" characters is escaped: spaces, `#`, `?`, `&`,
/// `+`, `=`, `%`, `/` (in query values) and every non-ASCII byte.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `host[:port]` of the vCenter URL as it appears in backing URLs (IPv6 in brackets).
pub(crate) fn authority(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

/// The backing-disk URL of `path` on the datastore `datastore` of the datacenter whose
/// inventory path (without leading `/`) is `datacenter_path`.
pub(crate) fn backing_url(
    authority: &str,
    datacenter_path: &str,
    datastore: &str,
    path: &VolumePath,
) -> String {
    let file = path
        .file_path()
        .split('/')
        .map(|segment| utf8_percent_encode(segment, COMPONENT).to_string())
        .collect::<Vec<_>>()
        .join("/");
    format!(
        "https://{authority}/folder/{file}?dcPath={}&dsName={}",
        utf8_percent_encode(datacenter_path, COMPONENT),
        utf8_percent_encode(datastore, COMPONENT),
    )
}

/// The volume path a backing URL points at; `None` for anything that is not a
/// `/folder/…?dsName=…` URL of a vmdk.
pub(crate) fn path_from_backing_url(raw: &str) -> Option<VolumePath> {
    let url = Url::parse(raw.trim()).ok()?;
    let file = url.path().strip_prefix("/folder/")?;
    let file = percent_decode_str(file).decode_utf8().ok()?;
    // Query values are form-encoded by some clients (`+` for a space): decode them as such.
    let datastore = url
        .query_pairs()
        .find(|(key, _)| key == "dsName")
        .map(|(_, value)| value.into_owned())?;
    VolumePath::parse(&format!("[{datastore}] {file}")).ok()
}

/// The volume path of a `[datastore] file` disk path as CNS reports it.
pub(crate) fn path_from_datastore_path(raw: &str) -> Option<VolumePath> {
    VolumePath::parse(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(raw: &str) -> VolumePath {
        VolumePath::parse(raw).unwrap()
    }

    #[test]
    fn plain_paths_are_unchanged() {
        let url = backing_url(
            "vc.example",
            "DC0",
            "LocalDS_0",
            &path("[LocalDS_0] kubevols/a.vmdk"),
        );
        assert_eq!(
            url,
            "https://vc.example/folder/kubevols/a.vmdk?dcPath=DC0&dsName=LocalDS_0"
        );
    }

    #[test]
    fn every_part_is_escaped() {
        let url = backing_url(
            "127.0.0.1:8443",
            "F0/DC 1",
            "ds #1&2",
            &path("[ds #1&2] my dir/a?b#c&d=e+f%g.vmdk"),
        );
        assert_eq!(
            url,
            "https://127.0.0.1:8443/folder/my%20dir/a%3Fb%23c%26d%3De%2Bf%25g.vmdk\
             ?dcPath=F0%2FDC%201&dsName=ds%20%231%262"
        );
    }

    #[test]
    fn non_ascii_is_utf8_escaped() {
        let url = backing_url("vc", "Zürich", "däta", &path("[däta] 日本/ß.vmdk"));
        assert_eq!(
            url,
            "https://vc/folder/%E6%97%A5%E6%9C%AC/%C3%9F.vmdk?dcPath=Z%C3%BCrich&dsName=d%C3%A4ta"
        );
    }

    #[test]
    fn urls_round_trip_to_the_same_path() {
        for raw in [
            "[LocalDS_0] kubevols/a.vmdk",
            "[ds #1&2] my dir/a?b#c&d=e+f%g.vmdk",
            "[däta] 日本/ß.vmdk",
        ] {
            let p = path(raw);
            let url = backing_url("vc:443", "F0/DC1", p.datastore(), &p);
            assert_eq!(path_from_backing_url(&url), Some(p), "{url}");
        }
    }

    #[test]
    fn form_encoded_query_values_are_understood() {
        let got = path_from_backing_url(
            "https://vc/folder/dir/a%20b.vmdk?dcPath=%2FDC0&dsName=shared+ds",
        );
        assert_eq!(got, Some(path("[shared ds] dir/a b.vmdk")));
    }

    #[test]
    fn other_urls_are_not_paths() {
        assert_eq!(path_from_backing_url("https://vc/sdk"), None);
        assert_eq!(path_from_backing_url("https://vc/folder/a.vmdk"), None);
        assert_eq!(
            path_from_backing_url("https://vc/folder/a.txt?dsName=x"),
            None
        );
        assert_eq!(path_from_backing_url("not a url"), None);
    }

    #[test]
    fn authority_keeps_the_port_and_ipv6_brackets() {
        let url = Url::parse("https://127.0.0.1:8989/sdk").unwrap();
        assert_eq!(authority(&url).as_deref(), Some("127.0.0.1:8989"));
        let url = Url::parse("https://vc.example/sdk").unwrap();
        assert_eq!(authority(&url).as_deref(), Some("vc.example"));
        let url = Url::parse("https://[::1]:443/sdk").unwrap();
        assert_eq!(authority(&url).as_deref(), Some("[::1]"));
    }
}
