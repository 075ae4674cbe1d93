//! The ID write after a conflict (docs/design.md §4.9): it re-reads, and then writes only
//! as the leader and never over an unregistration another leader started.

use std::sync::Mutex;

use super::*;

type Meanwhile = Box<dyn FnOnce(&InMemoryStatusStore) + Send>;

/// A store that runs `meanwhile` once, right before the first ID write: what another
/// leader did between the create and the write.
struct BeforeIdWrite {
    inner: InMemoryStatusStore,
    meanwhile: Mutex<Option<Meanwhile>>,
}

#[async_trait]
impl StatusStore for BeforeIdWrite {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        self.inner.load(path).await
    }
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        if matches!(update, StatusUpdate::Registered { .. }) {
            let meanwhile = self.meanwhile.lock().unwrap().take();
            if let Some(meanwhile) = meanwhile {
                meanwhile(&self.inner);
            }
        }
        self.inner.save(path, update, expect).await
    }
}

fn registrar_with(
    config: RegistrarConfig,
    p: &VolumePath,
    meanwhile: Meanwhile,
) -> (Arc<InMemoryBackend>, Arc<BeforeIdWrite>, Registrar) {
    let backend = Arc::new(InMemoryBackend::new());
    backend.add_disk(p);
    let store = Arc::new(BeforeIdWrite {
        inner: InMemoryStatusStore::default(),
        meanwhile: Mutex::new(Some(meanwhile)),
    });
    let registrar = Registrar::new(backend.clone(), store.clone(), config);
    (backend, store, registrar)
}

/// Another leader (a replica whose clock ran fast) started unregistering while the create
/// ran: the ID write lost its condition, re-read, and wrote `Registered` over
/// `Unregistering`.
#[tokio::test(start_paused = true)]
async fn an_id_write_never_replaces_an_unregistration() {
    let p = path(60);
    let q = p.clone();
    let (backend, store, registrar) = registrar_with(
        config(),
        &p,
        Box::new(move |store| store.write_behind(&q, &StatusUpdate::Unregistering)),
    );
    let result = registrar.register(&p).await;
    assert!(result.is_err(), "{result:?}");
    let stored = store.inner.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Unregistering));
    assert_eq!(stored.volume_id, None);
    assert_eq!(
        registrar.unsaved_ids(),
        1,
        "the ID stays in memory for the unregistration"
    );
    assert_eq!(backend.volumes_for(&p).len(), 1);

    // A next `register` does not store it over `Unregistering` either.
    let again = registrar.register(&p).await;
    assert!(again.is_err(), "{again:?}");
    assert_eq!(
        store.inner.get(&p).unwrap().phase,
        Some(Phase::Unregistering)
    );
    assert_eq!(backend.calls(op::CREATE), 1);

    // The unregistration removes the volume that landed.
    registrar.unregister(&p).await.unwrap();
    assert!(backend.volumes_for(&p).is_empty());
    assert_eq!(registrar.unsaved_ids(), 0);
}

/// The Lease passed between the create and the ID write, and the new leader changed the
/// status: the ID write after the conflict was not leader-fenced.
#[tokio::test(start_paused = true)]
async fn an_id_write_after_a_conflict_is_leader_fenced() {
    let (leading, rx) = tokio::sync::watch::channel(true);
    let p = path(62);
    let q = p.clone();
    let (backend, store, registrar) = registrar_with(
        config().with_leader(LeaderGate::new(rx)),
        &p,
        Box::new(move |store| {
            leading.send_replace(false);
            store.write_behind(
                &q,
                &StatusUpdate::Stalled {
                    reason: reason::TRANSIENT.into(),
                    message: "written by the new leader".into(),
                },
            );
        }),
    );
    let err = registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::NotLeader { .. }), "{err}");
    let stored = store.inner.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Registering));
    assert_eq!(stored.volume_id, None, "no write after losing the Lease");
    assert_eq!(registrar.unsaved_ids(), 1, "the ID stays in memory");
    assert_eq!(backend.volumes_for(&p).len(), 1);
}
