//! The store as the budget of each host that replicas share (remote::hosts): the remote layer
//! asks through [`SharedHosts`], and knows nothing of the store.

use crate::domain::politeness::HostLimits;
use crate::domain::time::{self, Timestamp};
use crate::remote::hosts::{Pending, SharedHosts};
use crate::storage::Store;

/// [`SharedHosts`] kept in the registry's database.
pub struct StoreHosts(pub Store);

impl SharedHosts for StoreHosts {
    fn acquire<'a>(
        &'a self,
        host: &'a str,
        lease: &'a str,
        limits: &'a HostLimits,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Pending<'a, Result<Option<Timestamp>, String>> {
        Box::pin(async move {
            self.0
                .acquire_host_slot(
                    host,
                    lease,
                    (limits.concurrency, limits.interval),
                    time::to_stored_precision(lease_until),
                    time::to_stored_precision(now),
                )
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn release<'a>(&'a self, host: &'a str, lease: &'a str) -> Pending<'a, Result<(), String>> {
        Box::pin(async move {
            self.0
                .release_host_slot(host, lease)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn back_off<'a>(&'a self, host: &'a str, until: Timestamp) -> Pending<'a, Result<(), String>> {
        Box::pin(async move {
            self.0
                .back_off_host(host, until, time::now())
                .await
                .map_err(|e| e.to_string())
        })
    }
}
