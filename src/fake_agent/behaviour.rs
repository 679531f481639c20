//! The behaviours the fake agent can be switched into: conformant, each broken one the
//! registry exists to catch, and the conformant variations it must not refuse.

/// How the agent misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Behaviour {
    #[default]
    Conformant,
    /// Terminal states carry no `status.timestamp`.
    NoTerminalTimestamp,
    /// Streams send the terminal state twice.
    TwoTerminalEvents,
    /// Streams send an event after the terminal state.
    EventAfterTerminal,
    /// `tasks/get` history never grows (pair with a v0.3 card advertising stateTransitionHistory).
    StuckHistory,
    /// Push registration answers HTTP 500.
    PushRegistration500,
    /// Streaming is advertised but the stream answers plain JSON.
    StreamingPlainJson,
    /// Tasks never reach a terminal state; streams stay open.
    NeverFinishes,
    /// Streams contain a frame that is not JSON.
    MalformedSse,
    /// Every push delivery is sent `FLOOD` times over (a flood with a valid token).
    PushFlood,
    /// Every call is answered only after `SLOW_ANSWER` (an agent that holds connections open).
    SlowAnswers,
    /// Streams never end: after the turn's events, `working` updates follow without pause
    /// for as long as the client reads them.
    EndlessStream,
    /// CancelTask on a finished task is accepted: the task flips to `canceled` (HTTP 200, no
    /// error), as some libraries do; a terminal state that does not stay terminal.
    CancelFlipsTerminal,
    /// A resubscription to a finished task replays its end: the task, then its terminal
    /// status again as an update (two terminal events on one stream).
    ResubscribeReplaysEnd,
    /// Timestamps carry a numeric offset (`+00:00`) instead of `Z`: present and exact, spelled
    /// against v1.0 §5.6.1.
    OffsetTimestamps,

    // The lifecycle faults reported from the field in 2026, one each (issue 44).
    /// Status events on streams carry no timestamp; GetTask's do (a2a-rs#274).
    StreamNoTimestamp,
    /// GetTask shows a finished task as `working` (A2A#373).
    GetNeverEnds,
    /// Streams close before the terminal event, though the task ends (A2A#1503).
    StreamCutBeforeEnd,
    /// The terminal state is never pushed (ggcode#1074).
    PushNoTerminal,
    /// Deliveries arrive out of order: live states are held back, and `working` is delivered
    /// after the terminal state (a2a-java#775).
    PushOutOfOrder,
    /// A follow-up carrying an interrupted task's id starts a new task (a2a-rust#66).
    FollowUpNewTask,
    /// A message to a finished task is accepted and re-opens it (a2a-rs#268, a2a-go#438,
    /// a2a-python#1205, a2a-java#741; ACTS CORE-SEND-002).
    SendReopensTerminal,
    /// CancelTask answers the task `canceled` without applying it: the task goes on to finish
    /// (a2a-python#1170, LangGraph's no-op cancel).
    CancelNotApplied,
    /// A resubscription to a live task answers TaskNotFound (a2a-go#439).
    ResubscribeLiveNotFound,
    /// A resubscription to a live task sends the snapshot and closes (a2a-java#754,
    /// a2a-js#542).
    ResubscribeLiveClosesEarly,

    // Conformant variations a registry must not refuse.
    /// Every turn reports `working` twice.
    WorkingTwice,
    /// Tasks and events carry fields A2A does not define.
    UnknownFields,
    /// A task is created already `working`: no `submitted` is ever shown.
    OpensAtWorking,
    /// Deliveries carry the push token in a header of the agent's own (`X-Push-Token`).
    TokenInOwnHeader,
    /// Only a task's terminal state is pushed.
    PushTerminalOnly,

    // Faults one task does not show (issue 46).
    /// Every third task it creates ends without a `status.timestamp`: a flaky agent.
    ThirdNoTerminalTimestamp,
    /// A task begun while another is submitted or working ends without a `status.timestamp`:
    /// a fault that shows only when tasks overlap.
    OverlapNoTerminalTimestamp,
}
