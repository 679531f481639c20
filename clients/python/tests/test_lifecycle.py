"""The pure bookkeeper: one terminal per task, nothing after it, timestamps never deduplicated."""

from cardgate.lifecycle import Lifecycle, Observed


def status(task: str, state: str, ts: bool = True, tag: str = "") -> Observed:
    return Observed(task, state, ts, source=f"{task}:{state}{tag}")


def test_a_second_terminal_is_withheld_with_both_events_as_evidence():
    life = Lifecycle()
    assert life.see(status("t", "TASK_STATE_WORKING"), dedup_by_timestamp=True) is None
    assert life.see(status("t", "TASK_STATE_COMPLETED"), dedup_by_timestamp=True) is None
    finding = life.see(status("t", "TASK_STATE_COMPLETED", tag="#2"), dedup_by_timestamp=True)
    assert finding is not None and finding.drop
    assert finding.trigger == "duplicate-terminal"
    assert finding.evidence == ("t:TASK_STATE_COMPLETED", "t:TASK_STATE_COMPLETED#2")


def test_any_event_after_the_end_is_withheld():
    life = Lifecycle()
    life.see(status("t", "TASK_STATE_FAILED"), dedup_by_timestamp=False)
    artifact = Observed("t", None, False, source="late artifact")
    finding = life.see(artifact, dedup_by_timestamp=False)
    assert finding is not None and finding.drop and finding.evidence[1] == "late artifact"


def test_tasks_are_independent_and_repeated_timestamps_are_not_duplicates():
    life = Lifecycle()
    for task in ["a", "b"]:
        assert life.see(status(task, "TASK_STATE_WORKING"), dedup_by_timestamp=True) is None
        # The same status twice (same timestamp) before the end is not a violation.
        assert life.see(status(task, "TASK_STATE_WORKING"), dedup_by_timestamp=True) is None
        assert life.see(status(task, "TASK_STATE_COMPLETED"), dedup_by_timestamp=True) is None


def test_a_terminal_without_timestamp_is_delivered_but_reported_when_deduplicating():
    life = Lifecycle()
    finding = life.see(status("t", "TASK_STATE_COMPLETED", ts=False), dedup_by_timestamp=True)
    assert finding is not None and not finding.drop
    assert finding.trigger == "terminal-without-timestamp"
    other = Lifecycle()
    assert (
        other.see(status("t", "TASK_STATE_COMPLETED", ts=False), dedup_by_timestamp=False) is None
    )


def test_messages_have_no_lifecycle_and_memory_is_bounded():
    life = Lifecycle(capacity=2)
    assert life.see(Observed(None, None, False, "msg"), dedup_by_timestamp=True) is None
    for task in ["a", "b", "c"]:
        life.see(status(task, "TASK_STATE_COMPLETED"), dedup_by_timestamp=True)
    # "a" was forgotten (the oldest), "c" is remembered.
    assert life.see(status("a", "TASK_STATE_WORKING"), dedup_by_timestamp=True) is None
    assert life.see(status("c", "TASK_STATE_WORKING"), dedup_by_timestamp=True) is not None
