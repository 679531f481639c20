//! Politeness per host: every request cardgate sends to an agent's host (card fetches, key sets,
//! token endpoints, probes over HTTP and gRPC, refreshes an operator asks for) waits for its
//! turn here. At most [`HostLimits::concurrency`] are in flight to one address, starts are at
//! least [`HostLimits::interval`] apart, and a `429` or `503` with `Retry-After` leaves the host
//! alone until then.
//!
//! Within a process the limits are kept in memory. With a [`SharedHosts`] (the service passes
//! its store), each start is also granted by the database, so several replicas together keep
//! the same limits: a lease per request in flight, and the next free start per host.
//!
//! A host is the address its name resolves to (the policy-checked one cardgate dials), so many
//! agents of one provider on many subdomains or ports share one budget.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::politeness::{self, HostLimits};
use crate::domain::time::{self, Timestamp};

/// A boxed future, for the object-safe [`SharedHosts`].
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The budget of each host kept where every replica sees it.
pub trait SharedHosts: Send + Sync {
    /// Takes a lease `lease` on one of `host`'s slots, until `lease_until`, and reserves the
    /// host's next start: `Ok(Some(start))` when granted (the caller starts no earlier),
    /// `Ok(None)` when every slot is taken.
    fn acquire<'a>(
        &'a self,
        host: &'a str,
        lease: &'a str,
        limits: &'a HostLimits,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Pending<'a, Result<Option<Timestamp>, String>>;

    /// Gives lease `lease` back.
    fn release<'a>(&'a self, host: &'a str, lease: &'a str) -> Pending<'a, Result<(), String>>;

    /// Leaves `host` alone until `until` (a later back-off already recorded stands).
    fn back_off<'a>(&'a self, host: &'a str, until: Timestamp) -> Pending<'a, Result<(), String>>;
}

/// How often a request asks again for a slot that another replica holds.
const BUSY_POLL: Duration = Duration::from_millis(25);

/// Hosts (and host names) remembered in memory before idle ones are forgotten.
const REMEMBERED: usize = 4096;

/// How long a host name's address is taken as known, as a short DNS TTL would.
pub const NAME_TTL: Duration = Duration::from_secs(60);

/// One process's view of every host's budget, and the shared one if there is one.
pub struct HostGate {
    limits: HostLimits,
    /// How long a shared lease lasts if its holder never gives it back (a crash).
    lease_for: Duration,
    hosts: Mutex<HashMap<IpAddr, Arc<Host>>>,
    /// Host names and the address each was last found at, so that the key of a request's turn
    /// does not cost a DNS lookup per request.
    names: Mutex<HashMap<String, (IpAddr, Instant)>>,
    shared: Option<Arc<dyn SharedHosts>>,
}

struct Host {
    slots: Arc<Semaphore>,
    timing: Mutex<Timing>,
}

#[derive(Default)]
struct Timing {
    next_free: Option<Timestamp>,
    backoff_until: Option<Timestamp>,
}

/// A turn at a host: held from the request's start until its response head.
pub struct HostPermit {
    _local: OwnedSemaphorePermit,
    _shared: Option<SharedLease>,
}

/// A lease on a shared slot, given back when dropped. In the background: a lease that is never
/// given back (the process died) expires by itself.
struct SharedLease {
    shared: Arc<dyn SharedHosts>,
    host: String,
    lease: String,
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, host, lease) = (
            self.shared.clone(),
            std::mem::take(&mut self.host),
            std::mem::take(&mut self.lease),
        );
        runtime.spawn(async move {
            if let Err(e) = shared.release(&host, &lease).await {
                tracing::debug!(%host, error = %e, "giving a host lease back failed; it expires");
            }
        });
    }
}

/// The host asked to be left alone until `until`, further off than a request waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub until: Timestamp,
}

impl HostGate {
    pub fn new(limits: HostLimits, lease_for: Duration) -> Self {
        Self {
            limits: HostLimits {
                concurrency: limits.concurrency.max(1),
                ..limits
            },
            lease_for,
            hosts: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            shared: None,
        }
    }

    /// Keeps the budgets in `shared` too, so that replicas keep the limits together.
    pub fn with_shared(mut self, shared: Arc<dyn SharedHosts>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The address `name` was found to be dialled at, if that was recently.
    pub fn remembered(&self, name: &str) -> Option<IpAddr> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names
            .get(name)
            .filter(|(_, at)| at.elapsed() < NAME_TTL)
            .map(|(addr, _)| *addr)
    }

