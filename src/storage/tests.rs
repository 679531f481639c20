//! Unit tests of `cardgate::storage`.

use super::*;

#[test]
fn database_urls_map_to_backends() {
    let table = [
        (None, Ok(DatabaseTarget::Sqlite(DEFAULT_SQLITE_PATH.into()))),
        (
            Some(""),
            Ok(DatabaseTarget::Sqlite(DEFAULT_SQLITE_PATH.into())),
        ),
        (
            Some("postgres://u@h/db"),
            Ok(DatabaseTarget::Postgres("postgres://u@h/db".into())),
        ),
        (
            Some("postgresql://u@h/db"),
            Ok(DatabaseTarget::Postgres("postgresql://u@h/db".into())),
        ),
        (
            Some("sqlite://x/y.db"),
            Ok(DatabaseTarget::Sqlite("x/y.db".into())),
        ),
        (
            Some("sqlite:y.db?mode=rwc"),
            Ok(DatabaseTarget::Sqlite("y.db".into())),
        ),
    ];
    for (input, expected) in table {
        assert_eq!(DatabaseTarget::parse(input), expected, "{input:?}");
    }
}

#[test]
fn unsupported_urls_name_the_accepted_forms_without_the_password() {
    let err = DatabaseTarget::parse(Some("mysql://root:hunter2@h/db")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("postgres://") && msg.contains("sqlite://"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(DatabaseTarget::parse(Some("sqlite:")).is_err());
}

/// The status values written into SQL text (`status = 'running'`, `status in (...)`)
/// are the domain's names: a literal retyped wrong would match no row and fail silently,
/// so each one is checked against the enum it stands for.
#[test]
fn status_literals_in_sql_are_the_domains_names() {
    use crate::domain::job::JobStatus;
    use crate::domain::probe::RunStatus;
    let quoted = |source: &str| -> Vec<String> {
        let mut found = Vec::new();
        for (i, _) in source.match_indices("status ") {
            let rest = &source[i + "status ".len()..];
            let clause = if let Some(r) = rest.strip_prefix("= '") {
                &r[..r.find('\'').unwrap_or(0)]
            } else if let Some(r) = rest.strip_prefix("in (") {
                &r[..r.find(')').unwrap_or(0)]
            } else {
                continue;
            };
            found.extend(
                clause
                    .split(',')
                    .map(|w| w.trim().trim_matches('\'').to_string())
                    .filter(|w| !w.is_empty() && !w.starts_with('$')),
            );
        }
        found
    };
    let jobs = quoted(include_str!("jobs.rs"));
    let runs = quoted(concat!(
        include_str!("probes/reads.rs"),
        include_str!("probes/runs.rs"),
        include_str!("probes/queue.rs"),
        include_str!("probes/retention.rs"),
        include_str!("probes/push.rs"),
        include_str!("probes/rows.rs"),
    ));
    assert!(jobs.len() > 5 && runs.len() > 5, "{jobs:?} {runs:?}");
    for word in &jobs {
        assert!(
            JobStatus::parse(word).is_some(),
            "jobs.rs: `{word}` is no job status"
        );
    }
    for word in &runs {
        // probes/ also reads the jobs table (a run's lease) in one statement.
        assert!(
            RunStatus::parse(word).is_some() || JobStatus::parse(word).is_some(),
            "probes/: `{word}` is no status"
        );
    }
}
