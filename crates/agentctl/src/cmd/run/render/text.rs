//! The model's text of one model call as the renderer shows it: the API key masked even
//! when it is split across deltas, and what was shown compared with the text the journal
//! keeps, so that what is printed ends with it.
//!
//! Invariants: no text [`StepText::push`] or [`StepText::flush`] returns holds the key; a
//! delta's text is held back only where its tail could be the start of the key (at most
//! the key's length less one character), and only until the next delta or the end of the
//! stream; [`StepText::complete`] says what to print so that the output ends with the
//! given text.

/// The API key the renderer masks: the host's (`agent_host::tools::api_key`: 8
/// characters or more, the rule the journal's text is masked by).
pub(super) fn api_key() -> Option<String> {
    agent_host::tools::api_key().map(str::to_owned)
}

/// What to print once a step's (or the run's) text is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Completion {
    /// What was shown ends with the text already.
    Done,
    /// Print this right after what was shown (the rest of the text).
    Rest(String),
    /// What was shown is not the text: print the whole text again, on a line of its own.
    Again(String),
}

/// The text of the current model call.
#[derive(Debug, Default)]
pub(super) struct StepText {
    /// Masks the key; holds back the longest tail that could be the start of it.
    mask: agent_host::tools::StreamMask,
    /// Shown so far (masked).
    shown: String,
    /// A line ended after `shown` (a note had to start on a line of its own): the rest of
    /// the text can no longer simply follow it.
    broken: bool,
}

impl StepText {
    pub(super) fn new(key: Option<String>) -> StepText {
        StepText {
            mask: agent_host::tools::StreamMask::new(key),
            ..StepText::default()
        }
    }

    /// Takes a delta; returns the text to show now, masked.
    pub(super) fn push(&mut self, delta: &str) -> String {
        let now = self.mask.push(delta);
        self.shown.push_str(&now);
        now
    }

    /// The stream ended: the text held back (no key: it was only a start of one).
    pub(super) fn flush(&mut self) -> String {
        let rest = self.mask.flush();
        self.shown.push_str(&rest);
        rest
    }

    /// Whether any of this call's text was shown.
    pub(super) fn shown_any(&self) -> bool {
        !self.shown.is_empty()
    }

    /// A line was ended after what was shown.
    pub(super) fn line_ended(&mut self) {
        if self.shown_any() {
            self.broken = true;
        }
    }

    /// Something else was printed after it: the output no longer ends with it.
    pub(super) fn moved_on(&mut self) {
        self.shown.clear();
        self.broken = false;
    }

    /// A new model call (the next step, or a retry): nothing of it was shown.
    pub(super) fn restart(&mut self) {
        self.mask.clear();
        self.moved_on();
    }

    /// What to print so that the output ends with `text` (masked, as the journal keeps it);
    /// from then on `text` counts as shown.
    pub(super) fn complete(&mut self, text: &str) -> Completion {
        let completion = if self.shown.ends_with(text) {
            Completion::Done
        } else if self.shown.is_empty() {
            Completion::Rest(text.to_string())
        } else if !self.broken
            && let Some(rest) = text.strip_prefix(self.shown.as_str())
        {
            Completion::Rest(rest.to_string())
        } else {
            Completion::Again(text.to_string())
        };
        self.shown = text.to_string();
        self.mask.clear();
        self.broken = false;
        completion
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-test-SECRET12345";

    fn shown(deltas: &[&str]) -> (Vec<String>, String) {
        let mut text = StepText::new(Some(KEY.to_string()));
        let mut each: Vec<String> = deltas.iter().map(|d| text.push(d)).collect();
        each.push(text.flush());
        let all = each.concat();
        (each, all)
    }

    #[test]
    fn a_key_split_across_deltas_is_masked() {
        let (each, all) = shown(&["the key is sk-te", "st-SEC", "RET12345, keep it"]);
        assert_eq!(all, "the key is ***, keep it");
        assert_eq!(each, ["the key is ", "", "***, keep it", ""]);
        // One character a delta.
        let text = format!("a{KEY}b{KEY}");
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let deltas: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(shown(&deltas).1, "a***b***");
    }

    #[test]
    fn only_what_could_start_the_key_is_held_back() {
        // Text that cannot start the key is shown at once, whole.
        let (each, _) = shown(&["hello ", "world"]);
        assert_eq!(each, ["hello ", "world", ""]);
        // A start of the key waits for the next delta; when it is not the key, it is shown.
        let (each, all) = shown(&["see sk-", "tea"]);
        assert_eq!(each, ["see ", "sk-tea", ""]);
        assert_eq!(all, "see sk-tea");
        // Held to the end of the stream, then shown as it is.
        let (each, _) = shown(&["ends with sk-test"]);
        assert_eq!(each, ["ends with ", "sk-test"]);
        // The longest such tail is held: `s` alone would miss a key starting at `sk-`.
        let (each, _) = shown(&["x sk-test-S"]);
        assert_eq!(each, ["x ", "sk-test-S"]);
        // Multi-byte text around it is cut at character boundaries only.
        let (_, all) = shown(&["é sk-", "test-SECRET12345 ✓"]);
        assert_eq!(all, "é *** ✓");
    }

    #[test]
    fn without_a_key_nothing_is_held_or_masked() {
        let mut text = StepText::new(None);
        assert_eq!(text.push("sk-test-"), "sk-test-");
        assert_eq!(text.flush(), "");
    }

    #[test]
    fn completion_prints_what_the_output_lacks() {
        let mut text = StepText::new(None);
        // Nothing streamed: the whole text.
        assert_eq!(
            text.complete("the answer"),
            Completion::Rest("the answer".into())
        );
        // Streamed whole: nothing; streamed in part: the rest.
        text.restart();
        text.push("hello");
        assert_eq!(text.complete("hello"), Completion::Done);
        text.restart();
        text.push("hel");
        assert_eq!(text.complete("hello"), Completion::Rest("lo".into()));
        // Streamed more than the text, ending with it (a steered response's parent, then its
        // successor): nothing.
        text.restart();
        text.push("parent... successor");
        assert_eq!(text.complete("successor"), Completion::Done);
        // Something else: the text again, on a line of its own.
        text.restart();
        text.push("other");
        assert_eq!(text.complete("hello"), Completion::Again("hello".into()));
        // A line ended in the middle: the rest cannot simply follow.
        text.restart();
        text.push("hel");
        text.line_ended();
        assert_eq!(text.complete("hello"), Completion::Again("hello".into()));
        // Once completed, the text counts as shown; after other output it does not.
        assert_eq!(text.complete("hello"), Completion::Done);
        text.moved_on();
        assert_eq!(text.complete("hello"), Completion::Rest("hello".into()));
    }
}
