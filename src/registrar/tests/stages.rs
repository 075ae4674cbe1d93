//! `volmig_registration_stage_seconds`: where a registration's time goes.

use super::*;
use crate::metrics::{Metrics, RegistrationStage};

/// `_count` and `_sum` of one stage in the exposition.
fn stage(metrics: &Metrics, stage: RegistrationStage) -> (f64, f64) {
    let text = metrics.encode();
    let value = |series: &str| {
        let head = format!(
            "volmig_registration_stage_seconds_{series}{{stage=\"{}\"}} ",
            stage.as_str()
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&head))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {head} in:\n{text}"))
    };
    (value("count"), value("sum"))
}

#[tokio::test(start_paused = true)]
async fn a_registration_records_each_stage_once() {
    let metrics = Metrics::new();
    let f = fixture(config().with_metrics(metrics.clone()));
    let p = path(1);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_millis(50));
    let started = tokio::time::Instant::now();
    let registration = f.registrar.register(&p).await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert!(!registration.adopted);
    let mut total = 0.0;
    for &s in RegistrationStage::ALL {
        let (count, sum) = stage(&metrics, s);
        assert_eq!(count, 1.0, "{}", s.as_str());
        total += sum;
    }
    let (_, vcenter) = stage(&metrics, RegistrationStage::VcenterCall);
    assert!(
        vcenter >= 0.05,
        "the create's 50 ms are vCenter time: {vcenter}"
    );
    assert!(
        (total - elapsed).abs() < 1e-6,
        "the stages add up to the time in the registrar: {total} vs {elapsed}"
    );

    // Nothing to do the second time: not a registration, nothing recorded.
    let again = f.registrar.register(&p).await.unwrap();
    assert!(again.unchanged);
    for &s in RegistrationStage::ALL {
        assert_eq!(stage(&metrics, s).0, 1.0, "{}", s.as_str());
    }
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_backend_slot_is_its_own_stage() {
    let metrics = Metrics::new();
    let f = fixture(
        config()
            .with_max_concurrent(1)
            .with_metrics(metrics.clone()),
    );
    f.backend
        .set_latency(op::CREATE, Duration::from_millis(100));
    let tasks: Vec<_> = (1..=2)
        .map(|n| {
            let (r, p) = (f.registrar.clone(), path(n));
            f.backend.add_disk(&p);
            tokio::spawn(async move { r.register(&p).await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let (count, waited) = stage(&metrics, RegistrationStage::BackendSlotWait);
    assert_eq!(count, 2.0);
    assert!(
        waited >= 0.1,
        "one registration waited for the other's create: {waited}"
    );
    let (_, locked) = stage(&metrics, RegistrationStage::PathLockWait);
    assert!(
        locked < 0.001,
        "two paths never wait for each other's lock: {locked}"
    );
}
