//! Authentication and RBAC: tokens minted by `kubectl create token`, 401 for unknown ones,
//! and RBAC decisions by verb, resource, subresource, resourceName and namespace with the
//! API server's 403 message, through real kubectl (admin) and kube-rs (ServiceAccounts).
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube_testserver::{Options, UserInfo};
use serde_json::{Value, json};

const SA_USER: &str = "system:serviceaccount:volmig:volmig";

/// A kube-rs client that authenticates with `token`.
async fn client_with_token(env: &common::Env, token: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&env.server.kubeconfig_yaml_with_token(token))
        .expect("kubeconfig parses");
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("kube client")
}

/// The namespace and ServiceAccount `volmig/volmig`, and a token minted for it by
/// `kubectl create token`.
fn service_account_token(env: &common::Env) -> String {
    env.kubectl_ok(&["create", "namespace", "volmig"]);
    env.kubectl_ok(&["-n", "volmig", "create", "serviceaccount", "volmig"]);
    env.kubectl_ok(&[
        "-n",
        "volmig",
        "create",
        "token",
        "volmig",
        "--duration",
        "20m",
    ])
    .trim()
    .to_string()
}

/// The API error of a failed kube-rs call.
fn api_error<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>, message: &str) {
    let e = api_error(r);
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{e:?}");
    assert_eq!(e.message, message);
}

fn pv(name: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "vsphereVolume": {"volumePath": format!("[ds] kubevols/{name}.vmdk")}
        }
    }))
    .expect("pv")
}

#[tokio::test]
async fn kubectl_create_token_mints_a_service_account_identity() {
    let env = common::start().await;
    let token = service_account_token(&env);
    // JWT-shaped, with the ServiceAccount's claims and the requested lifetime.
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[1])
            .expect("base64 claims"),
    )
    .expect("json claims");
    assert_eq!(claims["sub"], SA_USER);
    assert_eq!(claims["kubernetes.io"]["namespace"], "volmig");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        1200
    );

    // The token authenticates as the ServiceAccount, which has no permissions yet.
    let sa = client_with_token(&env, &token).await;
    let pvs: Api<PersistentVolume> = Api::all(sa.clone());
    forbidden(
        pvs.list(&ListParams::default()).await,
        r#"persistentvolumes is forbidden: User "system:serviceaccount:volmig:volmig" cannot list resource "persistentvolumes" in API group "" at the cluster scope"#,
    );
    // Discovery and /version stay open to authenticated users.
    sa.apiserver_version().await.expect("version");
    kube::discovery::Discovery::new(sa.clone())
        .run()
        .await
        .expect("discovery");

    let stats = env.server.stats();
    assert_eq!(stats.forbidden, 1);
    assert_eq!(stats.forbidden_for(SA_USER), 1);
    assert_eq!(stats.forbidden_count("list", "persistentvolumes"), 1);
    assert_eq!(stats.forbidden_messages.len(), 1);

    // Unknown tokens are 401, like the real server; so is a token of a deleted account.
    let bogus = client_with_token(&env, "not-a-token").await;
    let e = api_error(
        Api::<PersistentVolume>::all(bogus)
            .list(&ListParams::default())
            .await,
    );
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    env.kubectl_ok(&["-n", "volmig", "delete", "serviceaccount", "volmig"]);
    let e = api_error(pvs.list(&ListParams::default()).await);
    assert_eq!(e.code, 401);
    assert_eq!(env.server.stats().unauthorized, 2);

    // TokenRequest validation and a missing account, as kubectl reports them.
    let err = env.kubectl_err(&["-n", "volmig", "create", "token", "volmig"]);
    assert!(
        err.contains(r#"serviceaccounts "volmig" not found"#),
        "{err}"
    );
    env.kubectl_ok(&["-n", "volmig", "create", "serviceaccount", "volmig"]);
    let err = env.kubectl_err(&[
        "-n",
        "volmig",
        "create",
        "token",
        "volmig",
        "--duration",
        "1m",
    ]);
    assert!(
        err.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"),
        "{err}"
    );
}

