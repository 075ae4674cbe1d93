//! The kubeconfig clients use to reach the server.

/// Name of the cluster, context and user entries.
pub const NAME: &str = "kube-testserver";

/// A kubeconfig with one cluster at `url`, a current context and the admin token (user
/// `admin`, group `system:masters`).
pub fn render(url: &str) -> String {
    render_with_token(url, crate::auth::ADMIN_TOKEN)
}

/// A kubeconfig with one cluster at `url`, a current context and a user with `token`.
pub fn render_with_token(url: &str, token: &str) -> String {
    let token = serde_json::Value::String(token.to_string());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {NAME}
  cluster:
    server: {url}
contexts:
- name: {NAME}
  context:
    cluster: {NAME}
    user: {NAME}
    namespace: default
current-context: {NAME}
preferences: {{}}
users:
- name: {NAME}
  user:
    token: {token}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_and_points_at_the_server() {
        let yaml = render("http://127.0.0.1:1234");
        let v: serde_json::Value = serde_saphyr::from_str(&yaml).expect("yaml");
        assert_eq!(v["current-context"], NAME);
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(v["users"][0]["user"]["token"], "kube-testserver-token");
    }
}
