//! The queue's promises, each with work that records what ran when (tokio's clock is
//! paused: instants are exact).

use std::sync::Mutex;

use tokio::sync::Notify;

use super::*;

/// What the work saw: names in start order, and the most names running at once.
#[derive(Default)]
struct Log {
    started: Vec<(String, Duration)>,
    running: usize,
    most_running: usize,
    running_names: HashSet<String>,
    overlapped: Vec<String>,
}

struct Harness {
    queue: WorkQueue,
    log: Arc<Mutex<Log>>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    start: Instant,
}

/// Starts a queue whose work takes `takes` and then answers `requeue(name, nth run)`.
fn harness(
    concurrency: usize,
    takes: Duration,
    requeue: impl Fn(&str, usize) -> Option<Duration> + Send + Sync + 'static,
) -> Harness {
    let (queue, requests) = WorkQueue::new();
    let log = Arc::new(Mutex::new(Log::default()));
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let requeue = Arc::new(requeue);
    let task = tokio::spawn({
        let (log, shutdown) = (log.clone(), shutdown.clone());
        run(
            requests,
            concurrency,
            shutdown,
            async {},
            move |name: Arc<str>| {
                let (log, requeue) = (log.clone(), requeue.clone());
                async move {
                    let nth = {
                        let mut l = log.lock().unwrap();
                        l.started.push((name.to_string(), start.elapsed()));
                        l.running += 1;
                        l.most_running = l.most_running.max(l.running);
                        if !l.running_names.insert(name.to_string()) {
                            l.overlapped.push(name.to_string());
                        }
                        l.started.iter().filter(|(n, _)| **n == *name).count()
                    };
                    tokio::time::sleep(takes).await;
                    let mut l = log.lock().unwrap();
                    l.running -= 1;
                    l.running_names.remove(&*name);
                    requeue(&name, nth)
                }
            },
        )
    });
    Harness {
        queue,
        log,
        shutdown,
        task,
        start,
    }
}

impl Harness {
    fn runs_of(&self, name: &str) -> Vec<Duration> {
        let l = self.log.lock().unwrap();
        l.started
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, at)| *at)
            .collect()
    }

    async fn stop(self) -> Arc<Mutex<Log>> {
        self.shutdown.cancel();
        self.task.await.unwrap();
        self.log
    }
}

async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn a_name_asked_for_many_times_while_waiting_runs_once() {
    let h = harness(1, Duration::from_secs(1), |_, _| None);
    h.queue.schedule_now("busy");
    for _ in 0..5 {
        h.queue.schedule_now("a");
    }
    settle(Duration::from_secs(10)).await;
    assert_eq!(h.runs_of("a").len(), 1);
    assert_eq!(h.runs_of("busy").len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_name_asked_for_while_running_runs_again_afterwards_never_at_once() {
    let h = harness(4, Duration::from_secs(2), |_, _| None);
    h.queue.schedule_now("a");
    settle(Duration::from_millis(500)).await;
    h.queue.schedule_now("a");
    h.queue.schedule_now("a");
    settle(Duration::from_secs(10)).await;
    let runs = h.runs_of("a");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[1] >= runs[0] + Duration::from_secs(2), "{runs:?}");
    let log = h.stop().await;
    assert!(log.lock().unwrap().overlapped.is_empty());
}

#[tokio::test(start_paused = true)]
async fn at_most_concurrency_names_run_at_once_and_all_of_them_run() {
    let h = harness(3, Duration::from_secs(1), |_, _| None);
    for i in 0..20 {
        h.queue.schedule_now(&format!("n{i}"));
    }
    settle(Duration::from_secs(30)).await;
    let log = h.stop().await;
    let l = log.lock().unwrap();
    assert_eq!(l.most_running, 3);
    let names: HashSet<_> = l.started.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names.len(), 20);
    assert_eq!(l.started.len(), 20);
}

