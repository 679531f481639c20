//! Badges: a subject's gate state as a shields-style SVG an agent's owner can put in a README.
//! It says the state and nothing else; the console and the API hold the reasons.

use maud::{Markup, html};

use crate::domain::gate::EffectiveGate;

/// Width of one character of 11 px Verdana, roughly: enough for the labels used here, which
/// are short and known in advance (the version and one of four states).
const CHAR_PX: f64 = 6.8;
const PAD_PX: f64 = 12.0;

fn width(text: &str) -> f64 {
    (text.chars().count() as f64 * CHAR_PX + PAD_PX).round()
}

/// The fill behind each state, readable with white text (contrast ≥ 4.5:1).
fn colour(gate: EffectiveGate) -> &'static str {
    match gate {
        EffectiveGate::LifecycleTrusted => "#1a7f37",
        EffectiveGate::CardTrusted => "#0a5ecf",
        EffectiveGate::Demoted => "#c21b2c",
        EffectiveGate::Untrusted => "#8a5300",
    }
}

/// The badge of `version` in `gate`: a complete SVG document.
pub(super) fn render(version: &str, gate: EffectiveGate) -> String {
    let label = format!("cardgate {version}");
    let state = gate.as_str();
    let (left, right) = (width(&label), width(state));
    let total = left + right;
    let markup: Markup = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(total) height="20" role="img"
            viewBox={ "0 0 " (total) " 20" } aria-label={ (label) ": " (state) } {
            title { (label) ": " (state) }
            linearGradient id="s" x2="0" y2="100%" {
                stop offset="0" stop-color="#bbb" stop-opacity=".1" {}
                stop offset="1" stop-opacity=".1" {}
            }
            clipPath id="r" { rect width=(total) height="20" rx="3" fill="#fff" {} }
            g clip-path="url(#r)" {
                rect width=(left) height="20" fill="#4a4a4a" {}
                rect x=(left) width=(right) height="20" fill=(colour(gate)) {}
                rect width=(total) height="20" fill="url(#s)" {}
            }
            g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif"
                font-size="11" {
                text x=(left / 2.0) y="14" { (label) }
                text x=(left + right / 2.0) y="14" { (state) }
            }
        }
    };
    markup.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_badge_is_a_closed_svg_document_naming_the_state_and_nothing_more() {
        let svg = render("1.0", EffectiveGate::Demoted);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>"));
        assert!(svg.contains(">cardgate 1.0<") && svg.contains(">demoted<"));
        assert!(svg.contains("#c21b2c"));
        // Every element is closed: an XML parser (an <img>) accepts it.
        assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
        assert_eq!(svg.matches("<stop").count(), svg.matches("</stop>").count());
    }

    #[test]
    fn the_right_half_grows_with_the_state() {
        let short = render("1.0", EffectiveGate::Demoted);
        let long = render("1.0", EffectiveGate::LifecycleTrusted);
        let width_of = |svg: &str| -> f64 {
            let at = svg.find("width=\"").unwrap() + 7;
            svg[at..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(width_of(&long) > width_of(&short));
    }
}
