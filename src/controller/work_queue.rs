//! The reconcile queue: names of objects to reconcile, each due at an instant. A name is
//! queued once however often it is asked for (the earliest instant wins), never runs twice
//! at once (asked for while running, it runs again afterwards), and at most `concurrency`
//! names run at a time. It replaces kube-runtime's `Controller`, which needs a cache of
//! whole objects (docs/design.md §3.1: memory per tracked volume).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::error;

/// Asks for reconciles. Cheap to clone; requests made after the queue stopped are dropped.
#[derive(Clone, Debug)]
pub struct WorkQueue {
    requests: mpsc::UnboundedSender<(Arc<str>, Instant)>,
}

/// The receiving end, consumed by [`run`].
pub struct Requests(mpsc::UnboundedReceiver<(Arc<str>, Instant)>);

impl WorkQueue {
    /// A queue and the requests [`run`] serves.
    pub fn new() -> (Self, Requests) {
        let (requests, rx) = mpsc::unbounded_channel();
        (Self { requests }, Requests(rx))
    }

    /// Reconciles `name` as soon as a slot is free.
    pub fn schedule_now(&self, name: &str) {
        self.schedule_at(name, Instant::now());
    }

    /// Reconciles `name` at `at` or later.
    pub fn schedule_at(&self, name: &str, at: Instant) {
        // A closed channel means the queue stopped (shutdown): nothing is left to do.
        let _ = self.requests.send((name.into(), at));
    }
}

use crate::requeue::PANIC_REQUEUE;

#[derive(Default)]
struct Schedule {
    /// The instant each waiting name is due (the authority: heap entries may be stale).
    due: HashMap<Arc<str>, Instant>,
    heap: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    running: HashSet<Arc<str>>,
    /// Names asked for while running: they run again once done.
    again: HashMap<Arc<str>, Instant>,
}

impl Schedule {
    fn request(&mut self, name: Arc<str>, at: Instant) {
        if self.running.contains(&name) {
            let entry = self.again.entry(name).or_insert(at);
            *entry = (*entry).min(at);
            return;
        }
        match self.due.get(&name) {
            Some(&due) if due <= at => {}
            _ => {
                self.due.insert(name.clone(), at);
                self.heap.push(Reverse((at, name)));
            }
        }
    }

    /// The next name due by `now` that is not running, marked running.
    fn take_due(&mut self, now: Instant) -> Option<Arc<str>> {
        while let Some(Reverse((at, _))) = self.heap.peek() {
            if *at > now {
                return None;
            }
            let Reverse((at, name)) = self.heap.pop()?;
            if self.due.get(&name) != Some(&at) {
                continue; // superseded by an earlier request
            }
            self.due.remove(&name);
            self.running.insert(name.clone());
            return Some(name);
        }
        None
    }

    /// Gives back the memory of a burst (every object queued at start-up or on gaining
    /// leadership) once it is over: the containers keep their largest size otherwise.
    fn shrink_when_idle(&mut self) {
        const KEEP: usize = 1024;
        if self.due.is_empty() && self.due.capacity() > KEEP {
            self.due = HashMap::new();
            self.heap = BinaryHeap::new();
        }
        if self.running.is_empty() && self.running.capacity() > KEEP {
            self.running = HashSet::new();
        }
        if self.again.is_empty() && self.again.capacity() > KEEP {
            self.again = HashMap::new();
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    fn finished(&mut self, name: Arc<str>, requeue: Option<Instant>) {
        self.running.remove(&name);
        let again = self.again.remove(&name);
        let next = match (again, requeue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = next {
            self.request(name, at);
        }
        self.shrink_when_idle();
    }
}

/// Runs `work` for every requested name until `shutdown`, then waits for the running ones.
/// `work` returns when to run the name again (`None`: only when asked). Nothing runs before
/// `hold_until` completes (e.g. until the caches hold their first lists: a reconcile
/// before that would only be put off); requests are collected meanwhile.
pub async fn run<W, F>(
    Requests(mut requests): Requests,
    concurrency: usize,
    shutdown: CancellationToken,
    hold_until: impl Future<Output = ()>,
    work: W,
) where
    W: Fn(Arc<str>) -> F,
    F: Future<Output = Option<Duration>> + Send + 'static,
{
    let concurrency = concurrency.max(1);
    let mut schedule = Schedule::default();
    let mut tasks: JoinSet<(Arc<str>, Option<Duration>)> = JoinSet::new();
    let mut open = true;
    let mut hold = std::pin::pin!(hold_until);
    let mut held = true;
    loop {
        while !held && tasks.len() < concurrency {
            let Some(name) = schedule.take_due(Instant::now()) else {
                break;
            };
            let job = AssertUnwindSafe(work(name.clone())).catch_unwind();
            tasks.spawn(async move {
                match job.await {
                    Ok(requeue) => (name, requeue),
                    Err(_) => {
                        error!(%name, "reconcile panicked; retrying later");
                        (name, Some(PANIC_REQUEUE))
                    }
                }
            });
        }
        let wake = schedule
            .next_due()
            .filter(|_| !held && tasks.len() < concurrency);
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            () = &mut hold, if held => held = false,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                // Every job catches its own panic: an error here is an abort at shutdown.
                if let Ok((name, requeue)) = done {
                    schedule.finished(name, requeue.map(|d| Instant::now() + d));
                }
            }
            request = requests.recv(), if open => match request {
                Some((name, at)) => schedule.request(name, at),
                None => open = false,
            },
            _ = sleep_until(wake), if wake.is_some() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "work_queue_tests.rs"]
mod tests;
