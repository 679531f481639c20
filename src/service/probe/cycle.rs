//! One probe cycle against one interface: the lifecycle task (streamed when the card
//! advertises streaming, polled otherwise, with follow-ups for `input-required` turns), the push
//! task (webhook inline in the message's configuration, deliveries awaited until the terminal
//! one; then a registration through the push-config method, with a retry budget), and the
//! optional cancel task. Once the lifecycle task has ended, its end is probed too: CancelTask
//! on it, a GetTask after, and a resubscription where the card offers streaming. Store-free: it talks to the callee and to a [`PushInbox`], and returns
//! what it saw. Every wait is bounded by the cycle's deadline and ends as soon as its evidence
//! is complete: nothing here depends on how fast the agent is.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use url::Url;

use super::{InboxDelivery, ProbeSettings, Progress, PushInbox};
use crate::domain::capability::Capability;
use crate::domain::probe::events::{Event, classify};
use crate::domain::probe::{
    AfterEnd, EndedCancel, EndedResubscribe, EndedSend, LiveOutcome, LiveResubscribe, Observations,
    ProbeScript, PushRun, Source, StreamEnd, StreamRun, TaskIds, TaskRole, TaskState, Transition,
};
use crate::domain::time;
use crate::remote::a2a::{A2aClient, A2aError, Answer, EventReader, Outgoing, Streamed};
use crate::remote::sse::{Frame, StreamStop};

/// Why a wait for push deliveries ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// The push task's terminal state was delivered.
    Terminal,
    /// An interrupted state was delivered during the wait: the turn ended there.
    Interrupted,
    /// The push wait passed with nothing new: what did not arrive is the agent's.
    Quiet,
    /// The cycle's deadline came first: what did not arrive was not waited for.
    Deadline,
}

/// What the cycle needs to know about its target.
pub struct Target<'a> {
    pub advertised: &'a BTreeSet<Capability>,
    pub script: &'a ProbeScript,
    /// The webhook URL for this run and its token.
    pub push: Option<(Url, String)>,
}

pub struct Cycle<'a> {
    client: &'a mut A2aClient,
    settings: &'a ProbeSettings,
    progress: &'a dyn Progress,
    obs: Observations,
    deadline: Instant,
}

/// A resubscription opened on a live task, its first event read, left open while the probe
/// moves the task on (a follow-up, a cancel); [`Cycle::finish_live`] reads the rest.
struct LiveStream {
    role: TaskRole,
    state: TaskState,
    reader: Box<EventReader>,
    run: StreamRun,
    started: Instant,
    first_is_task: bool,
}

impl<'a> Cycle<'a> {
    pub fn new(
        client: &'a mut A2aClient,
        settings: &'a ProbeSettings,
        progress: &'a dyn Progress,
    ) -> Self {
        let deadline = Instant::now() + settings.deadline;
        client.set_deadline(deadline);
        Self {
            deadline,
            client,
            settings,
            progress,
            obs: Observations::default(),
        }
    }

    /// Runs every task of the cycle and returns the observations.
    /// Once the callee refuses the credentials, the cycle stops: nothing more is sent.
    pub async fn run(mut self, target: &Target<'_>, inbox: &dyn PushInbox) -> Observations {
        self.lifecycle(target).await;
        if self.client.refused().is_some() {
            return self.obs;
        }
        self.after_end(target).await;
        if target.advertised.contains(&Capability::PushNotifications)
            && self.client.refused().is_none()
        {
            self.push(target, inbox).await;
        }
        if let Some(text) = &target.script.cancel_message
            && self.client.refused().is_none()
        {
            let streaming = target.advertised.contains(&Capability::Streaming);
            self.cancel(text, streaming).await;
        }
        self.late_deliveries(target, inbox).await;
        self.obs
    }

    /// Runs a further trial: the lifecycle task alone, and the probes of its end (issue 46).
    pub async fn run_alone(mut self, target: &Target<'_>) -> Observations {
        self.lifecycle(target).await;
        if self.client.refused().is_none() {
            self.after_end(target).await;
        }
        self.obs
    }

    fn step(&self, message: String) {
        self.progress.step(&message);
    }

    fn problem(&mut self, role: TaskRole, what: String) {
        self.step(format!("  ! {what}"));
        self.obs.problems.push((role, what));
    }

    /// Records an A2A object received now; returns the event if it was one.
    fn observe(
        &mut self,
        role: TaskRole,
        source: Source,
        call: u32,
        value: &Value,
    ) -> Option<Event> {
        self.observe_at(role, source, call, value, time::now())
    }

