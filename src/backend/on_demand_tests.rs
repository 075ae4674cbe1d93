use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::backend::memory::InMemoryBackend;

fn transient(message: &str) -> BackendError {
    BackendError::new(ErrorClass::Transient, "Login", "Timeout", message)
}

fn invalid_login() -> BackendError {
    BackendError::new(
        ErrorClass::NotAuthenticated,
        "Login",
        INVALID_LOGIN,
        "login to https://vc.example/sdk as user 'admin' failed: Login failure",
    )
}

/// A connect function whose outcomes are scripted: `Ok` unless the next scripted outcome
/// says otherwise; counts attempts.
#[derive(Clone, Default)]
struct Script {
    attempts: Arc<AtomicUsize>,
    refuse: Arc<Mutex<bool>>,
    version: Arc<Mutex<u8>>,
    latency: Duration,
}

impl Script {
    fn backend(&self, backoff: LoginBackoff) -> Arc<OnDemandBackend> {
        let connect = self.clone();
        let probe = self.clone();
        Arc::new(OnDemandBackend::new(
            move || {
                let s = connect.clone();
                async move {
                    s.attempts.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(s.latency).await;
                    if *s.refuse.lock().unwrap() {
                        Err(invalid_login())
                    } else {
                        Ok(Arc::new(InMemoryBackend::new()) as Arc<dyn VolumeBackend>)
                    }
                }
            },
            move || Version::of(&[*probe.version.lock().unwrap()]),
            backoff,
        ))
    }
    fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
    fn set_refuse(&self, refuse: bool) {
        *self.refuse.lock().unwrap() = refuse;
    }
    fn rotate(&self) {
        *self.version.lock().unwrap() += 1;
    }
}

const BACKOFF: LoginBackoff = LoginBackoff {
    initial: Duration::from_secs(60),
    max: Duration::from_secs(600),
};

#[test]
fn backoff_doubles_up_to_the_cap() {
    let secs: Vec<u64> = (1..=6).map(|n| BACKOFF.delay(n).as_secs()).collect();
    assert_eq!(secs, [60, 120, 240, 480, 600, 600]);
    assert_eq!(BACKOFF.delay(u32::MAX).as_secs(), 600);
}

#[tokio::test]
async fn connects_once_on_first_use_and_retries_failed_connects() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = attempts.clone();
    let backend = OnDemandBackend::with_fixed_credentials(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err(transient("vCenter did not answer"))
            } else {
                Ok(Arc::new(InMemoryBackend::new()) as Arc<dyn VolumeBackend>)
            }
        }
    });
    assert!(
        backend.connected().is_none(),
        "no login before the first call"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
    let first = backend.list_volumes(None).await;
    assert_eq!(first.unwrap_err().class, ErrorClass::Transient);
    backend.list_volumes(None).await.unwrap();
    backend.list_volumes(None).await.unwrap();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "one failed and one good connect"
    );
    assert!(backend.connected().is_some());
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_refused_login_and_then_fail_fast() {
    let script = Script {
        latency: Duration::from_millis(500),
        ..Script::default()
    };
    script.set_refuse(true);
    let backend = script.backend(BACKOFF);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let b = backend.clone();
            tokio::spawn(async move { b.list_volumes(None).await })
        })
        .collect();
    for call in calls {
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.class, ErrorClass::Permanent, "{err}");
        assert_eq!(err.fault, INVALID_LOGIN);
        assert!(err.message.contains("https://vc.example/sdk"), "{err}");
        assert!(err.message.contains("'admin'"), "{err}");
    }
    assert_eq!(script.attempts(), 1, "eight callers, one login");

    // Within the wait: no attempt at all, the same clear error.
    for _ in 0..20 {
        tokio::time::advance(Duration::from_secs(2)).await;
        let err = backend.list_volumes(None).await.unwrap_err();
        assert_eq!(
            (err.class, err.fault.as_str()),
            (ErrorClass::Permanent, INVALID_LOGIN)
        );
        assert!(err.message.contains("does not log in again"), "{err}");
    }
    assert_eq!(script.attempts(), 1);

    // After the wait, one more attempt; refused again, the wait doubles.
    tokio::time::advance(Duration::from_secs(21)).await;
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(script.attempts(), 2);
    tokio::time::advance(Duration::from_secs(119)).await;
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(script.attempts(), 2, "second wait is 120 s");
    tokio::time::advance(Duration::from_secs(2)).await;
    script.set_refuse(false);
    backend.list_volumes(None).await.unwrap();
    assert_eq!(script.attempts(), 3);
    backend.list_volumes(None).await.unwrap();
    assert_eq!(script.attempts(), 3, "connected: no more logins");
}