    /// Remembers the address `name` is dialled at, for [`NAME_TTL`].
    pub fn remember(&self, name: &str, addr: IpAddr) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if names.len() >= REMEMBERED && !names.contains_key(name) {
            names.retain(|_, (_, at)| at.elapsed() < NAME_TTL);
            if names.len() >= REMEMBERED {
                names.clear();
            }
        }
        names.insert(name.to_string(), (addr, Instant::now()));
    }

    fn host(&self, addr: IpAddr) -> Arc<Host> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if hosts.len() >= REMEMBERED && !hosts.contains_key(&addr) {
            let now = time::now();
            let concurrency = self.limits.concurrency as usize;
            // Forget hosts nobody is waiting on, with no spacing or back-off still to keep.
            hosts.retain(|_, host| {
                let timing = host.timing.lock().unwrap_or_else(|e| e.into_inner());
                host.slots.available_permits() < concurrency
                    || timing.next_free.is_some_and(|t| t > now)
                    || timing.backoff_until.is_some_and(|t| t > now)
            });
        }
        hosts
            .entry(addr)
            .or_insert_with(|| {
                Arc::new(Host {
                    slots: Arc::new(Semaphore::new(self.limits.concurrency as usize)),
                    timing: Mutex::new(Timing::default()),
                })
            })
            .clone()
    }

    /// Waits for a turn at `addr`; [`Throttled`] when the host's back-off ends further off than
    /// [`HostLimits::max_wait`].
    pub async fn acquire(&self, addr: IpAddr) -> Result<HostPermit, Throttled> {
        let host = self.host(addr);
        let key = addr.to_string();
        let max_wait = chrono::Duration::from_std(self.limits.max_wait).unwrap_or_default();
        let interval = chrono::Duration::from_std(self.limits.interval).unwrap_or_default();
        let too_far = |start: Timestamp| start > time::now() + max_wait;
        let throttled = |host: &Host| {
            let timing = host.timing.lock().unwrap_or_else(|e| e.into_inner());
            timing.backoff_until.filter(|&t| too_far(t))
        };
        if let Some(until) = throttled(&host) {
            return Err(Throttled { until });
        }
        let local = host
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        // The back-off may have been set while this request queued for a slot.
        if let Some(until) = throttled(&host) {
            return Err(Throttled { until });
        }
        let start = {
            let mut timing = host.timing.lock().unwrap_or_else(|e| e.into_inner());
            let start = politeness::start_at(time::now(), timing.next_free, timing.backoff_until);
            timing.next_free = Some(start + interval);
            start
        };
        sleep_until(start).await;
        let shared = match &self.shared {
            Some(shared) => self.acquire_shared(shared, &key, too_far).await?,
            None => None,
        };
        Ok(HostPermit {
            _local: local,
            _shared: shared,
        })
    }

    /// Waits for the shared budget's grant. A database that cannot answer does not stop
    /// fetching: the limits of this process still hold, and the failure is logged.
    async fn acquire_shared(
        &self,
        shared: &Arc<dyn SharedHosts>,
        key: &str,
        too_far: impl Fn(Timestamp) -> bool,
    ) -> Result<Option<SharedLease>, Throttled> {
        let lease = uuid::Uuid::now_v7().to_string();
        let lease_for = chrono::Duration::from_std(self.lease_for).unwrap_or_default();
        let deadline =
            time::now() + chrono::Duration::from_std(self.limits.max_wait).unwrap_or_default();
        loop {
            let now = time::now();
            match shared
                .acquire(key, &lease, &self.limits, now + lease_for, now)
                .await
            {
                Ok(Some(start)) => {
                    let held = SharedLease {
                        shared: shared.clone(),
                        host: key.to_string(),
                        lease,
                    };
                    if too_far(start) {
                        // Backing off (another replica heard the host ask): the lease goes
                        // back as `held` drops.
                        return Err(Throttled { until: start });
                    }
                    sleep_until(start).await;
                    return Ok(Some(held));
                }
                Ok(None) if now < deadline => tokio::time::sleep(BUSY_POLL).await,
                // Every slot held elsewhere for longer than a request waits: the host is busy
                // with this registry's other replicas, which is no reason to fail the request.
                Ok(None) => {
                    tracing::debug!(host = %key, "the shared host budget stayed full; going ahead on this replica's");
                    return Ok(None);
                }
                Err(e) => {
                    tracing::warn!(host = %key, error = %e, "the shared host budget could not be read; this replica's limits hold");
                    return Ok(None);
                }
            }
        }
    }

    /// The host answered `status` with `retry_after` at `now`: if that asks for a back-off, it
    /// is kept (here and, when shared, for every replica) and returned.
    pub async fn answered(
        &self,
        addr: IpAddr,
        status: u16,
        retry_after: Option<&str>,
    ) -> Option<Timestamp> {
        let until = politeness::backoff_until(status, retry_after, time::now())?;
        {
            let host = self.host(addr);
            let mut timing = host.timing.lock().unwrap_or_else(|e| e.into_inner());
            timing.backoff_until = timing.backoff_until.max(Some(until));
        }
        if let Some(shared) = &self.shared
            && let Err(e) = shared.back_off(&addr.to_string(), until).await
        {
            tracing::warn!(host = %addr, error = %e, "recording a host's back-off for the other replicas failed");
        }
        Some(until)
    }
}

async fn sleep_until(at: Timestamp) {
    if let Ok(wait) = (at - time::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_names_address_is_remembered_and_the_table_stays_bounded() {
        let gate = HostGate::new(HostLimits::default(), Duration::from_secs(60));
        let addr: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(gate.remembered("agent.example"), None);
        gate.remember("agent.example", addr);
        assert_eq!(gate.remembered("agent.example"), Some(addr));
        for n in 0..REMEMBERED + 10 {
            gate.remember(&format!("a{n}.example"), addr);
        }
        let names = gate.names.lock().unwrap().len();
        assert!(names <= REMEMBERED, "{names} names remembered");
    }
}