    /// Records an A2A object received at `at`. A transition a call of this cycle's client
    /// carried keeps its offset from the call's start: what latency is measured from.
    fn observe_at(
        &mut self,
        role: TaskRole,
        source: Source,
        call: u32,
        value: &Value,
        at: crate::domain::time::Timestamp,
    ) -> Option<Event> {
        match classify(value) {
            Ok(event) => {
                if let Some(mut t) = event.transition(role, source, call, at) {
                    if source != Source::Push {
                        t.offset_ms = self
                            .client
                            .call_started(call)
                            .map(|started| (at - started).num_milliseconds().max(0) as u64);
                    }
                    self.step(format!(
                        "  {} {}{}",
                        source,
                        t.state,
                        if t.timestamp.is_some() {
                            ""
                        } else {
                            " (no timestamp)"
                        }
                    ));
                    self.obs.transitions.push(t);
                }
                if let Event::Task { id, context_id, .. } = &event {
                    let ids = self.obs.tasks.entry(role).or_default();
                    if ids.task_id.is_none() {
                        ids.task_id.clone_from(id);
                        ids.context_id.clone_from(context_id);
                    }
                }
                Some(event)
            }
            Err(e) => {
                self.problem(role, format!("{source} {call}: {e}"));
                None
            }
        }
    }

    fn last_state(&self, role: TaskRole) -> Option<TaskState> {
        self.obs
            .transitions
            .iter()
            .rev()
            .find(|t| t.role == role)
            .map(|t| t.state)
    }

    /// The last state stream `call` reported.
    fn stream_state(&self, call: u32) -> Option<TaskState> {
        self.obs
            .transitions
            .iter()
            .rev()
            .find(|t| t.source == Source::Stream && t.call == call)
            .map(|t| t.state)
    }

    /// Whether stream `call` has shown a terminal state.
    fn stream_saw_terminal(&self, call: u32) -> bool {
        self.obs
            .transitions
            .iter()
            .any(|t| t.source == Source::Stream && t.call == call && t.state.is_terminal())
    }

    fn ids(&self, role: TaskRole) -> TaskIds {
        self.obs.tasks.get(&role).cloned().unwrap_or_default()
    }

    /// Handles a send's answer: a task (observed), a message (nothing to test), or an error.
    fn answered(&mut self, role: TaskRole, call: u32, answer: Answer) -> bool {
        match answer {
            Answer::Result(value) => match self.observe(role, Source::Response, call, &value) {
                Some(Event::Message { .. }) if self.ids(role).task_id.is_none() => {
                    self.step("  answered with a Message: no task to follow".into());
                    self.obs.message_only.push(role);
                    false
                }
                Some(_) => true,
                None => false,
            },
            Answer::Error { code, message } => {
                self.problem(
                    role,
                    format!("call {call} answered error {code}: {message}"),
                );
                false
            }
            Answer::Broken(e) => {
                self.problem(role, format!("call {call}: {e}"));
                false
            }
        }
    }

    /// The lifecycle task, turn by turn. Where the card offers streaming, the first
    /// interrupted turn is also resubscribed to before its follow-up, and that resubscription
    /// is read to its end once the turns are done.
    async fn lifecycle(&mut self, target: &Target<'_>) {
        let mut live = None;
        self.lifecycle_turns(target, &mut live).await;
        if let Some(live) = live {
            self.finish_live(live).await;
        }
    }

    async fn lifecycle_turns(&mut self, target: &Target<'_>, live: &mut Option<LiveStream>) {
        let streaming = target.advertised.contains(&Capability::Streaming);
        let history = target
            .advertised
            .contains(&Capability::StateTransitionHistory);
        self.step(format!(
            "lifecycle task: {} `{}`",
            if streaming {
                "streaming send"
            } else {
                "send, then GetTask polling"
            },
            target.script.message
        ));
        let mut follow_ups = target.script.follow_ups.iter();
        let mut text = target.script.message.as_str();
        loop {
            let ids = self.ids(TaskRole::Lifecycle);
            let out = Outgoing {
                text,
                task_id: ids.task_id.as_deref(),
                context_id: ids.context_id.as_deref(),
                non_blocking: !streaming,
                webhook: None,
            };
            if ids.task_id.is_some() {
                self.obs
                    .follow_up_calls
                    .push((TaskRole::Lifecycle, self.client.next_call()));
            }
            let alive = if streaming {
                self.stream_turn(&out, history).await
            } else {
                let (call, answer) = self.client.send("lifecycle", &out).await;
                self.answered(TaskRole::Lifecycle, call, answer)
                    && self.poll(TaskRole::Lifecycle).await
            };
            if !alive {
                return;
            }
            self.get(TaskRole::Lifecycle, "lifecycle: GetTask").await;
            match self.last_state(TaskRole::Lifecycle) {
                Some(s) if s.is_interrupted() => match follow_ups.next() {
                    Some(next) => {
                        if streaming && live.is_none() {
                            *live = self.open_live(TaskRole::Lifecycle, s).await;
                        }
                        self.step(format!(
                            "  {s}: follow-up `{next}` with taskId and contextId"
                        ));
                        self.obs.follow_ups_sent += 1;
                        text = next;
                    }
                    None => {
                        self.step(format!(
                            "  {s}, and the probe script has no follow-ups left"
                        ));
                        self.obs.follow_ups_exhausted = true;
                        return;
                    }
                },
                _ => return,
            }
            if Instant::now() >= self.deadline {
                return;
            }
        }
    }

