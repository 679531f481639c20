//! The message dialect: the shapes v0.3 and v1.0 give the same request (a message's parts and
//! role, the send configuration, a push registration) and the JSON-RPC method names, whatever
//! transport carries them.

use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use super::{Op, Outgoing};

/// Which protocol generation's shapes to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// v0.2/v0.3: `message/send`…, lowercase states, `kind` discriminators, no version header.
    V03,
    /// v1.0: `SendMessage`…, `ROLE_USER`, `A2A-Version` on every call.
    V1,
}

impl Dialect {
    /// The `A2A-Version` a call carries: v1.0 agents refuse calls without it; v0.3 compat
    /// layers refuse calls with it.
    pub(super) fn version_header(self, version: &str) -> Option<HeaderValue> {
        match self {
            Dialect::V03 => None,
            Dialect::V1 => {
                Some(HeaderValue::from_str(version).unwrap_or(HeaderValue::from_static("1.0")))
            }
        }
    }

    /// The params of SendMessage / message/send (and their streaming forms).
    pub(super) fn send_params(self, out: &Outgoing<'_>) -> Value {
        let message_id = uuid::Uuid::new_v4().to_string();
        let mut message = match self {
            Dialect::V03 => json!({
                "kind": "message", "messageId": message_id, "role": "user",
                "parts": [{"kind": "text", "text": out.text}],
            }),
            Dialect::V1 => json!({
                "messageId": message_id, "role": "ROLE_USER", "parts": [{"text": out.text}],
            }),
        };
        if let Some(task_id) = out.task_id {
            message["taskId"] = task_id.into();
        }
        if let Some(context_id) = out.context_id {
            message["contextId"] = context_id.into();
        }
        let mut configuration = match self {
            Dialect::V03 => json!({ "blocking": !out.non_blocking }),
            Dialect::V1 => json!({ "returnImmediately": out.non_blocking }),
        };
        if let Some((url, token)) = out.webhook {
            let config = json!({ "url": url, "token": token });
            match self {
                // v0.3 `MessageSendConfiguration.pushNotificationConfig`.
                Dialect::V03 => configuration["pushNotificationConfig"] = config,
                // v1.0 `SendMessageConfiguration.taskPushNotificationConfig` (taskId left empty).
                Dialect::V1 => configuration["taskPushNotificationConfig"] = config,
            }
        }
        json!({ "message": message, "configuration": configuration })
    }

    /// The params of a push registration for `task_id`.
    pub(super) fn set_push_params(self, task_id: &str, url: &str, token: &str) -> Value {
        match self {
            Dialect::V03 => {
                json!({ "taskId": task_id, "pushNotificationConfig": { "url": url, "token": token } })
            }
            Dialect::V1 => json!({ "taskId": task_id, "url": url, "token": token }),
        }
    }

    /// The JSON-RPC method of an operation.
    pub(super) fn method(self, op: &Op) -> &'static str {
        let v1 = self == Dialect::V1;
        match op {
            Op::Send if v1 => "SendMessage",
            Op::Send => "message/send",
            Op::Stream if v1 => "SendStreamingMessage",
            Op::Stream => "message/stream",
            Op::Get(..) if v1 => "GetTask",
            Op::Get(..) => "tasks/get",
            Op::Cancel(_) if v1 => "CancelTask",
            Op::Cancel(_) => "tasks/cancel",
            Op::SetPush(_) if v1 => "CreateTaskPushNotificationConfig",
            Op::SetPush(_) => "tasks/pushNotificationConfig/set",
            Op::Subscribe(_) if v1 => "SubscribeToTask",
            Op::Subscribe(_) => "tasks/resubscribe",
            Op::ExtendedCard if v1 => "GetExtendedAgentCard",
            Op::ExtendedCard => "agent/getAuthenticatedExtendedCard",
        }
    }
}