#[tokio::test(start_paused = true)]
async fn changed_credentials_are_tried_at_once() {
    let script = Script::default();
    script.set_refuse(true);
    let backend = script.backend(BACKOFF);
    backend.list_volumes(None).await.unwrap_err();
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(script.attempts(), 1);
    // Rotated to another wrong password: one attempt at once, then backoff again.
    script.rotate();
    backend.list_volumes(None).await.unwrap_err();
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(script.attempts(), 2);
    // Fixed: used at once, no wait.
    script.rotate();
    script.set_refuse(false);
    backend.list_volumes(None).await.unwrap();
    assert_eq!(script.attempts(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_rotation_reconnects_and_a_bad_one_keeps_the_working_session() {
    let script = Script::default();
    let backend = script.backend(BACKOFF);
    backend.list_volumes(None).await.unwrap();
    let first = backend.connected().unwrap();
    script.rotate();
    backend.list_volumes(None).await.unwrap();
    assert_eq!(script.attempts(), 2, "new credentials: new login");
    let second = backend.connected().unwrap();
    assert!(!Arc::ptr_eq(&first, &second));

    // New credentials refused: the current session keeps working, no login storm.
    script.rotate();
    script.set_refuse(true);
    for _ in 0..5 {
        backend.list_volumes(None).await.unwrap();
    }
    assert_eq!(script.attempts(), 3);
    assert!(Arc::ptr_eq(&backend.connected().unwrap(), &second));
}

/// A connected backend whose session re-login is refused on every call.
struct Refusing(AtomicUsize);

#[async_trait]
impl VolumeBackend for Refusing {
    async fn disk_uuid(&self, _: &VolumePath) -> Result<String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(invalid_login())
    }
    async fn find_volumes(&self, _: &str, _: &VolumePath) -> Result<Vec<CnsVolume>> {
        Err(invalid_login())
    }
    async fn create_volume(&self, _: &CreateVolumeRequest) -> Result<VolumeId> {
        Err(invalid_login())
    }
    async fn delete_volume(&self, _: &VolumeId) -> Result<()> {
        Err(invalid_login())
    }
    async fn list_volumes(&self, _: Option<String>) -> Result<VolumePage> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(invalid_login())
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_relogin_drops_the_connection_and_backs_off() {
    let connects = Arc::new(AtomicUsize::new(0));
    let refusing = Arc::new(Refusing(AtomicUsize::new(0)));
    let version = Arc::new(Mutex::new(0u8));
    let (c, r, v) = (connects.clone(), refusing.clone(), version.clone());
    let backend = OnDemandBackend::new(
        move || {
            c.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            async move { Ok(r as Arc<dyn VolumeBackend>) }
        },
        move || Version::of(&[*v.lock().unwrap()]),
        BACKOFF,
    );
    let err = backend.list_volumes(None).await.unwrap_err();
    assert_eq!(
        (err.class, err.fault.as_str()),
        (ErrorClass::Permanent, INVALID_LOGIN)
    );
    assert!(backend.connected().is_none(), "refused session dropped");
    for _ in 0..5 {
        backend.list_volumes(None).await.unwrap_err();
    }
    assert_eq!(connects.load(Ordering::SeqCst), 1);
    assert_eq!(
        refusing.0.load(Ordering::SeqCst),
        1,
        "no call while backing off"
    );
    // The file changed since that session logged in: connect again at once.
    *version.lock().unwrap() += 1;
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(connects.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn waiters_share_a_transient_connect_failure() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = attempts.clone();
    let backend = Arc::new(OnDemandBackend::with_fixed_credentials(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err::<Arc<dyn VolumeBackend>, _>(transient("vCenter did not answer"))
        }
    }));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let b = backend.clone();
            tokio::spawn(async move { b.list_volumes(None).await })
        })
        .collect();
    for call in calls {
        assert_eq!(
            call.await.unwrap().unwrap_err().class,
            ErrorClass::Transient
        );
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    backend.list_volumes(None).await.unwrap_err();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "a later call tries again"
    );
}

#[test]
fn invalid_login_is_recognised() {
    assert!(is_invalid_login(&invalid_login()));
    let expired = BackendError::new(
        ErrorClass::NotAuthenticated,
        "CnsQueryVolume",
        "NotAuthenticated",
        "session expired",
    );
    assert!(!is_invalid_login(&expired));
    let on_login = BackendError::new(
        ErrorClass::NotAuthenticated,
        "Login",
        "NotAuthenticated",
        "x",
    );
    assert!(is_invalid_login(&on_login));
}