    /// One streaming send, read to its end. Returns whether the task is still worth following.
    async fn stream_turn(&mut self, out: &Outgoing<'_>, history: bool) -> bool {
        let started = Instant::now();
        match self
            .client
            .stream("lifecycle: stream", out, self.deadline)
            .await
        {
            Streamed::Plain {
                call,
                content_type,
                answer,
            } => {
                self.step(format!(
                    "  stream {call}: not an event stream ({})",
                    content_type.as_deref().unwrap_or("no content type")
                ));
                let mut run = lifecycle_stream(call, false, content_type);
                run.end = StreamEnd::NotAStream;
                self.obs.streams.push(run);
                self.answered(TaskRole::Lifecycle, call, answer)
            }
            Streamed::Events {
                call,
                mut reader,
                content_type,
            } => {
                let mut run = lifecycle_stream(call, true, content_type);
                let end = loop {
                    match reader.next().await {
                        Ok(frame) => self.stream_frame(&mut run, &frame, history).await,
                        Err(end) => break end,
                    }
                };
                self.stream_ended(&mut run, end, started, "stream");
                let had_task = self.ids(TaskRole::Lifecycle).task_id.is_some();
                self.obs.streams.push(run);
                had_task
            }
        }
    }

    /// Records how lifecycle stream `run` (a `what`: stream or resubscription) ended. A message
    /// the binding could not decode is a malformed frame, as an SSE frame that is not JSON is:
    /// the stream cannot count as well formed.
    fn stream_ended(&mut self, run: &mut StreamRun, end: StreamStop, started: Instant, what: &str) {
        let call = run.call;
        if let StreamStop::Malformed(e) = &end {
            run.malformed_frames += 1;
            self.problem(run.role, format!("stream {call}: malformed frame: {e}"));
        }
        run.end = stream_end(end);
        self.client
            .record_stream_end(call, &format!("{:?}", run.end), started);
        self.step(format!(
            "  {what} {call} ended: {:?} after {} frames",
            run.end, run.frames
        ));
    }

    /// One frame of the lifecycle stream `run`: recorded, counted, and its task observed. With
    /// `history`, the task's history is read at every state change the stream shows.
    async fn stream_frame(&mut self, run: &mut StreamRun, frame: &Frame, history: bool) {
        let call = run.call;
        self.client.record_frame(call, frame);
        run.frames += 1;
        // This stream's own states only: a GetTask answered meanwhile may be ahead of a stream
        // that a proxy holds back.
        let before = self.stream_state(call);
        if self.stream_saw_terminal(call) {
            run.events_after_terminal += 1;
        }
        match self.client.frame_result(frame) {
            Answer::Result(value) => {
                if self
                    .observe(run.role, Source::Stream, call, &value)
                    .is_none()
                {
                    run.malformed_frames += 1;
                }
                let now = self.stream_state(call);
                // stateTransitionHistory: read the history at every state change.
                if history && now != before && !self.stream_saw_terminal(call) {
                    self.get(TaskRole::Lifecycle, "lifecycle: GetTask (history)")
                        .await;
                }
            }
            Answer::Error { code, message } => {
                self.problem(
                    run.role,
                    format!("stream {call} sent error {code}: {message}"),
                );
            }
            Answer::Broken(e) => {
                run.malformed_frames += 1;
                self.problem(run.role, format!("stream {call}: malformed frame: {e}"));
            }
        }
    }

