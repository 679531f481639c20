//! Unit tests of `cardgate::remote::grpc_transport`.

use super::*;
use serde_json::json;

#[test]
fn proto3_json_round_trips_the_shapes_the_probe_reads() {
    let event = json!({
        "statusUpdate": {
            "taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-03T10:00:00Z"}
        }
    });
    let parsed: proto::StreamResponse = decode(&event).expect("decodes");
    let Some(proto::stream_response::Payload::StatusUpdate(update)) = &parsed.payload else {
        panic!("a status update: {parsed:?}");
    };
    assert_eq!(
        update.status.as_ref().map(|s| s.state),
        Some(proto::TaskState::Completed as i32)
    );
    assert_eq!(serde_json::to_value(&parsed).expect("encodes"), event);
}

#[test]
fn a_missing_timestamp_stays_missing() {
    let task: proto::Task =
        decode(&json!({"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}})).expect("ok");
    let back = serde_json::to_value(&task).expect("encodes");
    assert_eq!(
        back,
        json!({"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}})
    );
}

#[test]
fn unknown_fields_from_an_agent_are_skipped() {
    let task: Result<proto::Task, _> =
        decode(&json!({"id": "t", "kind": "task", "status": {"state": "TASK_STATE_WORKING"}}));
    assert!(task.is_ok());
}

#[test]
fn error_details_read_as_the_json_rpc_error_data_of_v1() {
    use prost::Message as _;
    let info = rpc::ErrorInfo {
        reason: "TASK_NOT_FOUND".into(),
        domain: "a2a-protocol.org".into(),
        metadata: Default::default(),
    };
    let status = rpc::Status {
        code: 5,
        message: "Task not found".into(),
        details: vec![
            pbjson_types::Any {
                type_url: ERROR_INFO.into(),
                value: info.encode_to_vec().into(),
            },
            pbjson_types::Any {
                type_url: "type.googleapis.com/example.Unknown".into(),
                value: vec![1, 2, 3].into(),
            },
        ],
    };
    let details = status_details(&status.encode_to_vec());
    assert_eq!(
        details,
        [
            json!({"@type": ERROR_INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}),
            json!({"@type": "type.googleapis.com/example.Unknown", "value": "AQID"}),
        ]
    );
    let tonic_status = tonic::Status::with_details(
        tonic::Code::NotFound,
        "Task not found",
        status.encode_to_vec().into(),
    );
    let recorded = CallStatus::from_status(&tonic_status);
    assert_eq!(recorded.reason(), Some("TASK_NOT_FOUND"));
    assert_eq!(recorded.status, "NOT_FOUND");
}

#[test]
fn error_details_that_are_not_a_status_are_kept_not_dropped() {
    assert_eq!(status_details(&[]), Vec::<Value>::new());
    assert_eq!(
        status_details(&[0xff, 0xff]),
        [json!({"undecodable": "//8="})]
    );
}