const RBAC: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pv-reader}
rules:
  - apiGroups: [""]
    resources: ["persistentvolumes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["persistentvolumes/status"]
    verbs: ["patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: pv-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pv-reader}
subjects:
  - {kind: ServiceAccount, name: volmig, namespace: volmig}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cm-editor}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm-editor, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cm-editor}
subjects:
  - {kind: ServiceAccount, name: volmig, namespace: volmig}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leader, namespace: kube-system}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["volmig"]
    verbs: ["get", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leader}
subjects:
  - {kind: ServiceAccount, name: volmig, namespace: volmig}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: broken, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: does-not-exist}
subjects:
  - {kind: ServiceAccount, name: volmig, namespace: volmig}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: devs-read-namespaces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ns-reader}
subjects:
  - {kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ns-reader}
rules:
  - apiGroups: [""]
    resources: ["namespaces"]
    verbs: ["get", "list"]
"#;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).expect("cm")
}

#[tokio::test]
async fn rbac_decides_by_verb_resource_subresource_name_and_namespace() {
    let env = common::start().await;
    let token = service_account_token(&env);
    let rbac = env.file("rbac.yaml", RBAC);
    // kubectl apply of every RBAC kind (twice: the second is a no-op update).
    env.kubectl_ok(&["apply", "-f", &rbac]);
    let again = env.kubectl_ok(&["apply", "-f", &rbac]);
    assert!(
        again.contains("clusterrole.rbac.authorization.k8s.io/pv-reader unchanged"),
        "{again}"
    );
    let admin = env.client().await;
    Api::<PersistentVolume>::all(admin.clone())
        .create(&PostParams::default(), &pv("pv1"))
        .await
        .expect("admin creates a PV");
    env.server.reset_stats();

    let sa = client_with_token(&env, &token).await;
    let u = SA_USER;

    // Verbs on a cluster-scoped resource, and its status subresource.
    let pvs: Api<PersistentVolume> = Api::all(sa.clone());
    assert_eq!(
        pvs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    pvs.get("pv1").await.expect("get");
    let mut watch = pvs
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch is allowed")
        .boxed();
    match watch.next().await {
        Some(Ok(WatchEvent::Added(p))) => assert_eq!(p.metadata.name.as_deref(), Some("pv1")),
        other => panic!("first watch event: {other:?}"),
    }
    forbidden(
        pvs.delete("pv1", &DeleteParams::default()).await,
        &format!(
            r#"persistentvolumes "pv1" is forbidden: User "{u}" cannot delete resource "persistentvolumes" in API group "" at the cluster scope"#
        ),
    );
    forbidden(
        pvs.create(&PostParams::default(), &pv("pv2")).await,
        &format!(
            r#"persistentvolumes is forbidden: User "{u}" cannot create resource "persistentvolumes" in API group "" at the cluster scope"#
        ),
    );
    let status = Patch::Merge(json!({"status": {"message": "hi"}}));
    pvs.patch_status("pv1", &PatchParams::default(), &status)
        .await
        .expect("patch of persistentvolumes/status is allowed");
    forbidden(
        pvs.patch(
            "pv1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await,
        &format!(
            r#"persistentvolumes "pv1" is forbidden: User "{u}" cannot patch resource "persistentvolumes" in API group "" at the cluster scope"#
        ),
    );
    forbidden(
        pvs.replace_status(
            "pv1",
            &PostParams::default(),
            &pvs.get("pv1").await.unwrap(),
        )
        .await,
        &format!(
            r#"persistentvolumes "pv1" is forbidden: User "{u}" cannot update resource "persistentvolumes/status" in API group "" at the cluster scope"#
        ),
    );

    // A RoleBinding to a ClusterRole grants in its namespace only.
    let team_a: Api<ConfigMap> = Api::namespaced(sa.clone(), "team-a");
    team_a
        .create(&PostParams::default(), &cm("c1"))
        .await
        .expect("create in team-a");
    team_a
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete in team-a");
    let team_b: Api<ConfigMap> = Api::namespaced(sa.clone(), "team-b");
    forbidden(
        team_b.create(&PostParams::default(), &cm("c1")).await,
        &format!(
            r#"configmaps is forbidden: User "{u}" cannot create resource "configmaps" in API group "" in the namespace "team-b": RBAC: role.rbac.authorization.k8s.io "does-not-exist" not found"#
        ),
    );
    forbidden(
        Api::<ConfigMap>::all(sa.clone())
            .list(&ListParams::default())
            .await,
        &format!(
            r#"configmaps is forbidden: User "{u}" cannot list resource "configmaps" in API group "" at the cluster scope"#
        ),
    );

    // resourceNames: get/patch only the named Lease; create by any name; no list.
    let leases: Api<Lease> = Api::namespaced(sa.clone(), "kube-system");
    let e = api_error(leases.get("volmig").await);
    assert_eq!(e.code, 404, "allowed, but not there yet: {e:?}");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "volmig"}, "spec": {"holderIdentity": "a"}}),
    )
    .unwrap();
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    leases.get("volmig").await.expect("get own lease");
    leases
        .patch(
            "volmig",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "b"}})),
        )
        .await
        .expect("patch own lease");
    forbidden(
        leases
            .replace("volmig", &PostParams::default(), &lease)
            .await,
        &format!(
            r#"leases.coordination.k8s.io "volmig" is forbidden: User "{u}" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system""#
        ),
    );
    forbidden(
        leases.get("other").await,
        &format!(
            r#"leases.coordination.k8s.io "other" is forbidden: User "{u}" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system""#
        ),
    );
    forbidden(
        leases.list(&ListParams::default()).await,
        &format!(
            r#"leases.coordination.k8s.io is forbidden: User "{u}" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system""#
        ),
    );
    // A list narrowed to the one name by a field selector is authorized for that name (and
    // still denied: the rule grants get, not list).
    forbidden(
        leases
            .list(&ListParams::default().fields("metadata.name=volmig"))
            .await,
        &format!(
            r#"leases.coordination.k8s.io "volmig" is forbidden: User "{u}" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system""#
        ),
    );
    forbidden(
        Api::<Lease>::namespaced(sa.clone(), "team-a")
            .create(&PostParams::default(), &lease)
            .await,
        &format!(
            r#"leases.coordination.k8s.io is forbidden: User "{u}" cannot create resource "leases" in API group "coordination.k8s.io" in the namespace "team-a""#
        ),
    );

    // Watches are verb watch, also as a list with watch=true.
    forbidden(
        Api::<ConfigMap>::namespaced(sa.clone(), "team-b")
            .watch(&WatchParams::default(), "0")
            .await
            .map(|_| ()),
        &format!(
            r#"configmaps is forbidden: User "{u}" cannot watch resource "configmaps" in API group "" in the namespace "team-b": RBAC: role.rbac.authorization.k8s.io "does-not-exist" not found"#
        ),
    );

    let stats = env.server.stats();
    assert_eq!(stats.forbidden, 12, "{:#?}", stats.forbidden_messages);
    assert_eq!(stats.forbidden_for(u), 12);
    assert_eq!(stats.forbidden_count("patch", "persistentvolumes"), 1);
    assert_eq!(
        stats.forbidden_count("update", "persistentvolumes/status"),
        1
    );
    assert_eq!(stats.forbidden_count("update", "persistentvolumes"), 1);
    assert_eq!(stats.forbidden_count("list", "leases"), 2);
    assert_eq!(stats.forbidden_count("watch", "configmaps"), 1);
    assert_eq!(stats.forbidden_count("get", "persistentvolumes"), 0);

    // Group subjects, and the namespace of /api/v1/namespaces/{name}.
    env.server.add_token(
        "jane-token",
        UserInfo {
            name: "jane".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
        },
    );
    let jane = client_with_token(&env, "jane-token").await;
    let namespaces: Api<Namespace> = Api::all(jane.clone());
    namespaces
        .get("team-a")
        .await
        .expect("a devs member reads namespaces");
    forbidden(
        namespaces.delete("team-a", &DeleteParams::default()).await,
        r#"namespaces "team-a" is forbidden: User "jane" cannot delete resource "namespaces" in API group "" in the namespace "team-a""#,
    );
    forbidden(
        Api::<PersistentVolume>::all(jane)
            .list(&ListParams::default())
            .await,
        r#"persistentvolumes is forbidden: User "jane" cannot list resource "persistentvolumes" in API group "" at the cluster scope"#,
    );

    // Admin (system:masters) is never denied; deleting the binding revokes the grant.
    env.kubectl_ok(&["delete", "clusterrolebinding", "pv-reader"]);
    forbidden(
        pvs.get("pv1").await,
        &format!(
            r#"persistentvolumes "pv1" is forbidden: User "{u}" cannot get resource "persistentvolumes" in API group "" at the cluster scope"#
        ),
    );
    Api::<PersistentVolume>::all(admin)
        .delete("pv1", &DeleteParams::default())
        .await
        .expect("admin deletes");
}

