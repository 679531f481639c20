//! The closed sets the API answers with, as enums in the OpenAPI document (a client generated
//! from it gets a type, not a string). Each mirrors a domain enum through an exhaustive
//! `From`, so a new domain variant does not compile until the API names it; the text of each
//! variant is what the API has always sent.

use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::callee::FetchStatus;
use crate::domain::capability::CapabilityOutcome;
use crate::domain::card::SnapshotSource;
use crate::domain::card::signature::SignatureVerdict;
use crate::domain::demotion::DemotionClass;
use crate::domain::job::{JobKind, JobStatus};
use crate::domain::probe::{self, Level, Rule, RunStatus, TaskRole, TaskState};
use crate::domain::report::ReportOutcome;
use crate::domain::rulebook::BlocksBy;
use crate::domain::webhook::DeliveryStatus;

/// An API enum mirroring a domain one: `Name from Domain { Variant <= pattern, … }`, each
/// variant sent as its kebab-case name (the unit test holds that to the domain's own text).
macro_rules! closed_set {
    ($(#[$doc:meta])* $name:ident from $domain:ty {
        $($variant:ident <= $pat:pat),+ $(,)?
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
        #[serde(rename_all = "kebab-case")]
        pub enum $name {
            $($variant),+
        }

        impl From<&$domain> for $name {
            fn from(value: &$domain) -> Self {
                match value {
                    $($pat => Self::$variant),+
                }
            }
        }
    };
}

closed_set!(
    /// Which card a snapshot holds: the `public` one at the well-known URL (what decisions
    /// read), or the authenticated `extended` card a probe run fetched with credentials.
    SnapshotKindView from SnapshotSource {
        Public <= SnapshotSource::Public,
        Extended <= SnapshotSource::Extended { .. },
    }
);

closed_set!(
    /// Where a probe run is: `aborted` runs were cut short and never promote.
    RunStatusView from RunStatus {
        Queued <= RunStatus::Queued,
        Running <= RunStatus::Running,
        Finished <= RunStatus::Finished,
        Aborted <= RunStatus::Aborted,
    }
);

closed_set!(
    /// How strongly a rule is required: MUST and policy failures block promotion.
    LevelView from Level {
        Must <= Level::Must,
        Should <= Level::Should,
        Policy <= Level::Policy,
    }
);

closed_set!(
    /// A finding's result: `not-exercised` when the probe could not create its situation.
    FindingStatusView from probe::FindingStatus {
        Pass <= probe::FindingStatus::Pass,
        Fail <= probe::FindingStatus::Fail,
        NotExercised <= probe::FindingStatus::NotExercised,
    }
);

closed_set!(
    /// What makes a rule's failure block promotion: the trust model, or the operator's policy.
    BlocksByView from BlocksBy {
        TrustModel <= BlocksBy::TrustModel,
        Policy <= BlocksBy::Policy,
    }
);

closed_set!(
    /// A demotion trigger's class.
    DemotionClassView from DemotionClass {
        Timestamp <= DemotionClass::Timestamp,
        History <= DemotionClass::History,
        Push <= DemotionClass::Push,
        Terminal <= DemotionClass::Terminal,
        Policy <= DemotionClass::Policy,
    }
);

closed_set!(
    /// Which of the probe's tasks a transition belongs to.
    TaskRoleView from TaskRole {
        Lifecycle <= TaskRole::Lifecycle,
        Push <= TaskRole::Push,
        Cancel <= TaskRole::Cancel,
    }
);

closed_set!(
    /// The channel a transition was observed on.
    SourceView from probe::Source {
        Response <= probe::Source::Response,
        Stream <= probe::Source::Stream,
        Get <= probe::Source::Get,
        Push <= probe::Source::Push,
    }
);

closed_set!(
    /// A task state, as cardgate reads it from either version's spelling.
    TaskStateView from TaskState {
        Submitted <= TaskState::Submitted,
        Working <= TaskState::Working,
        InputRequired <= TaskState::InputRequired,
        AuthRequired <= TaskState::AuthRequired,
        Completed <= TaskState::Completed,
        Failed <= TaskState::Failed,
        Canceled <= TaskState::Canceled,
        Rejected <= TaskState::Rejected,
        Unknown <= TaskState::Unknown,
    }
);

closed_set!(
    /// How an advertised capability fared in a probe run.
    CapabilityStatusView from CapabilityOutcome {
        Passed <= CapabilityOutcome::Passed,
        Failed <= CapabilityOutcome::Failed { .. },
        NotAdvertised <= CapabilityOutcome::NotAdvertised,
        NotExercised <= CapabilityOutcome::NotExercised { .. },
    }
);

closed_set!(
    /// A job's kind.
    JobKindView from JobKind {
        Probe <= JobKind::Probe,
        Refresh <= JobKind::Refresh,
    }
);

closed_set!(
    /// A job's state in the queue.
    JobStateView from JobStatus {
        Queued <= JobStatus::Queued,
        Running <= JobStatus::Running,
        Done <= JobStatus::Done,
        Failed <= JobStatus::Failed,
    }
);

closed_set!(
    /// What a card fetch brought: `unchanged` for a 304 or the same bytes; `deferred` when the
    /// host asked cardgate to wait (429 or 503 with `Retry-After`), which is not a failure.
    FetchStatusView from FetchStatus {
        Fetched <= FetchStatus::Fetched,
        Unchanged <= FetchStatus::Unchanged,
        Untrusted <= FetchStatus::Untrusted,
        Failed <= FetchStatus::Failed,
        Deferred <= FetchStatus::Deferred,
    }
);

closed_set!(
    /// A card signature's verdict.
    SignatureStatusView from SignatureVerdict {
        Verified <= SignatureVerdict::Verified { .. },
        Unsigned <= SignatureVerdict::Unsigned,
        Invalid <= SignatureVerdict::Invalid { .. },
        KeyUnavailable <= SignatureVerdict::KeyUnavailable { .. },
        NotChecked <= SignatureVerdict::NotChecked { .. },
    }
);

closed_set!(
    /// What a report did: `demoted` when its evidence demoted the subject.
    ReportOutcomeView from ReportOutcome {
        Demoted <= ReportOutcome::Demoted,
        Recorded <= ReportOutcome::Recorded,
    }
);

closed_set!(
    /// A webhook delivery's state.
    DeliveryStatusView from DeliveryStatus {
        Pending <= DeliveryStatus::Pending,
        Delivered <= DeliveryStatus::Delivered,
        Failed <= DeliveryStatus::Failed,
    }
);

/// A probe rule, by its stable code: an enum in the document whose values are
/// `Rule::ALL`'s codes, so the document cannot miss a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(crate) struct RuleCode(Rule);

impl From<&Rule> for RuleCode {
    fn from(rule: &Rule) -> Self {
        Self(*rule)
    }
}

impl utoipa::PartialSchema for RuleCode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(rule_codes_description()))
            .enum_values(Some(Rule::ALL.iter().map(|r| r.code())))
            .into()
    }
}

impl ToSchema for RuleCode {}

/// The codes' description: each rule with what it checks and the spec section or ACTS
/// requirement it enforces ("registry policy" where cardgate asks for more than the spec).
fn rule_codes_description() -> String {
    let mut out = String::from(
        "A probe rule's stable code (README, \"What a probe checks\"), with the source it enforces:\n",
    );
    for rule in Rule::ALL {
        out.push_str(&format!(
            "- `{}`: {} ({})\n",
            rule.code(),
            rule.summary(),
            rule.source()
        ));
    }
    out
}

#[cfg(test)]
mod tests;
