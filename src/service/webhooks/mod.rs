//! Webhook subscriptions, and the sending of their deliveries: signed as Standard Webhooks
//! has it, retried with backoff (or as the receiver's `Retry-After` asks, on 429 and 503),
//! given up after the retry window, and a subscription disabled when its receiver answers 410
//! Gone. Admins pause, resume and test subscriptions here. One file per axis.

mod sending;
mod settings;
mod subscriptions;

pub use sending::{PingResult, Sender, announce_failing, deliver_due, deliver_handed_over, test};
pub use settings::WebhookSettings;
pub use subscriptions::{
    NewSubscription, create, delete, deliveries, failing_count, get, list, pause, resume, retry,
    rotate,
};