async fn can_i(client: &kube::Client, attrs: Value) -> (bool, String) {
    let review: SelfSubjectAccessReview =
        serde_json::from_value(json!({"spec": attrs})).expect("review");
    let out = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    let status = out.status.expect("status");
    (status.allowed, status.reason.unwrap_or_default())
}

#[tokio::test]
async fn self_subject_access_reviews_answer_can_i() {
    let env = common::start().await;
    let token = service_account_token(&env);
    env.kubectl_ok(&["apply", "-f", &env.file("rbac.yaml", RBAC)]);
    let sa = client_with_token(&env, &token).await;
    let (allowed, reason) = can_i(
        &sa,
        json!({"resourceAttributes": {"verb": "list", "resource": "persistentvolumes"}}),
    )
    .await;
    assert!(allowed);
    assert_eq!(
        reason,
        r#"RBAC: allowed by ClusterRoleBinding "pv-reader" of ClusterRole "pv-reader" to ServiceAccount "volmig/volmig""#
    );
    let (allowed, _) = can_i(
        &sa,
        json!({"resourceAttributes": {"verb": "delete", "resource": "persistentvolumes", "name": "x"}}),
    )
    .await;
    assert!(!allowed);
    let (allowed, reason) = can_i(
        &sa,
        json!({"resourceAttributes": {"verb": "get", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-system", "name": "volmig"}}),
    )
    .await;
    assert!(allowed, "{reason}");
    assert!(
        reason.contains(r#"RoleBinding "leader/kube-system" of Role "leader""#),
        "{reason}"
    );
    let (allowed, _) = can_i(
        &sa,
        json!({"nonResourceAttributes": {"verb": "get", "path": "/apis"}}),
    )
    .await;
    assert!(allowed);
    let (allowed, _) = can_i(
        &sa,
        json!({"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}),
    )
    .await;
    assert!(!allowed);
    // kubectl auth can-i as the admin (kubectl sends no credentials over plain HTTP).
    assert_eq!(
        env.kubectl_ok(&["auth", "can-i", "delete", "persistentvolumes"])
            .trim(),
        "yes"
    );
}

#[tokio::test]
async fn anonymous_requests_are_anonymous_when_asked() {
    let env = common::start_with(Options {
        anonymous_is_admin: false,
        ..Options::default()
    })
    .await;
    // kubectl sends no token over plain HTTP: it is system:anonymous now.
    let err = env.kubectl_err(&["get", "namespaces"]);
    assert!(err.contains("Error from server (Forbidden)"), "{err}");
    let messages = env.server.stats().forbidden_messages;
    assert!(
        messages.contains_key(r#"forbidden: User "system:anonymous" cannot get path "/api""#),
        "{messages:#?}"
    );
    // /version stays public; the admin token still works.
    let version = env.kubectl_ok(&["version", "-o", "json"]);
    assert!(version.contains("serverVersion"), "{version}");
    let admin = env.client().await;
    Api::<Namespace>::all(admin)
        .list(&ListParams::default())
        .await
        .expect("admin lists");
    assert!(env.server.stats().forbidden_by_user["system:anonymous"] >= 1);
}
