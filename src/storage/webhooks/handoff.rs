//! The in-process hand-off: deliveries an append queues are leased to this process's sender
//! and handed over once their transaction commits.

use super::rows::Claimed;
use crate::domain::time::Timestamp;
use crate::storage::{Store, StoreError};

/// Where one process's webhook sender takes the deliveries its own appends queue: they are
/// inserted already leased to it, and handed over once their transaction commits, so the
/// common case (news for receivers with nothing pending) costs no claim at all. A delivery
/// behind one still pending about its subject in its subscription is not handed over: it is
/// claimed in its turn, as before.
pub(crate) struct Handoff {
    pub(super) owner: String,
    pub(super) lease: chrono::Duration,
    pub(super) to: tokio::sync::mpsc::Sender<Vec<Claimed>>,
}

/// The lease a queued delivery is inserted under when it is handed over.
pub(crate) struct Lessee {
    pub(super) owner: String,
    pub(super) until: Timestamp,
}

impl Store {
    /// Makes this process's appends hand the deliveries they can to `owner`, leased for
    /// `lease`; the batches arrive on the returned channel after their commits. `None` if a
    /// sender took them already.
    pub fn hand_deliveries_to(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Option<tokio::sync::mpsc::Receiver<Vec<Claimed>>> {
        /// Batches (one per append) waiting for the sender: past it, they are left to lapse
        /// and be claimed, rather than queue without bound in memory.
        const WAITING: usize = 256;
        let (to, from) = tokio::sync::mpsc::channel(WAITING);
        let handoff = Handoff {
            owner: owner.to_string(),
            lease: chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(60)),
            to,
        };
        self.handoff.set(handoff).ok().map(|()| from)
    }

    /// The lease an append at `now` queues its handed-over deliveries under, if a sender
    /// takes them.
    pub(crate) fn lessee(&self, now: Timestamp) -> Option<Lessee> {
        self.handoff.get().map(|h| Lessee {
            owner: h.owner.clone(),
            until: now + h.lease,
        })
    }

    /// Commits an append's transaction, then gives the sender what it leased to it (never
    /// before: the deliveries are not there until the commit). A sender that is gone or full
    /// leaves them to lapse and be claimed.
    pub(crate) async fn commit_handing_off<DB: sqlx::Database>(
        &self,
        tx: sqlx::Transaction<'static, DB>,
        leased: Vec<Claimed>,
    ) -> Result<(), StoreError> {
        tx.commit().await?;
        self.hand_off(leased);
        Ok(())
    }

    fn hand_off(&self, leased: Vec<Claimed>) {
        if leased.is_empty() {
            return;
        }
        if let Some(handoff) = self.handoff.get()
            && let Err(e) = handoff.to.try_send(leased)
        {
            tracing::debug!(error = %e, "webhook deliveries left to be claimed");
        }
    }
}
