//! JUnit XML for CI systems: one suite of test cases, each passed, failed or skipped. The
//! subset every CI reader accepts (Jenkins, GitLab, GitHub actions' reporters).

use std::fmt::Write;

/// One test case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Case {
    pub classname: String,
    pub name: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Passed,
    Failed { message: String },
    Skipped { message: String },
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 allows no other control characters, even escaped.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The document: `<testsuites>` with one `<testsuite name="{suite}">`.
pub(crate) fn render(suite: &str, cases: &[Case]) -> String {
    let failures = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Failed { .. }))
        .count();
    let skipped = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Skipped { .. }))
        .count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let head = format!(
        "<testsuites name=\"{suite}\" tests=\"{n}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">\n  \
         <testsuite name=\"{suite}\" tests=\"{n}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">\n",
        suite = escape(suite),
        n = cases.len(),
    );
    xml.push_str(&head);
    for case in cases {
        let _ = write!(
            xml,
            "    <testcase classname=\"{}\" name=\"{}\"",
            escape(&case.classname),
            escape(&case.name)
        );
        match &case.outcome {
            Outcome::Passed => xml.push_str("/>\n"),
            Outcome::Failed { message } => {
                let _ = write!(
                    xml,
                    ">\n      <failure message=\"{m}\">{m}</failure>\n    </testcase>\n",
                    m = escape(message)
                );
            }
            Outcome::Skipped { message } => {
                let _ = write!(
                    xml,
                    ">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                    escape(message)
                );
            }
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_escapes() {
        let xml = render(
            "suite <1>",
            &[
                Case {
                    classname: "c".into(),
                    name: "ok".into(),
                    outcome: Outcome::Passed,
                },
                Case {
                    classname: "c".into(),
                    name: "bad".into(),
                    outcome: Outcome::Failed {
                        message: "a \"quoted\" & <tagged>\u{1} reason".into(),
                    },
                },
                Case {
                    classname: "c".into(),
                    name: "n/e".into(),
                    outcome: Outcome::Skipped {
                        message: "not exercised".into(),
                    },
                },
            ],
        );
        assert!(
            xml.contains(r#"tests="3" failures="1" errors="0" skipped="1""#),
            "{xml}"
        );
        assert!(xml.contains("suite &lt;1&gt;"));
        assert!(
            xml.contains("a &quot;quoted&quot; &amp; &lt;tagged&gt;  reason"),
            "{xml}"
        );
    }
}
