//! The push findings that are interop advice, not a failed capability: where the token
//! travelled (PUSH-TOKEN) and whether live states were delivered besides the end
//! (PUSH-EVERY-STATE). Both SHOULD: the run's own webhook URL already authenticates deliveries.

use super::{Fail, NotExercised, Pass, finding, of_role};
use crate::probe::rule::Rule;
use crate::probe::{Finding, Observations, PushRun, Source, TaskRole, Transition};

/// PUSH-TOKEN: deliveries carry the token the caller gave, in `X-A2A-Notification-Token` "or
/// similar" (SHOULD). The deliveries reach the run's own webhook URL, which already says whom
/// they are for, so a token elsewhere, or none, is an interop finding, not a failed push.
pub(super) fn push_token(run: &PushRun) -> Finding {
    const CODE: Rule = Rule::PushToken;
    if let Some(why) = &run.skipped {
        return finding(CODE, NotExercised, why.clone());
    }
    if run.deliveries == 0 {
        return finding(CODE, NotExercised, "nothing reached the webhook");
    }
    let missing = run.deliveries_without_token - run.deliveries_token_elsewhere;
    match (&run.token_header, missing) {
        (_, 0) if run.deliveries_token_elsewhere == 0 => finding(
            CODE,
            Pass,
            format!(
                "all {} deliveries carried the token in X-A2A-Notification-Token",
                run.deliveries
            ),
        ),
        (Some(header), 0) => finding(
            CODE,
            Fail,
            format!(
                "{} of {} deliveries carried the token in `{header}` instead of X-A2A-Notification-Token: a receiver that reads the standard header will not find it",
                run.deliveries_token_elsewhere, run.deliveries
            ),
        ),
        (_, missing) => finding(
            CODE,
            Fail,
            format!(
                "{missing} of {} deliveries carried no token: a receiver cannot tell them from forged ones",
                run.deliveries
            ),
        ),
    }
}

/// PUSH-EVERY-STATE: the deliveries follow the task through its states, not its end only (an
/// interop finding: the spec asks for updates on state changes, and a caller that only ever
/// hears the end learns nothing while the task runs).
pub(super) fn push_every_state(run: &PushRun, obs: &Observations) -> Finding {
    const CODE: Rule = Rule::PushEveryState;
    if let Some(why) = &run.skipped {
        return finding(CODE, NotExercised, why.clone());
    }
    let delivered: Vec<&Transition> = of_role(obs, TaskRole::Push)
        .into_iter()
        .filter(|t| t.source == Source::Push)
        .collect();
    let live = delivered.iter().filter(|t| !t.state.is_terminal()).count();
    let terminal = delivered.iter().any(|t| t.state.is_terminal());
    match (terminal, live) {
        (false, _) => finding(
            CODE,
            NotExercised,
            "the push task's terminal state was not delivered, so what came before it is not judged",
        ),
        (true, 0) => finding(
            CODE,
            Fail,
            "only the push task's terminal state was delivered: none of the states before it",
        ),
        (true, live) => finding(
            CODE,
            Pass,
            format!("{live} states before the terminal one were delivered, then the end"),
        ),
    }
}