#[tokio::test(start_paused = true)]
async fn a_requeue_runs_the_name_again_after_the_delay() {
    let h = harness(1, Duration::ZERO, |_, nth| {
        (nth < 3).then_some(Duration::from_secs(7))
    });
    h.queue.schedule_now("a");
    settle(Duration::from_secs(60)).await;
    let runs = h.runs_of("a");
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[1] - runs[0], Duration::from_secs(7));
    assert_eq!(runs[2] - runs[1], Duration::from_secs(7));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_earliest_request_wins_and_a_later_one_adds_nothing() {
    let h = harness(1, Duration::ZERO, |_, _| None);
    let start = h.start;
    h.queue.schedule_at("a", start + Duration::from_secs(10));
    h.queue.schedule_at("a", start + Duration::from_secs(3));
    h.queue.schedule_at("a", start + Duration::from_secs(5));
    settle(Duration::from_secs(30)).await;
    assert_eq!(h.runs_of("a"), vec![Duration::from_secs(3)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_while_running_and_a_requeue_run_once_at_the_earlier() {
    let h = harness(1, Duration::from_secs(2), |_, nth| {
        (nth == 1).then_some(Duration::from_secs(30))
    });
    h.queue.schedule_now("a");
    settle(Duration::from_secs(1)).await;
    h.queue.schedule_now("a");
    settle(Duration::from_secs(60)).await;
    let runs = h.runs_of("a");
    assert_eq!(runs, vec![Duration::ZERO, Duration::from_secs(2)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_retried_and_others_go_on() {
    let (queue, requests) = WorkQueue::new();
    let shutdown = CancellationToken::new();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn({
        let (runs, shutdown) = (runs.clone(), shutdown.clone());
        run(requests, 2, shutdown, async {}, move |name: Arc<str>| {
            let runs = runs.clone();
            async move {
                let nth = {
                    let mut r = runs.lock().unwrap();
                    r.push(name.to_string());
                    r.iter().filter(|n| **n == *name).count()
                };
                assert!(!(&*name == "bad" && nth == 1), "first run of bad fails");
                None
            }
        })
    });
    queue.schedule_now("bad");
    queue.schedule_now("good");
    tokio::time::sleep(PANIC_REQUEUE + Duration::from_secs(1)).await;
    shutdown.cancel();
    task.await.unwrap();
    let runs = runs.lock().unwrap();
    assert_eq!(runs.iter().filter(|n| *n == "bad").count(), 2, "{runs:?}");
    assert_eq!(runs.iter().filter(|n| *n == "good").count(), 1, "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_starts_nothing_new_and_waits_for_running_work() {
    let (queue, requests) = WorkQueue::new();
    let shutdown = CancellationToken::new();
    let release = Arc::new(Notify::new());
    let finished = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn({
        let (release, finished, shutdown) = (release.clone(), finished.clone(), shutdown.clone());
        run(requests, 1, shutdown, async {}, move |name: Arc<str>| {
            let (release, finished) = (release.clone(), finished.clone());
            async move {
                release.notified().await;
                finished.lock().unwrap().push(name.to_string());
                None
            }
        })
    });
    queue.schedule_now("running");
    queue.schedule_now("waiting");
    tokio::time::sleep(Duration::from_millis(10)).await;
    shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!task.is_finished(), "returned while work was running");
    release.notify_one();
    task.await.unwrap();
    assert_eq!(*finished.lock().unwrap(), vec!["running".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn nothing_runs_before_the_hold_ends_and_requests_meanwhile_are_kept_once() {
    let (queue, requests) = WorkQueue::new();
    let shutdown = CancellationToken::new();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let open = Arc::new(Notify::new());
    let task = tokio::spawn({
        let (runs, shutdown, open) = (runs.clone(), shutdown.clone(), open.clone());
        run(
            requests,
            4,
            shutdown,
            async move { open.notified().await },
            move |name: Arc<str>| {
                let runs = runs.clone();
                async move {
                    runs.lock().unwrap().push(name.to_string());
                    None
                }
            },
        )
    });
    for name in ["a", "b", "a", "a"] {
        queue.schedule_now(name);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(runs.lock().unwrap().is_empty(), "ran before the hold ended");
    open.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut ran = runs.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["a", "b"]);
    shutdown.cancel();
    task.await.unwrap();
}

#[test]
fn a_burst_gives_its_memory_back_once_it_is_over() {
    let mut schedule = Schedule::default();
    let now = Instant::now();
    for i in 0..5000 {
        schedule.request(format!("n{i}").into(), now);
    }
    assert!(schedule.due.capacity() >= 5000);
    let mut taken = Vec::new();
    while let Some(name) = schedule.take_due(now) {
        taken.push(name);
    }
    assert_eq!(taken.len(), 5000);
    for name in taken {
        schedule.finished(name, None);
    }
    assert!(
        schedule.due.capacity() <= 1024,
        "{}",
        schedule.due.capacity()
    );
    assert!(
        schedule.heap.capacity() <= 1024,
        "{}",
        schedule.heap.capacity()
    );
    assert!(schedule.running.capacity() <= 1024);
    assert!(schedule.running.is_empty() && schedule.due.is_empty());
}
