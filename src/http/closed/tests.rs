//! Unit tests of `cardgate::http::closed`.

use super::*;

#[test]
fn each_view_says_what_the_domain_always_said() {
    fn text(v: &impl Serialize) -> String {
        serde_json::to_value(v)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }
    assert_eq!(
        text(&LevelView::from(&Level::Should)),
        Level::Should.as_str()
    );
    assert_eq!(
        text(&RunStatusView::from(&RunStatus::Aborted)),
        RunStatus::Aborted.as_str()
    );
    assert_eq!(
        text(&JobStateView::from(&JobStatus::Done)),
        JobStatus::Done.as_str()
    );
    assert_eq!(
        text(&FetchStatusView::from(&FetchStatus::Unchanged)),
        FetchStatus::Unchanged.as_str()
    );
    assert_eq!(
        text(&ReportOutcomeView::from(&ReportOutcome::Demoted)),
        ReportOutcome::Demoted.as_str()
    );
    assert_eq!(
        text(&DeliveryStatusView::from(&DeliveryStatus::Pending)),
        DeliveryStatus::Pending.as_str()
    );
    assert_eq!(
        text(&DemotionClassView::from(&DemotionClass::Terminal)),
        DemotionClass::Terminal.as_str()
    );
    assert_eq!(
        text(&JobKindView::from(&JobKind::Refresh)),
        JobKind::Refresh.as_str()
    );
    assert_eq!(
        text(&SnapshotKindView::from(&SnapshotSource::Public)),
        SnapshotSource::Public.kind()
    );
    let verdict = SignatureVerdict::KeyUnavailable { reason: "x".into() };
    assert_eq!(text(&SignatureStatusView::from(&verdict)), verdict.status());
    for state in [
        TaskState::InputRequired,
        TaskState::Unknown,
        TaskState::Canceled,
    ] {
        assert_eq!(text(&TaskStateView::from(&state)), state.as_str());
    }
}
