from cardgate.sse import SseEvent, SseParser


def feed(lines: list[str]) -> list[SseEvent]:
    parser = SseParser()
    return [e for line in lines if (e := parser.feed(line)) is not None]


def test_events_with_ids_kinds_and_multiline_data():
    events = feed([": keep-alive", "", "id: 7", "event: demoted", 'data: {"a":', "data: 1}", ""])
    assert events == [SseEvent("7", "demoted", '{"a":\n1}')]


def test_the_last_id_carries_over_and_empty_events_are_skipped():
    events = feed(["id: 3", "", "data:x", "", "event: e", ""])
    assert events == [SseEvent("3", "message", "x")]
