//! Probing subjects: requesting a probe (queued as a job), executing it (choose the interface,
//! run the cycle, judge, record the outcome in the ledger), and receiving push deliveries. One
//! file per job; `cycle` is the state machine that drives one cycle.

pub mod credentials;
pub mod cycle;
mod execute;
mod interface;
mod progress;
mod push;
mod reads;
mod request;
mod settings;

pub use credentials::{CardCheck, Credentials, FetchedCard};
pub use execute::execute;
pub use interface::{CycleInput, CycleOutput, choose_interface, probe_interface};
pub use progress::{LogProgress, Progress};
pub use push::{InboxDelivery, PushInbox, StoreInbox, new_token, receive_push, to_inbox};
pub use reads::{get, page};
pub use request::{enqueue_probe, enqueue_probe_after, probe_request, request};
pub use settings::ProbeSettings;