    /// The cycle's deadline has passed: later calls are not made (what they would find
    /// missing is cardgate's deadline, not the agent's fault).
    fn out_of_time(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// GetTask with the full history; records the transition.
    async fn get(&mut self, role: TaskRole, step: &str) -> Option<TaskState> {
        if self.out_of_time() {
            return None;
        }
        let task_id = self.ids(role).task_id?;
        let (call, answer) = self.client.get_task(step, &task_id, None).await;
        match answer {
            Answer::Result(value) => {
                self.observe(role, Source::Get, call, &value);
                self.last_state(role)
            }
            Answer::Error { code, message } => {
                self.problem(role, format!("GetTask answered error {code}: {message}"));
                None
            }
            Answer::Broken(e) => {
                self.problem(role, format!("GetTask: {e}"));
                None
            }
        }
    }

    /// Polls GetTask until the task is terminal or interrupted, or the deadline passes.
    async fn poll(&mut self, role: TaskRole) -> bool {
        loop {
            match self.last_state(role) {
                Some(s) if s.is_terminal() || s.is_interrupted() => return true,
                _ => {}
            }
            if Instant::now() >= self.deadline {
                self.step("  deadline reached while polling".into());
                return true;
            }
            tokio::time::sleep(self.settings.poll_interval).await;
            let before = self.obs.transitions.len();
            let previous = self.obs.transitions.last().cloned();
            if self
                .get(role, &format!("{role:?}: poll").to_lowercase())
                .await
                .is_none()
            {
                return false;
            }
            // Keep a poll only when it shows something new.
            if let (Some(prev), Some(new)) = (previous, self.obs.transitions.last())
                && self.obs.transitions.len() > before
                && same_status(&prev, new)
            {
                self.obs.transitions.pop();
            }
        }
    }

    /// Terminal discipline (docs/trust-model.md, rule 3): once the lifecycle task has ended, a
    /// cancel of it must be refused and leave it as it ended, and a resubscription must not
    /// show it end again. What these calls show of the task is observed like any other
    /// transition; the checks read them from `from_call` on.
    async fn after_end(&mut self, target: &Target<'_>) {
        let ended = self
            .last_state(TaskRole::Lifecycle)
            .is_some_and(TaskState::is_terminal);
        let Some(task_id) = self.ids(TaskRole::Lifecycle).task_id.filter(|_| ended) else {
            return;
        };
        if self.out_of_time() {
            return;
        }
        let from_call = self.client.next_call();
        self.step("ended task: CancelTask must be refused, and the end must hold".into());
        let (call, answer) = self.client.cancel("ended: CancelTask", &task_id).await;
        let cancel = match answer {
            Answer::Result(value) => {
                self.observe(TaskRole::Lifecycle, Source::Response, call, &value);
                EndedCancel::Answered { call }
            }
            Answer::Error { code, message } => {
                self.step(format!("  refused: {code}: {message}"));
                if self
                    .client
                    .refused_as(A2aError::TaskNotCancelable, code, &message)
                {
                    EndedCancel::NotCancelable { code, message }
                } else {
                    EndedCancel::Refused { code, message }
                }
            }
            Answer::Broken(error) => EndedCancel::NoAnswer { error },
        };
        self.get(TaskRole::Lifecycle, "ended: GetTask").await;
        let send = self.send_to_ended(target, &task_id).await;
        let resubscribe = if !target.advertised.contains(&Capability::Streaming) {
            EndedResubscribe::NotTried {
                reason: "the card does not offer streaming, so there is nothing to resubscribe to"
                    .into(),
            }
        } else if self.out_of_time() {
            EndedResubscribe::NotTried {
                reason: "the probe cycle's deadline passed before the resubscription".into(),
            }
        } else {
            self.resubscribe(&task_id).await
        };
        self.obs.after_end = Some(AfterEnd {
            from_call,
            cancel,
            send,
            resubscribe,
        });
    }

    /// Sends the script's first message again, to the ended task (a caller's retry or
    /// follow-up), then reads the task once more: the message must be refused, and the task
    /// must not have moved (a re-opened task shows in that GetTask, or in the answer).
    async fn send_to_ended(&mut self, target: &Target<'_>, task_id: &str) -> Option<EndedSend> {
        if self.out_of_time() {
            return None;
        }
        self.step("ended task: a message to it must be refused".into());
        let context_id = self.ids(TaskRole::Lifecycle).context_id;
        let out = Outgoing {
            text: &target.script.message,
            task_id: Some(task_id),
            context_id: context_id.as_deref(),
            non_blocking: true,
            webhook: None,
        };
        let (call, answer) = self.client.send("ended: send", &out).await;
        let send = match answer {
            Answer::Result(value) => match classify(&value) {
                // The ended task itself answered: what it shows is among its transitions.
                Ok(event) if event.task_id() == Some(task_id) => {
                    self.step("  accepted".into());
                    self.observe(TaskRole::Lifecycle, Source::Response, call, &value);
                    EndedSend::Answered { call }
                }
                // Accepted as something else (a new task, a bare message): the ended task did
                // not move, so this answer is not one of its states.
                other => {
                    let what = match other {
                        Ok(Event::Task { id, .. }) => {
                            format!("a new task {}", id.as_deref().unwrap_or("without an id"))
                        }
                        Ok(Event::Message { .. }) => "a message".into(),
                        Ok(_) => "an event".into(),
                        Err(e) => format!("an answer that is not A2A ({e})"),
                    };
                    self.step(format!("  accepted, answered with {what}"));
                    EndedSend::Elsewhere { call, what }
                }
            },
            Answer::Error { code, message } => {
                self.step(format!("  refused: {code}: {message}"));
                if self
                    .client
                    .refused_as(A2aError::UnsupportedOperation, code, &message)
                {
                    EndedSend::Unsupported { code, message }
                } else {
                    EndedSend::Refused { code, message }
                }
            }
            Answer::Broken(error) => EndedSend::NoAnswer { error },
        };
        self.get(TaskRole::Lifecycle, "ended: GetTask after the message")
            .await;
        Some(send)
    }

    /// Resubscribes to the ended task and reads what comes, for a short while at most: a
    /// conformant agent refuses at once or sends the final task and closes.
    async fn resubscribe(&mut self, task_id: &str) -> EndedResubscribe {
        let deadline = self
            .deadline
            .min(Instant::now() + self.settings.resubscribe_wait);
        let started = Instant::now();
        match self
            .client
            .subscribe("ended: resubscribe", task_id, deadline)
            .await
        {
            Streamed::Plain { answer, .. } => match answer {
                Answer::Error { code, message } => {
                    self.step(format!("  resubscription refused: {code}: {message}"));
                    EndedResubscribe::Refused { code, message }
                }
                Answer::Broken(error) => EndedResubscribe::NoAnswer { error },
                Answer::Result(_) => EndedResubscribe::NoAnswer {
                    error: "answered with a plain result instead of an event stream".into(),
                },
            },
            Streamed::Events {
                call,
                mut reader,
                content_type,
            } => {
                let mut run = lifecycle_stream(call, true, content_type);
                run.resubscribe = true;
                // An error sent as an event (the JS SDK refuses so) is a refusal, as a plain
                // error answer is, not a malformed stream.
                let mut refused = None;
                let end = loop {
                    match reader.next().await {
                        Ok(frame) => match self.client.frame_result(&frame) {
                            Answer::Error { code, message } => {
                                self.client.record_frame(call, &frame);
                                run.frames += 1;
                                refused.get_or_insert((code, message));
                            }
                            _ => self.stream_frame(&mut run, &frame, false).await,
                        },
                        Err(end) => break end,
                    }
                };
                self.stream_ended(&mut run, end, started, "resubscription");
                let events = self
                    .obs
                    .transitions
                    .iter()
                    .any(|t| t.source == Source::Stream && t.call == call);
                self.obs.streams.push(run);
                match refused {
                    Some((code, message)) if !events => {
                        self.step(format!("  resubscription refused: {code}: {message}"));
                        EndedResubscribe::Refused { code, message }
                    }
                    _ => EndedResubscribe::Streamed { call },
                }
            }
        }
    }

    /// Resubscribes to the live task of `role`, last seen in `state`, and reads the first
    /// event, as a caller whose stream dropped would: the stream is left open for
    /// [`Self::finish_live`]. A refusal, or no stream at all, is recorded at once.
    async fn open_live(&mut self, role: TaskRole, state: TaskState) -> Option<LiveStream> {
        let task_id = self.ids(role).task_id?;
        if self.out_of_time() {
            return None;
        }
        self.step(format!(
            "  {state}: resubscribe to the live task, as a caller whose stream dropped would"
        ));
        let started = Instant::now();
        let step = format!("{role:?}: resubscribe (live)").to_lowercase();
        let record = |outcome| LiveResubscribe {
            role,
            state,
            outcome,
        };
        let (call, mut reader, content_type) =
            match self.client.subscribe(&step, &task_id, self.deadline).await {
                Streamed::Plain { answer, .. } => {
                    let outcome = match answer {
                        Answer::Error { code, message } => LiveOutcome::Refused { code, message },
                        Answer::Broken(error) => LiveOutcome::NoAnswer { error },
                        Answer::Result(_) => LiveOutcome::NoAnswer {
                            error: "answered with a plain result instead of an event stream".into(),
                        },
                    };
                    self.step(format!("  resubscription: {outcome:?}"));
                    self.obs.live_resubscribes.push(record(outcome));
                    return None;
                }
                Streamed::Events {
                    call,
                    reader,
                    content_type,
                } => (call, reader, content_type),
            };
        let mut run = lifecycle_stream(call, true, content_type);
        run.role = role;
        run.resubscribe = true;
        let first = match reader.next().await {
            Ok(frame) => frame,
            Err(end) => {
                self.stream_ended(&mut run, end, started, "live resubscription");
                self.obs.streams.push(run);
                let outcome = LiveOutcome::Streamed {
                    call,
                    first_is_task: false,
                };
                self.obs.live_resubscribes.push(record(outcome));
                return None;
            }
        };
        let first_is_task = match self.client.frame_result(&first) {
            // An error sent as an event (the JS SDK refuses so) is a refusal.
            Answer::Error { code, message } => {
                self.client.record_frame(call, &first);
                self.stream_ended(&mut run, StreamStop::Closed, started, "live resubscription");
                self.obs.streams.push(run);
                let outcome = LiveOutcome::Refused { code, message };
                self.obs.live_resubscribes.push(record(outcome));
                return None;
            }
            Answer::Result(value) => matches!(classify(&value), Ok(Event::Task { .. })),
            Answer::Broken(_) => false,
        };
        self.stream_frame(&mut run, &first, false).await;
        Some(LiveStream {
            role,
            state,
            reader,
            run,
            started,
            first_is_task,
        })
    }

    /// Reads a live resubscription to its end, once the probe has moved its task on. A task
    /// that ended gets [`ProbeSettings::live_resubscribe_wait`] for its end to reach the
    /// stream and the stream to close; the wait ends as soon as it does.
    async fn finish_live(&mut self, live: LiveStream) {
        let LiveStream {
            role,
            state,
            mut reader,
            mut run,
            started,
            first_is_task,
        } = live;
        let bound = self
            .deadline
            .min(Instant::now() + self.settings.live_resubscribe_wait);
        let end = loop {
            match tokio::time::timeout_at(bound, reader.next()).await {
                Ok(Ok(frame)) => self.stream_frame(&mut run, &frame, false).await,
                Ok(Err(end)) => break end,
                Err(_) => break StreamStop::Deadline,
            }
        };
        self.stream_ended(&mut run, end, started, "live resubscription");
        let call = run.call;
        self.obs.streams.push(run);
        self.obs.live_resubscribes.push(LiveResubscribe {
            role,
            state,
            outcome: LiveOutcome::Streamed {
                call,
                first_is_task,
            },
        });
    }

    async fn push(&mut self, target: &Target<'_>, inbox: &dyn PushInbox) {
        let Some((url, token)) = &target.push else {
            self.obs.push = Some(PushRun {
                skipped: Some(
                    "CARDGATE_PUBLIC_URL is not set, so the agent has no webhook to call".into(),
                ),
                ..empty_push()
            });
            return;
        };
        if self.out_of_time() {
            self.obs.push = Some(PushRun {
                skipped: Some("the probe cycle's deadline passed before the push task".into()),
                ..empty_push()
            });
            return;
        }
        let text = target.script.push_text();
        self.step(format!("push task: send `{text}` with the webhook inline"));
        let out = Outgoing {
            text,
            task_id: None,
            context_id: None,
            non_blocking: true,
            webhook: Some((url.as_str(), token)),
        };
        let started = Instant::now();
        let (call, answer) = self.client.send("push", &out).await;
        if !self.answered(TaskRole::Push, call, answer) {
            self.obs.push = Some(PushRun {
                skipped: Some("the push task could not be started".into()),
                ..empty_push()
            });
            return;
        }
        let Some(task_id) = self.ids(TaskRole::Push).task_id else {
            return;
        };
        let mut run = empty_push();
        self.follow_push_task(&mut run, target, token, inbox, started)
            .await;
        self.register_webhook(&mut run, &task_id, url, token).await;
        self.obs.push = Some(run);
    }

    /// Waits for the push task's deliveries; an interrupted task gets the script's next
    /// follow-up, so that it has a terminal state to deliver.
    async fn follow_push_task(
        &mut self,
        run: &mut PushRun,
        target: &Target<'_>,
        token: &str,
        inbox: &dyn PushInbox,
        started: Instant,
    ) {
        let mut follow_ups = target.script.follow_ups.iter();
        let mut turn_may_end = true;
        loop {
            let settled = self
                .await_deliveries(run, token, inbox, started, turn_may_end)
                .await;
            let state = self.get(TaskRole::Push, "push: GetTask").await;
            let s = match state {
                Some(s) if s.is_interrupted() => s,
                // The interrupted delivery was a late copy of an earlier turn's (deliveries
                // may take seconds, and some agents send a turn's end twice): the task has
                // moved on, so wait for its end, not for another turn.
                Some(s) if settled == Settled::Interrupted && !self.push_terminal_delivered() => {
                    self.step(format!(
                        "  {s}: a late delivery of an earlier turn; waiting on"
                    ));
                    turn_may_end = false;
                    continue;
                }
                _ => break,
            };
            let Some(next) = follow_ups.next() else {
                break;
            };
            turn_may_end = true;
            self.step(format!("  {s}: follow-up `{next}`"));
            let ids = self.ids(TaskRole::Push);
            let out = Outgoing {
                text: next,
                task_id: ids.task_id.as_deref(),
                context_id: ids.context_id.as_deref(),
                non_blocking: true,
                webhook: None,
            };
            self.obs
                .follow_up_calls
                .push((TaskRole::Push, self.client.next_call()));
            let (call, answer) = self.client.send("push: follow-up", &out).await;
            if !self.answered(TaskRole::Push, call, answer) {
                break;
            }
        }
    }

    /// Registers the webhook through the push-config method, within the retry budget. The
    /// task is usually finished by now: the answer is what is judged, not later deliveries.
    async fn register_webhook(&mut self, run: &mut PushRun, task_id: &str, url: &Url, token: &str) {
        let mut backoff = self.settings.push_backoff;
        for attempt in 1..=self.settings.push_attempts.max(1) {
            if self.out_of_time() {
                // Cut short by cardgate's own deadline: the method was not really tried.
                run.registration_error = None;
                run.registration_skipped =
                    Some("the probe cycle's deadline passed before registration answered".into());
                return;
            }
            run.attempts = attempt;
            let (_, answer) = self
                .client
                .set_push("push: register webhook", task_id, url.as_str(), token)
                .await;
            run.registration_error = match answer {
                Answer::Result(_) => None,
                Answer::Error { code, message } => Some(format!("error {code}: {message}")),
                // An answer cut off by cardgate's own deadline says nothing about the agent.
                Answer::Broken(_) if self.out_of_time() => {
                    run.registration_skipped = Some(
                        "the probe cycle's deadline passed before registration answered".into(),
                    );
                    return;
                }
                Answer::Broken(e) => Some(e),
            };
            let Some(error) = &run.registration_error else {
                self.step(format!("  webhook registered (attempt {attempt})"));
                return;
            };
            self.step(format!("  registration attempt {attempt} failed: {error}"));
            if attempt < self.settings.push_attempts && Instant::now() + backoff < self.deadline {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            } else {
                return;
            }
        }
    }

    /// Reads deliveries until the push task's terminal state or an interrupted one has been
    /// delivered, or the push window closes: a complete record ends the wait at once. The
    /// window is `push_wait` of quiet: each delivery that arrives moves its end out again (push
    /// is at-least-once, not prompt), never past the cycle's deadline.
    async fn await_deliveries(
        &mut self,
        run: &mut PushRun,
        token: &str,
        inbox: &dyn PushInbox,
        started: Instant,
        turn_may_end: bool,
    ) -> Settled {
        let mut window = Instant::now() + self.settings.push_wait;
        let first_new = self.obs.transitions.len();
        loop {
            let arrived = inbox.deliveries(token, run.deliveries).await;
            if !arrived.is_empty() {
                window = window.max(Instant::now() + self.settings.push_wait);
            }
            self.take_deliveries(run, arrived);
            // Settled: the terminal state was delivered (at any time), or, when the turn may
            // end there, an interrupted one during this wait (the caller then reads the task,
            // sends a follow-up and waits again).
            let delivered = |t: &&Transition| t.role == TaskRole::Push && t.source == Source::Push;
            let settled = if self.push_terminal_delivered() {
                Some(Settled::Terminal)
            } else if turn_may_end
                && self.obs.transitions[first_new..]
                    .iter()
                    .filter(delivered)
                    .any(|t| t.state.is_interrupted())
            {
                Some(Settled::Interrupted)
            } else {
                None
            };
            let now = Instant::now();
            let settled = match settled {
                Some(settled) => settled,
                None if now >= window => Settled::Quiet,
                None if now >= self.deadline => Settled::Deadline,
                None => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            run.waited_ms = started.elapsed().as_millis() as u64;
            run.wait_cut_short = settled == Settled::Deadline;
            self.step(format!(
                "  {} deliveries in {} ms",
                run.deliveries, run.waited_ms
            ));
            return settled;
        }
    }

    /// Whether the push task's terminal state reached the webhook.
    fn push_terminal_delivered(&self) -> bool {
        self.obs
            .transitions
            .iter()
            .any(|t| t.role == TaskRole::Push && t.source == Source::Push && t.state.is_terminal())
    }

    /// The cancel scenario: a task started without blocking, resubscribed to while it is live
    /// (where the card offers streaming), then canceled. The task is read after the cancel
    /// and once more after the resubscription ended: a cancel answered `canceled` must hold.
    /// Observes deliveries that reached the run's webhook, in the order they arrived.
    fn take_deliveries(&mut self, run: &mut PushRun, arrived: Vec<InboxDelivery>) {
        for delivery in arrived {
            run.deliveries += 1;
            if !delivery.token_matches {
                run.deliveries_without_token += 1;
            }
            if let Some(header) = delivery.token_header {
                run.deliveries_token_elsewhere += 1;
                run.token_header.get_or_insert(header);
            }
            let call = 1000 + run.deliveries as u32;
            match serde_json::from_slice::<Value>(&delivery.body) {
                Ok(body) => {
                    if self
                        .observe_at(
                            TaskRole::Push,
                            Source::Push,
                            call,
                            &body,
                            delivery.received_at,
                        )
                        .is_none()
                    {
                        run.malformed_deliveries += 1;
                    }
                }
                Err(_) => {
                    run.malformed_deliveries += 1;
                    self.problem(
                        TaskRole::Push,
                        format!("push delivery {} is not JSON", run.deliveries),
                    );
                }
            }
        }
    }

    /// Deliveries that arrived after the wait for the terminal one ended, read once at the
    /// cycle's end without waiting: a live state delivered after the end is evidence too
    /// (pushes out of order), and costs nothing to collect.
    async fn late_deliveries(&mut self, target: &Target<'_>, inbox: &dyn PushInbox) {
        let (Some((_, token)), Some(mut run)) = (&target.push, self.obs.push.take()) else {
            return;
        };
        if run.skipped.is_none() {
            let arrived = inbox.deliveries(token, run.deliveries).await;
            if !arrived.is_empty() {
                self.step(format!("push: {} late deliveries", arrived.len()));
            }
            self.take_deliveries(&mut run, arrived);
        }
        self.obs.push = Some(run);
    }

    async fn cancel(&mut self, text: &str, streaming: bool) {
        if self.out_of_time() {
            return;
        }
        self.step(format!("cancel task: send `{text}`, then CancelTask"));
        let out = Outgoing {
            text,
            task_id: None,
            context_id: None,
            non_blocking: true,
            webhook: None,
        };
        let (call, answer) = self.client.send("cancel", &out).await;
        if !self.answered(TaskRole::Cancel, call, answer) {
            return;
        }
        let Some(task_id) = self.ids(TaskRole::Cancel).task_id else {
            return;
        };
        let live = match self.last_state(TaskRole::Cancel) {
            Some(state) if streaming && !state.is_terminal() => {
                self.open_live(TaskRole::Cancel, state).await
            }
            _ => None,
        };
        let (call, answer) = self.client.cancel("cancel: CancelTask", &task_id).await;
        match answer {
            Answer::Result(value) => {
                self.observe(TaskRole::Cancel, Source::Response, call, &value);
            }
            Answer::Error { code, message } => {
                self.obs.cancel_error = Some(format!("error {code}: {message}"))
            }
            Answer::Broken(e) => self.obs.cancel_error = Some(e),
        }
        self.get(TaskRole::Cancel, "cancel: GetTask").await;
        match live {
            Some(live) => self.finish_live(live).await,
            None => tokio::time::sleep(self.settings.poll_interval).await,
        }
        self.get(TaskRole::Cancel, "cancel: GetTask, once more")
            .await;
    }
}

fn same_status(a: &Transition, b: &Transition) -> bool {
    a.state == b.state
        && a.timestamp == b.timestamp
        && a.history_len == b.history_len
        && a.source == b.source
}

fn empty_push() -> PushRun {
    PushRun {
        skipped: None,
        attempts: 0,
        registration_error: None,
        registration_skipped: None,
        deliveries: 0,
        deliveries_without_token: 0,
        deliveries_token_elsewhere: 0,
        token_header: None,
        malformed_deliveries: 0,
        waited_ms: 0,
        wait_cut_short: false,
    }
}

/// A lifecycle stream's record before its first frame.
fn lifecycle_stream(call: u32, event_stream: bool, content_type: Option<String>) -> StreamRun {
    StreamRun {
        role: TaskRole::Lifecycle,
        call,
        event_stream,
        content_type,
        frames: 0,
        malformed_frames: 0,
        events_after_terminal: 0,
        end: StreamEnd::Closed,
        resubscribe: false,
    }
}

/// How the reader's end reads in the observations.
fn stream_end(end: StreamStop) -> StreamEnd {
    match end {
        StreamStop::Closed => StreamEnd::Closed,
        StreamStop::Idle => StreamEnd::Idle,
        StreamStop::Deadline => StreamEnd::Deadline,
        StreamStop::TooManyEvents => StreamEnd::TooManyEvents,
        StreamStop::EventTooLarge => StreamEnd::EventTooLarge,
        StreamStop::Malformed(e) => StreamEnd::Error(format!("malformed frame: {e}")),
        StreamStop::Error(e) => StreamEnd::Error(e),
    }
}
